//! What the runner learns from the agent while it drives one attempt: the phase of the
//! conversation, the prompt turn's message text (sigils), output count and usage.

use agent_client_protocol::v1::schema::{ContentBlock, ContentChunk, MessageId, SessionUpdate};
use serde::Deserialize;

use super::protocol::TurnUsage;
use super::reports;
use crate::engine::attempt::{RanBy, Tokens, Usage};
use crate::engine::sigils::{SigilScanner, Sigils};

/// What the sigil scanner reads for an image, resource or other non-text content block.
const NON_TEXT_CONTENT: &str = "\u{FFFC}";

/// How far the conversation with the agent got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Phase {
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
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Phase::Starting => "before answering initialize",
            Phase::Initialized => "before creating a session",
            Phase::SessionCreated => "before the prompt was sent",
            Phase::Prompted => "before answering the prompt",
        }
    }

    /// The request the agent had yet to answer in this phase.
    pub(crate) fn pending_request(self) -> &'static str {
        match self {
            Phase::Starting => "initialize",
            Phase::Initialized => "session/new",
            Phase::SessionCreated | Phase::Prompted => "session/prompt",
        }
    }
}

/// The state of the attempt's conversation, shared by the ACP handlers.
#[derive(Debug)]
pub(crate) struct TurnState {
    /// How far the conversation got.
    pub phase: Phase,
    /// Session updates received since the prompt was sent.
    pub updates_in_turn: usize,
    /// Tokens and cost reported so far.
    pub usage: Usage,
    /// The agent (its name and version, from `initialize`), the model the session uses
    /// (as the agent last reported it) and the model the runner asked for.
    pub ran_by: RanBy,
    /// From runner start to the answer to `initialize`, milliseconds.
    pub initialize_ms: Option<u64>,
    /// Errors the agent reported in this turn's session updates.
    pub reports: reports::TurnReports,
    /// The agent rejected the model the runner asked for (`--model`): no prompt was sent.
    pub model_rejected: Option<crate::engine::attempt::Misconfiguration>,
    /// Why the agent could not be put in the mode where it asks before it acts.
    pub mode_problem: Option<String>,
    scanner: SigilScanner,
    /// The `messageId` of the agent message being read, when the agent sends one.
    message_id: Option<MessageId>,
    /// The text of the agent message being read (at most [`MAX_FINAL_MESSAGE`] bytes).
    message: String,
    /// The last agent message with text: where a proposal counts, as the verdicts do.
    final_message: String,
}

/// Most bytes of an agent message kept for its proposal (a proposal is a few tasks; the
/// proposal ConfigMap holds well under an object's 1 MiB).
const MAX_FINAL_MESSAGE: usize = 512 * 1024;

impl Default for TurnState {
    fn default() -> Self {
        Self {
            phase: Phase::default(),
            updates_in_turn: 0,
            usage: Usage::default(),
            ran_by: RanBy::default(),
            initialize_ms: None,
            reports: reports::TurnReports::default(),
            model_rejected: None,
            mode_problem: None,
            scanner: SigilScanner::new(),
            message_id: None,
            message: String::new(),
            final_message: String::new(),
        }
    }
}

impl TurnState {
    /// The state before `initialize`, the runner asking for `requested_model`.
    pub(crate) fn asking_for(requested_model: Option<String>) -> TurnState {
        let mut turn = TurnState::default();
        turn.ran_by.requested_model = requested_model;
        turn
    }

    /// Takes in one `session/update` (raw JSON); returns its kind for the log.
    pub(crate) fn record_update(&mut self, update: &serde_json::Value) {
        let counted = self.phase == Phase::Prompted;
        if counted {
            self.updates_in_turn += 1;
            self.reports.record(update);
        }
        if let Some(model) = reports::model_in_update(update) {
            self.ran_by.model = Some(model);
        }
        match SessionUpdate::deserialize(update) {
            Ok(SessionUpdate::AgentMessageChunk(chunk))
                if counted && !reports::is_informational(update) =>
            {
                self.message_chunk(chunk)
            }
            Ok(SessionUpdate::UsageUpdate(usage)) => {
                if let Some(cost) = usage.cost
                    && cost.currency.eq_ignore_ascii_case("USD")
                {
                    self.usage.cost_usd = Some(cost.amount);
                }
            }
            Ok(
                SessionUpdate::AvailableCommandsUpdate(_)
                | SessionUpdate::CurrentModeUpdate(_)
                | SessionUpdate::ConfigOptionUpdate(_)
                | SessionUpdate::SessionInfoUpdate(_),
            ) => {}
            // any other kind (tool call, thought, plan, ...) ends the agent's message
            _ if counted => self.end_message(),
            _ => {}
        }
    }

    /// Takes in the prompt response's `_meta`: tokens and model agents report there
    /// (used when the response carries no standard usage).
    pub(crate) fn record_response_meta(&mut self, meta: &serde_json::Value) {
        if self.usage.total_tokens() == 0
            && let Some((input, output)) = reports::tokens_in_response_meta(meta)
        {
            self.usage.tokens.input = input;
            self.usage.tokens.output = output;
        }
        if let Some(model) = reports::model_in_response_meta(meta) {
            self.ran_by.model = Some(model);
        }
    }

    /// Feeds one agent message chunk to the sigil scanner; a new `messageId` starts a new
    /// message, and content that is not text ends any sigil block before it.
    fn message_chunk(&mut self, chunk: ContentChunk) {
        if chunk.message_id.is_some() && chunk.message_id != self.message_id {
            self.end_message();
            self.message_id = chunk.message_id;
        }
        let text = match &chunk.content {
            ContentBlock::Text(text) => text.text.as_str(),
            _ => NON_TEXT_CONTENT,
        };
        self.scanner.push(text);
        let room = MAX_FINAL_MESSAGE.saturating_sub(self.message.len());
        self.message
            .push_str(super::events::char_prefix(text, room));
    }

    fn end_message(&mut self) {
        self.scanner.end_message();
        self.message_id = None;
        let message = std::mem::take(&mut self.message);
        if !message.trim().is_empty() {
            self.final_message = message;
        }
    }

    /// The turn's final message: its last agent message with text (as the sigil scanner
    /// takes its verdicts from).
    pub(crate) fn take_final_message(&mut self) -> String {
        self.end_message();
        std::mem::take(&mut self.final_message)
    }

    /// Takes in the token usage of the prompt response.
    pub(crate) fn record_turn_usage(&mut self, usage: &TurnUsage) {
        self.usage.tokens = Tokens {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cache_read: usage.cached_read_tokens.unwrap_or(0),
            cache_write: usage.cached_write_tokens.unwrap_or(0),
        };
    }

    /// The sigils of the turn's agent messages (verdicts from the last one).
    pub(crate) fn take_sigils(&mut self) -> Sigils {
        std::mem::replace(&mut self.scanner, SigilScanner::new()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn in_phase(phase: Phase) -> TurnState {
        TurnState {
            phase,
            ..Default::default()
        }
    }

    fn prompted() -> TurnState {
        in_phase(Phase::Prompted)
    }

    /// Records `updates` in `turn`; the task the final answer says is done.
    fn task_done_after(turn: &mut TurnState, updates: &[serde_json::Value]) -> Option<String> {
        for update in updates {
            turn.record_update(update);
        }
        turn.take_sigils().task_done
    }

    fn chunk(text: &str) -> serde_json::Value {
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
    }

    fn chunk_in(message_id: &str, text: &str) -> serde_json::Value {
        json!({"sessionUpdate": "agent_message_chunk", "messageId": message_id,
               "content": {"type": "text", "text": text}})
    }

    fn tool_call() -> serde_json::Value {
        json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Run tests"})
    }

    #[test]
    fn text_before_the_prompt_is_not_collected() {
        let mut turn = in_phase(Phase::SessionCreated);
        let done = task_done_after(&mut turn, &[chunk("Done.\n<task-done>t</task-done>")]);
        assert_eq!(turn.updates_in_turn, 0);
        assert_eq!(done, None);
    }

    #[test]
    fn text_after_the_prompt_is_collected() {
        let mut turn = prompted();
        let done = task_done_after(
            &mut turn,
            &[chunk("Done.\n<task-"), chunk("done>t</task-done>")],
        );
        assert_eq!(turn.updates_in_turn, 2);
        assert_eq!(done.as_deref(), Some("t"));
    }

    #[test]
    fn a_tool_call_ends_the_message_so_a_sigil_before_it_is_not_the_final_answer() {
        let updates = [
            chunk("Done.\n<task-done>t</task-done>"),
            tool_call(),
            chunk("Tests fail; fixing."),
        ];
        assert_eq!(task_done_after(&mut prompted(), &updates), None);
    }

    #[test]
    fn the_last_message_after_a_tool_call_gives_the_verdict() {
        let updates = [
            chunk("I will not write"),
            tool_call(),
            chunk("Tests pass.\n<task-done>t</task-done>"),
        ];
        assert_eq!(
            task_done_after(&mut prompted(), &updates).as_deref(),
            Some("t")
        );
    }

    #[test]
    fn the_final_message_is_the_last_message_with_text() {
        let mut turn = prompted();
        for update in [
            chunk("Looking around."),
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "read"}),
            chunk("Done. "),
            chunk("<task-done>build</task-done>"),
            json!({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "read"}),
        ] {
            turn.record_update(&update);
        }
        assert_eq!(
            turn.take_final_message(),
            "Done. <task-done>build</task-done>"
        );
    }

    #[test]
    fn a_new_message_id_starts_a_new_message() {
        let updates = [
            chunk_in("m1", "Done.\n<task-done>t</task-done>"),
            chunk_in("m2", "One more thing to check."),
        ];
        assert_eq!(task_done_after(&mut prompted(), &updates), None);
    }

    #[test]
    fn a_usage_update_does_not_end_the_message() {
        let updates = [
            chunk("Done. <task-"),
            json!({"sessionUpdate": "usage_update", "used": 1, "size": 9}),
            chunk("done>t</task-done>"),
        ];
        assert_eq!(
            task_done_after(&mut prompted(), &updates).as_deref(),
            Some("t")
        );
    }

    #[test]
    fn content_that_is_not_text_ends_a_sigil_block() {
        let updates = [
            chunk("Done.\n<task-done>t</task-done>"),
            json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "image", "data": "", "mimeType": "image/png"}}),
        ];
        assert_eq!(task_done_after(&mut prompted(), &updates), None);
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
        let mut turn = prompted();
        turn.record_update(&json!({"sessionUpdate": "something_new"}));
        assert_eq!(turn.updates_in_turn, 1);
    }
}
