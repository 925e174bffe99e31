//! The wall clock, read in one place (decisions take the time as an argument).

/// The current time as Unix milliseconds.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}
