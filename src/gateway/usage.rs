//! Usage as a provider's wire reports it: the fields one response event (or body) carries.
//! Later events of a stream override the fields they carry (Anthropic's `message_delta`
//! output count is cumulative, Gemini repeats `usageMetadata` with growing counts).

use crate::engine::attempt::Tokens;

/// The usage fields one event carried; `None`: the event did not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WireUsage {
    /// Input tokens not read from or written to the cache.
    pub input: Option<u64>,
    /// Output tokens (reasoning included).
    pub output: Option<u64>,
    /// Input tokens read from the prompt cache.
    pub cache_read: Option<u64>,
    /// Input tokens written to the prompt cache.
    pub cache_write: Option<u64>,
    /// The model the provider says answered.
    pub model: Option<String>,
}

impl WireUsage {
    /// Takes every field `later` carries.
    pub(crate) fn merge(&mut self, later: WireUsage) {
        self.input = later.input.or(self.input);
        self.output = later.output.or(self.output);
        self.cache_read = later.cache_read.or(self.cache_read);
        self.cache_write = later.cache_write.or(self.cache_write);
        self.model = later.model.or(self.model.take());
    }

    /// Whether any token count was seen.
    pub(crate) fn has_tokens(&self) -> bool {
        self.input.is_some()
            || self.output.is_some()
            || self.cache_read.is_some()
            || self.cache_write.is_some()
    }

    /// The counts, unseen ones as 0.
    pub(crate) fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input.unwrap_or(0),
            output: self.output.unwrap_or(0),
            cache_read: self.cache_read.unwrap_or(0),
            cache_write: self.cache_write.unwrap_or(0),
        }
    }
}

/// A count at `key` of `object`.
pub(crate) fn count(object: &serde_json::Value, key: &str) -> Option<u64> {
    object.get(key).and_then(serde_json::Value::as_u64)
}

/// The string at `key` of `object`.
pub(crate) fn text(object: &serde_json::Value, key: &str) -> Option<String> {
    object
        .get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// Input tokens without the cached part, for APIs whose input count includes it (OpenAI,
/// Gemini).
pub(crate) fn uncached(input: Option<u64>, cached: Option<u64>) -> Option<u64> {
    input.map(|input| input.saturating_sub(cached.unwrap_or(0)))
}
