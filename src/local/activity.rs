//! Short, one-line descriptions of what an agent is doing, from the runner's stdout JSON
//! lines (session updates and lifecycle lines).

use serde_json::Value;

/// Longest activity description, in characters.
pub(crate) const MAX_ACTIVITY_CHARS: usize = 80;

const KIND_KEYS: [&str; 5] = ["sessionUpdate", "kind", "event", "type", "phase"];
const DETAIL_KEYS: [&str; 8] = [
    "title",
    "tool",
    "text",
    "message",
    "stopReason",
    "status",
    "path",
    "content",
];

/// Describes one runner stdout line, or `None` for a blank line.
pub(crate) fn describe(line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else {
        return Some(truncate(line, MAX_ACTIVITY_CHARS));
    };
    let object = Value::Object(object);
    let kind = find_string(&object, &KIND_KEYS, 3);
    let detail = find_string(&object, &DETAIL_KEYS, 3);
    let text = match (kind, detail) {
        (Some(kind), Some(detail)) => format!("{kind}: {detail}"),
        (Some(only), None) | (None, Some(only)) => only,
        (None, None) => line.to_string(),
    };
    Some(truncate(&text, MAX_ACTIVITY_CHARS))
}

/// The first string value under one of `keys`, searching nested objects breadth-first down
/// to `depth` levels.
fn find_string(value: &Value, keys: &[&str], depth: usize) -> Option<String> {
    let Value::Object(object) = value else {
        return None;
    };
    for key in keys {
        match object.get(*key) {
            Some(Value::String(text)) if !text.trim().is_empty() => return Some(text.clone()),
            Some(Value::Number(number)) => return Some(number.to_string()),
            _ => {}
        }
    }
    if depth == 0 {
        return None;
    }
    object
        .values()
        .find_map(|nested| find_string(nested, keys, depth - 1))
}

/// `text` on one line (whitespace runs collapsed), cut to `max` characters with `…`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_update_is_described_by_its_kind_and_title() {
        let line = r#"{"sessionUpdate":"tool_call","title":"Write hello.txt","status":"pending"}"#;
        assert_eq!(
            describe(line).as_deref(),
            Some("tool_call: Write hello.txt")
        );
    }

    #[test]
    fn nested_fields_are_found() {
        let line = r#"{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}"#;
        assert_eq!(describe(line).as_deref(), Some("agent_message_chunk: hi"));
    }

    #[test]
    fn a_runner_update_line_is_described_by_its_update_kind_and_text() {
        let line = r#"{"ts":1,"event":"update","kind":"agent_message_chunk","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Wrote it."}}}"#;
        assert_eq!(
            describe(line).as_deref(),
            Some("agent_message_chunk: Wrote it.")
        );
    }

    #[test]
    fn a_runner_lifecycle_line_is_described_by_its_event() {
        let line = r#"{"ts":1,"event":"permission","title":"Write a.txt","allowed":true}"#;
        assert_eq!(describe(line).as_deref(), Some("permission: Write a.txt"));
    }

    #[test]
    fn a_line_that_is_not_json_is_shown_as_is() {
        assert_eq!(describe("plain words").as_deref(), Some("plain words"));
    }

    #[test]
    fn a_blank_line_is_no_activity() {
        assert_eq!(describe("   "), None);
    }

    #[test]
    fn long_text_is_cut_to_one_short_line() {
        let text = format!("first\nsecond {}", "x".repeat(200));
        let cut = truncate(&text, 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(cut.starts_with("first second") && cut.ends_with('…'));
    }
}
