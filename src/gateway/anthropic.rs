//! The Anthropic Messages API's usage: `message_start.message.usage` (input and cache
//! counts, the first output count) and `message_delta.usage` (the cumulative output count,
//! sometimes input counts) when streamed; `usage` of the message otherwise.

use serde_json::Value;

use super::usage::{WireUsage, count, text};

/// The usage one event or one whole message carries.
pub(crate) fn usage(event: &Value) -> Option<WireUsage> {
    let (usage, model) = match event.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            let message = event.get("message")?;
            (message.get("usage")?, text(message, "model"))
        }
        Some("message_delta") => (event.get("usage")?, None),
        Some("message") => (event.get("usage")?, text(event, "model")),
        _ => return None,
    };
    Some(WireUsage {
        input: count(usage, "input_tokens"),
        output: count(usage, "output_tokens"),
        cache_read: count(usage, "cache_read_input_tokens"),
        cache_write: count(usage, "cache_creation_input_tokens"),
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stream_gives_input_at_the_start_and_the_output_in_its_last_delta() {
        let mut seen = WireUsage::default();
        for event in [
            json!({"type":"message_start","message":{"model":"claude-opus-4-8","usage":{"input_tokens":120,"cache_read_input_tokens":30,"cache_creation_input_tokens":7,"output_tokens":1}}}),
            json!({"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}),
            json!({"type":"message_delta","usage":{"output_tokens":42}}),
        ] {
            if let Some(usage) = usage(&event) {
                seen.merge(usage);
            }
        }
        assert_eq!(
            (seen.input, seen.output, seen.cache_read, seen.cache_write),
            (Some(120), Some(42), Some(30), Some(7))
        );
        assert_eq!(seen.model.as_deref(), Some("claude-opus-4-8"));
    }

    #[test]
    fn a_whole_message_carries_its_usage() {
        let message =
            json!({"type":"message","model":"m","usage":{"input_tokens":5,"output_tokens":6}});
        let seen = usage(&message).expect("usage");
        assert_eq!((seen.input, seen.output), (Some(5), Some(6)));
    }
}
