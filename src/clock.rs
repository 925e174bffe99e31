//! The wall clock, read in one place (decisions take the time as an argument), and
//! durations as people write and read them (flags, agent scripts, messages).

use std::time::Duration;

/// The current time as Unix milliseconds.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// A duration that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("invalid duration `{text}`: {reason}; write it like 15s, 10m, 1h or 1h 30m")]
pub struct DurationError {
    text: String,
    reason: String,
}

/// A duration as people write it: a number and a unit, several summed (`15s`, `10m`,
/// `1h`, `360s`, `1h 30m`, `500ms`, `2 minutes`, `1d`), jiff's friendly format; ISO 8601
/// (`PT15S`) also reads. Units go up to weeks (a day is 24 hours); negative durations are
/// refused.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let error = |reason: String| DurationError {
        text: text.to_owned(),
        reason,
    };
    let span: jiff::Span = text.trim().parse().map_err(|e| error(format!("{e}")))?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| error(format!("{e}")))?;
    Duration::try_from(signed).map_err(|_| error("a duration cannot be negative".to_owned()))
}

/// A duration as people read it (`5m`, `1h 30m`, `1s 500ms`); [`parse_duration`] reads it
/// back.
pub fn format_duration(duration: Duration) -> String {
    match jiff::SignedDuration::try_from(duration) {
        Ok(signed) => format!("{signed:#}"),
        Err(_) => format!("{}s", duration.as_secs()),
    }
}

/// A Unix time in ms as RFC 3339 (empty when out of range).
pub(crate) fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn durations_read_in_the_forms_the_flags_default_to() {
        let forms = [
            ("15s", secs(15)),
            ("10m", secs(600)),
            ("1h", secs(3600)),
            ("360s", secs(360)),
            ("2s", secs(2)),
            ("300s", secs(300)),
        ];
        for (text, expected) in forms {
            assert_eq!(parse_duration(text).ok(), Some(expected), "{text}");
        }
    }

    #[test]
    fn durations_read_with_several_units_and_spelled_out_units() {
        assert_eq!(parse_duration("1h 30m").ok(), Some(secs(5400)));
        assert_eq!(parse_duration("1m30s").ok(), Some(secs(90)));
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_duration("2 minutes").ok(), Some(secs(120)));
        assert_eq!(parse_duration("1d").ok(), Some(secs(86_400)));
        assert_eq!(parse_duration("1w").ok(), Some(secs(7 * 86_400)));
    }

    #[test]
    fn a_number_without_a_unit_is_refused_naming_the_text_and_the_forms() {
        let error = parse_duration("15").map(|_| ()).unwrap_err().to_string();
        assert!(error.starts_with("invalid duration `15`"), "{error}");
        assert!(error.contains("15s, 10m, 1h"), "{error}");
    }

    #[test]
    fn a_negative_duration_is_refused() {
        let error = parse_duration("-5s").map(|_| ()).unwrap_err().to_string();
        assert!(error.contains("cannot be negative"), "{error}");
    }

    #[test]
    fn durations_are_shown_in_their_largest_units() {
        assert_eq!(format_duration(secs(300)), "5m");
        assert_eq!(format_duration(secs(5400)), "1h 30m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(format_duration(secs(0)), "0s");
    }

    #[test]
    fn a_shown_duration_reads_back() {
        for duration in [
            secs(1),
            secs(90),
            secs(3600 + 1),
            Duration::from_millis(250),
        ] {
            assert_eq!(
                parse_duration(&format_duration(duration)).ok(),
                Some(duration)
            );
        }
    }
}
