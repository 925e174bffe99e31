//! Reading usage from an answer as it passes: server-sent events line by line (only lines
//! that mention usage are parsed), a whole JSON body at its end. What was seen is recorded
//! when the answer ends or is dropped (a client that went away mid-stream still pays for
//! what the provider counted so far).

use std::sync::Arc;

use memchr::memmem;
use serde_json::Value;

use super::meter::Meter;
use super::provider::Provider;
use super::usage::WireUsage;

/// Longest SSE line or JSON body kept to read usage from; longer ones are passed on unread.
const MAX_KEPT: usize = 16 * 1024 * 1024;

/// How the answer is framed.
enum Framing {
    /// `text/event-stream`: the current, unfinished line.
    Events { line: Vec<u8>, skipping: bool },
    /// One JSON document, kept until the end.
    Json { body: Vec<u8>, skipping: bool },
}

/// Watches one answer's bytes and records its usage in the meter.
pub(crate) struct UsageTap {
    provider: Provider,
    requested_model: Option<String>,
    meter: Arc<Meter>,
    framing: Framing,
    seen: WireUsage,
}

impl UsageTap {
    /// A tap for an answer of `provider` to a call of `requested_model`; `events` when the
    /// answer is a server-sent event stream.
    pub(super) fn new(
        provider: Provider,
        requested_model: Option<String>,
        meter: Arc<Meter>,
        events: bool,
    ) -> UsageTap {
        let framing = if events {
            Framing::Events {
                line: Vec::new(),
                skipping: false,
            }
        } else {
            Framing::Json {
                body: Vec::new(),
                skipping: false,
            }
        };
        UsageTap {
            provider,
            requested_model,
            meter,
            framing,
            seen: WireUsage::default(),
        }
    }

    /// Looks at the next chunk of the answer.
    pub(super) fn feed(&mut self, chunk: &[u8]) {
        match &mut self.framing {
            Framing::Json { body, skipping } => keep(body, skipping, chunk),
            Framing::Events { line, skipping } => {
                let (mut pending, mut skip) = (std::mem::take(line), std::mem::take(skipping));
                let mut rest = chunk;
                while let Some(end) = memchr::memchr(b'\n', rest) {
                    keep(&mut pending, &mut skip, &rest[..end]);
                    if !skip {
                        self.event_line(&pending);
                    }
                    pending.clear();
                    skip = false;
                    rest = &rest[end + 1..];
                }
                keep(&mut pending, &mut skip, rest);
                self.framing = Framing::Events {
                    line: pending,
                    skipping: skip,
                };
            }
        }
    }

    /// One complete line of the event stream: a `data:` line that mentions usage is read.
    fn event_line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        if memmem::find(data, b"sage").is_none() {
            return;
        }
        if let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii()) {
            self.take(&event);
        }
    }

    fn take(&mut self, event: &Value) {
        if let Some(usage) = self.provider.usage(event) {
            self.seen.merge(usage);
        }
    }
}

/// Appends `bytes` to `kept` unless it would grow past [`MAX_KEPT`] (then the rest of the
/// line or body is skipped).
fn keep(kept: &mut Vec<u8>, skipping: &mut bool, bytes: &[u8]) {
    if *skipping {
        return;
    }
    if kept.len() + bytes.len() > MAX_KEPT {
        *skipping = true;
        kept.clear();
    } else {
        kept.extend_from_slice(bytes);
    }
}

impl Drop for UsageTap {
    fn drop(&mut self) {
        if let Framing::Json { body, skipping } = &mut self.framing
            && !*skipping
            && let Ok(document) = serde_json::from_slice::<Value>(body)
        {
            self.take(&document);
        }
        if let Framing::Events { line, skipping } = &mut self.framing
            && !*skipping
            && !line.is_empty()
        {
            let last = std::mem::take(line);
            self.event_line(&last);
        }
        if self.seen.has_tokens() {
            self.meter
                .record(&self.seen, self.requested_model.as_deref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::Tokens;
    use crate::gateway::meter::Allowance;
    use crate::gateway::prices::PriceTable;

    fn meter() -> Arc<Meter> {
        Arc::new(Meter::new(PriceTable::defaults(), Allowance::default()))
    }

    const STREAM: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":321,\"output_tokens\":1}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage talk\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":17}}\n\n",
    );

    #[test]
    fn usage_split_across_chunks_at_every_byte_is_read() {
        for size in [1, 2, 7, 64, STREAM.len()] {
            let meter = meter();
            let mut tap = UsageTap::new(Provider::Anthropic, None, meter.clone(), true);
            for chunk in STREAM.as_bytes().chunks(size) {
                tap.feed(chunk);
            }
            drop(tap);
            assert_eq!(
                meter.metered().tokens,
                Tokens::new(321, 17),
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn a_stream_dropped_after_its_start_records_the_input_it_announced() {
        let meter = meter();
        let mut tap = UsageTap::new(Provider::Anthropic, None, meter.clone(), true);
        tap.feed(&STREAM.as_bytes()[..STREAM.find("event: content").unwrap_or(0)]);
        drop(tap);
        assert_eq!(meter.metered().tokens, Tokens::new(321, 1));
    }

    #[test]
    fn a_json_answer_is_read_at_its_end() {
        let meter = meter();
        let mut tap = UsageTap::new(
            Provider::Gemini,
            Some("gemini-2.5-pro".into()),
            meter.clone(),
            false,
        );
        tap.feed(br#"{"candidates":[],"usageMetadata":{"promptTokenCount":40,"#);
        tap.feed(br#""candidatesTokenCount":2}}"#);
        drop(tap);
        let metered = meter.metered();
        assert_eq!(metered.tokens, Tokens::new(40, 2));
        assert!(metered.cost.is_some(), "priced by the requested model");
    }

    #[test]
    fn an_answer_without_usage_records_nothing() {
        let meter = meter();
        let mut tap = UsageTap::new(Provider::Openai, None, meter.clone(), false);
        tap.feed(br#"{"error":{"message":"overloaded"}}"#);
        drop(tap);
        assert_eq!(meter.metered().tokens, Tokens::default());
    }
}
