//! What the runner learns from the agent while it drives one attempt: the phase of the
//! conversation, the prompt turn's message text (sigils), output count and usage.

use agent_client_protocol::v1::schema::{ContentBlock, SessionUpdate};
use serde::Deserialize;

use super::events::char_prefix;
use super::protocol::TurnUsage;
use super::reports;
use crate::engine::attempt::Usage;
use crate::engine::sigils::{SigilScanner, Sigils};

/// How much of the turn's message text is kept for recognising a usage-limit report.
const TEXT_KEPT_FOR_EXHAUSTION: usize = 64 * 1024;

/// How far the conversation with the agent got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// Spawned, `initialize` not answered yet.
    #[default]
    Starting,
    /// `initialize` answered, no session yet.
    Initialized,
    /// `session/new` answered, prompt not sent yet.
    SessionCreated,
    /// The prompt was sent.
    Prompted,
}

impl Phase {
    /// Completes "the agent exited ..." with where it was.
    pub fn describe(self) -> &'static str {
        match self {
            Phase::Starting => "before answering initialize",
            Phase::Initialized => "before creating a session",
            Phase::SessionCreated => "before the prompt was sent",
            Phase::Prompted => "before answering the prompt",
        }
    }

    /// The request the agent had yet to answer in this phase.
    pub fn pending_request(self) -> &'static str {
        match self {
            Phase::Starting => "initialize",
            Phase::Initialized => "session/new",
            Phase::SessionCreated | Phase::Prompted => "session/prompt",
        }
    }
}

/// The state of the attempt's conversation, shared by the ACP handlers.
#[derive(Debug)]
pub struct TurnState {
    /// How far the conversation got.
    pub phase: Phase,
    /// Session updates received since the prompt was sent.
    pub updates_in_turn: usize,
    /// Tokens and cost reported so far.
    pub usage: Usage,
    /// The agent's name and version, from `initialize`.
    pub agent: Option<String>,
    /// From runner start to the answer to `initialize`, milliseconds.
    pub initialize_ms: Option<u64>,
    /// The model the session uses, as the agent last reported it.
    pub model: Option<String>,
    /// Errors the agent reported in this turn's session updates.
    pub reports: reports::TurnReports,
    scanner: SigilScanner,
    text_head: String,
}

impl Default for TurnState {
    fn default() -> Self {
        Self {
            phase: Phase::default(),
            updates_in_turn: 0,
            usage: Usage::default(),
            agent: None,
            initialize_ms: None,
            model: None,
            reports: reports::TurnReports::default(),
            scanner: SigilScanner::new(),
            text_head: String::new(),
        }
    }
}

impl TurnState {
    /// Takes in one `session/update` (raw JSON); returns its kind for the log.
    pub fn record_update(&mut self, update: &serde_json::Value) {
        let counted = self.phase == Phase::Prompted;
        if counted {
            self.updates_in_turn += 1;
            self.reports.record(update);
        }
        if let Some(model) = reports::model_in_update(update) {
            self.model = Some(model);
        }
        match SessionUpdate::deserialize(update) {
            Ok(SessionUpdate::AgentMessageChunk(chunk))
                if counted && !reports::is_informational(update) =>
            {
                if let ContentBlock::Text(text) = chunk.content {
                    self.push_text(&text.text);
                }
            }
            Ok(SessionUpdate::UsageUpdate(usage)) => {
                if let Some(cost) = usage.cost
                    && cost.currency.eq_ignore_ascii_case("USD")
                {
                    self.usage.cost_usd = Some(cost.amount);
                }
            }
            _ => {}
        }
    }

    /// Takes in the prompt response's `_meta`: tokens and model agents report there
    /// (used when the response carries no standard usage).
    pub fn record_response_meta(&mut self, meta: &serde_json::Value) {
        if self.usage.total_tokens() == 0
            && let Some((input, output)) = reports::tokens_in_response_meta(meta)
        {
            self.usage.input_tokens = input;
            self.usage.output_tokens = output;
        }
        if let Some(model) = reports::model_in_response_meta(meta) {
            self.model = Some(model);
        }
    }

    /// Takes in the token usage of the prompt response.
    pub fn record_turn_usage(&mut self, usage: &TurnUsage) {
        self.usage.input_tokens = usage.input_tokens;
        self.usage.output_tokens = usage.output_tokens;
        self.usage.cache_read_tokens = usage.cached_read_tokens.unwrap_or(0);
        self.usage.cache_write_tokens = usage.cached_write_tokens.unwrap_or(0);
    }

    /// The start of the turn's message text (for usage-limit reports).
    pub fn text_head(&self) -> &str {
        &self.text_head
    }

    /// The sigils in the turn's message text.
    pub fn take_sigils(&mut self) -> Sigils {
        std::mem::replace(&mut self.scanner, SigilScanner::new()).finish()
    }

    fn push_text(&mut self, text: &str) {
        self.scanner.push(text);
        let room = TEXT_KEPT_FOR_EXHAUSTION.saturating_sub(self.text_head.len());
        if room > 0 {
            self.text_head.push_str(char_prefix(text, room));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(text: &str) -> serde_json::Value {
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
    }

    #[test]
    fn text_before_the_prompt_is_not_collected() {
        let mut turn = TurnState {
            phase: Phase::SessionCreated,
            ..Default::default()
        };
        turn.record_update(&chunk("old history"));
        assert_eq!(turn.updates_in_turn, 0);
        assert_eq!(turn.text_head(), "");
    }

    #[test]
    fn text_after_the_prompt_is_collected() {
        let mut turn = TurnState {
            phase: Phase::Prompted,
            ..Default::default()
        };
        turn.record_update(&chunk("hello "));
        turn.record_update(&chunk("world"));
        assert_eq!(turn.updates_in_turn, 2);
        assert_eq!(turn.text_head(), "hello world");
    }

    #[test]
    fn a_usage_update_in_dollars_sets_the_cost() {
        let mut turn = TurnState::default();
        turn.record_update(&json!({
            "sessionUpdate": "usage_update", "used": 10, "size": 100,
            "cost": {"amount": 0.25, "currency": "USD"}
        }));
        assert_eq!(turn.usage.cost_usd, Some(0.25));
    }

    #[test]
    fn an_unknown_update_kind_still_counts_as_output() {
        let mut turn = TurnState {
            phase: Phase::Prompted,
            ..Default::default()
        };
        turn.record_update(&json!({"sessionUpdate": "something_new"}));
        assert_eq!(turn.updates_in_turn, 1);
    }
}
