//! The Gemini API's usage: `usageMetadata` of a `GenerateContentResponse` (each streamed
//! chunk repeats it with the counts so far). The prompt count includes cached tokens, which
//! are taken out of `input`; thinking tokens are output.

use serde_json::Value;

use super::usage::{WireUsage, count, text, uncached};

/// The usage one response (or streamed chunk) carries.
pub(crate) fn usage(event: &Value) -> Option<WireUsage> {
    let metadata = event.get("usageMetadata")?;
    let cached = count(metadata, "cachedContentTokenCount");
    let candidates = count(metadata, "candidatesTokenCount");
    let thoughts = count(metadata, "thoughtsTokenCount");
    let output = match (candidates, thoughts) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    Some(WireUsage {
        input: uncached(count(metadata, "promptTokenCount"), cached),
        output,
        cache_read: cached,
        cache_write: None,
        model: text(event, "modelVersion"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_metadata_counts_thoughts_as_output_and_cached_apart() {
        let chunk = json!({"modelVersion":"gemini-2.5-pro","usageMetadata":{
            "promptTokenCount":200,"cachedContentTokenCount":50,"candidatesTokenCount":10,"thoughtsTokenCount":5}});
        let seen = usage(&chunk).expect("usage");
        assert_eq!(
            (seen.input, seen.output, seen.cache_read),
            (Some(150), Some(15), Some(50))
        );
        assert_eq!(seen.model.as_deref(), Some("gemini-2.5-pro"));
    }
}
