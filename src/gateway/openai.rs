//! The OpenAI APIs' usage. Responses: `response.completed` (also `response.incomplete`,
//! `response.failed`) carries `response.usage`, as does a whole response. Chat Completions:
//! the last chunk (with `stream_options.include_usage`) or the whole completion carries
//! `usage`. Input counts include cached tokens, which are taken out of `input`.

use serde_json::Value;

use super::usage::{WireUsage, count, text, uncached};

/// The usage one Responses event, Responses object, chat chunk or chat completion carries.
pub(crate) fn usage(event: &Value) -> Option<WireUsage> {
    let object = match event.get("response") {
        Some(response) if response.is_object() => response,
        _ => event,
    };
    let usage = object.get("usage").filter(|usage| usage.is_object())?;
    if usage.get("input_tokens").is_some() {
        let cached = usage
            .get("input_tokens_details")
            .and_then(|details| count(details, "cached_tokens"));
        return Some(WireUsage {
            input: uncached(count(usage, "input_tokens"), cached),
            output: count(usage, "output_tokens"),
            cache_read: cached,
            cache_write: None,
            model: text(object, "model"),
        });
    }
    let cached = usage
        .get("prompt_tokens_details")
        .and_then(|details| count(details, "cached_tokens"));
    Some(WireUsage {
        input: uncached(count(usage, "prompt_tokens"), cached),
        output: count(usage, "completion_tokens"),
        cache_read: cached,
        cache_write: None,
        model: text(object, "model"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn response_completed_gives_the_usage_without_the_cached_input() {
        let event = json!({"type":"response.completed","response":{"model":"gpt-5.5","usage":{
            "input_tokens":1000,"input_tokens_details":{"cached_tokens":400},"output_tokens":50}}});
        let seen = usage(&event).expect("usage");
        assert_eq!(
            (seen.input, seen.output, seen.cache_read),
            (Some(600), Some(50), Some(400))
        );
        assert_eq!(seen.model.as_deref(), Some("gpt-5.5"));
    }

    #[test]
    fn a_text_delta_carries_no_usage() {
        let event = json!({"type":"response.output_text.delta","delta":"usage"});
        assert_eq!(usage(&event), None);
    }

    #[test]
    fn the_last_chat_chunk_gives_prompt_and_completion_tokens() {
        let chunk = json!({"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9}});
        let seen = usage(&chunk).expect("usage");
        assert_eq!((seen.input, seen.output), (Some(30), Some(9)));
    }

    #[test]
    fn a_chat_chunk_with_null_usage_carries_none() {
        let chunk = json!({"choices":[{"delta":{"content":"x"}}],"usage":null});
        assert_eq!(usage(&chunk), None);
    }
}
