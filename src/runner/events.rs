//! The runner's event log: one JSON object per line (session updates and lifecycle
//! steps), with huge strings shortened so a single line stays readable.

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::clock::now_ms;
use crate::sync::lock;

/// Strings longer than this many bytes are shortened in event lines.
pub(crate) const MAX_LOGGED_STRING: usize = 2048;

type Sink = Arc<Mutex<Box<dyn Write + Send>>>;

/// A destination for JSON event lines; cheap to clone.
#[derive(Clone, Default)]
pub struct EventLog {
    sink: Option<Sink>,
}

impl fmt::Debug for EventLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.sink.is_some() {
            "EventLog(writer)"
        } else {
            "EventLog(discard)"
        })
    }
}

impl EventLog {
    /// Writes events to the process's stdout.
    pub fn stdout() -> Self {
        Self::to_writer(std::io::stdout())
    }

    /// Drops every event.
    pub fn discard() -> Self {
        Self { sink: None }
    }

    /// Writes events to any writer.
    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        Self {
            sink: Some(Arc::new(Mutex::new(Box::new(writer)))),
        }
    }

    /// Writes one event line: `{"ts": <unix ms>, "event": <name>, ...fields}`.
    pub fn emit(&self, event: &str, fields: Value) {
        let Some(sink) = &self.sink else { return };
        let line = event_line(now_ms(), event, fields);
        let mut writer = lock(sink);
        // The event log is best effort: a closed stdout must not fail the attempt.
        let _ = writeln!(writer, "{line}");
        let _ = writer.flush();
    }
}

/// Builds one event line with long strings shortened; `ts` and `event` come first.
pub(crate) fn event_line(ts_ms: i64, event: &str, fields: Value) -> String {
    let mut line = format!("{{\"ts\":{ts_ms},\"event\":{}", Value::from(event));
    let fields = match shorten_strings(fields) {
        Value::Object(fields) => fields,
        Value::Null => Map::new(),
        other => Map::from_iter([("data".to_string(), other)]),
    };
    for (key, value) in fields {
        line.push(',');
        line.push_str(&Value::from(key).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push('}');
    line
}

/// Replaces every string longer than [`MAX_LOGGED_STRING`] with its head and a note of
/// how many bytes were left out.
pub(crate) fn shorten_strings(value: Value) -> Value {
    match value {
        Value::String(text) if text.len() > MAX_LOGGED_STRING => {
            let head = char_prefix(&text, MAX_LOGGED_STRING);
            Value::String(format!("{head}…[{} more bytes]", text.len() - head.len()))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(shorten_strings).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key, shorten_strings(value)))
                .collect(),
        ),
        other => other,
    }
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a char boundary.
pub(crate) fn char_prefix(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_strings_are_shortened_with_a_note_of_the_rest() {
        let long = "x".repeat(MAX_LOGGED_STRING + 10);
        let line = event_line(1, "update", json!({"text": long}));
        let value: Value = serde_json::from_str(&line).unwrap();
        let text = value["text"].as_str().unwrap();
        assert!(text.starts_with(&"x".repeat(MAX_LOGGED_STRING)));
        assert!(text.ends_with("…[10 more bytes]"));
    }

    #[test]
    fn event_lines_carry_time_and_name_before_the_fields() {
        let line = event_line(42, "spawned", json!({"pid": 7}));
        assert_eq!(line, r#"{"ts":42,"event":"spawned","pid":7}"#);
    }

    #[test]
    fn char_prefix_never_splits_a_character() {
        assert_eq!(char_prefix("héllo", 2), "h");
    }
}
