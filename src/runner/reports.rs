//! What agents report beside their answer, read from raw ACP messages (pure): errors
//! reported inside a turn, informational chunks, the model, and token counts sent in
//! agent-specific `_meta` fields.

use serde_json::Value;

/// Longest error message kept from a session update.
const MAX_REPORTED_ERROR: usize = 500;

/// Longest stretch of the last message kept to name a status error.
const MAX_LAST_MESSAGE: usize = 1024;

/// What a session update reports about the agent's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The agent's state is an error until a later status says otherwise (codex-acp's
    /// `_meta.codex.threadStatus.type: "systemError"`), with its message when it has one.
    StatusError(Option<String>),
    /// A later status that is not an error (`active`, `idle`, ...).
    StatusOk,
    /// An error event (a `notice` of severity `error`, codex-acp's `_meta.codex.error`
    /// that will not be retried): answer text after it means the agent recovered.
    Error(String),
}

/// The error report a session update carries, if any.
pub fn report_in_update(update: &Value) -> Option<Report> {
    match update.get("sessionUpdate")?.as_str()? {
        "session_info_update" => vendor_report(update.get("_meta")?),
        "notice" if update.get("severity")?.as_str()? == "error" => {
            let title = update
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("error");
            let message = match update.get("description").and_then(Value::as_str) {
                Some(description) => format!("{title}: {description}"),
                None => title.to_string(),
            };
            Some(Report::Error(shorten(&message)))
        }
        _ => None,
    }
}

/// A thread status or an error under any agent's `_meta` key.
fn vendor_report(meta: &Value) -> Option<Report> {
    let Value::Object(vendors) = meta else {
        return None;
    };
    vendors.values().find_map(|vendor| {
        if let Some(status) = vendor.get("threadStatus") {
            let kind = status.get("type")?.as_str()?;
            return Some(if kind.eq_ignore_ascii_case("systemError") {
                Report::StatusError(error_text(status).map(|message| shorten(&message)))
            } else {
                Report::StatusOk
            });
        }
        let error = vendor.get("error")?;
        if error.get("willRetry").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        Some(Report::Error(shorten(
            &error_text_of(error).unwrap_or_else(|| "the agent reported an error".into()),
        )))
    })
}

/// The errors an agent reported during one prompt turn, and whether it answered after.
#[derive(Clone, Debug, Default)]
pub struct TurnReports {
    status_error: Option<Option<String>>,
    event_error: Option<String>,
    answered: bool,
    last_message: String,
    in_message: bool,
}

impl TurnReports {
    /// Takes in one session update of the turn.
    pub fn record(&mut self, update: &Value) {
        match report_in_update(update) {
            Some(Report::StatusError(message)) => self.status_error = Some(message),
            Some(Report::StatusOk) => self.status_error = None,
            Some(Report::Error(message)) => self.event_error = Some(message),
            None => {}
        }
        if !is_answer_text(update) {
            self.in_message = false;
            return;
        }
        self.answered = true;
        self.event_error = None;
        if !self.in_message {
            self.last_message.clear();
        }
        self.in_message = true;
        let text = update
            .get("content")
            .and_then(|content| content.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let room = MAX_LAST_MESSAGE.saturating_sub(self.last_message.len());
        self.last_message
            .push_str(super::events::char_prefix(text, room));
    }

    /// The error the turn ended in, if it did: a status error (named by its message, else
    /// by the agent's last message, which is where codex-acp writes the error), or an
    /// error event that no answer text followed.
    pub fn unanswered_error(&self) -> Option<String> {
        if let Some(message) = &self.status_error {
            let last = self.last_message.trim();
            return Some(match message {
                Some(message) => message.clone(),
                None if !last.is_empty() => shorten(last),
                None => "the agent reported a system error".to_string(),
            });
        }
        self.event_error.clone()
    }

    /// Whether the turn carried answer text.
    pub fn answered(&self) -> bool {
        self.answered
    }
}

fn error_text(status: &Value) -> Option<String> {
    ["message", "error", "details"]
        .iter()
        .find_map(|key| status.get(*key).and_then(error_text_of))
}

fn error_text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.trim().is_empty() => Some(text.trim().to_string()),
        Value::Object(_) => value
            .get("message")
            .and_then(error_text_of)
            .or_else(|| Some(value.to_string())),
        _ => None,
    }
}

/// Whether an `agent_message_chunk` is an informational notice rather than part of the
/// answer (claude-agent-acp: `_meta.claudeCode.kind: "informational"`).
pub fn is_informational(update: &Value) -> bool {
    let kind = |holder: Option<&Value>| {
        holder
            .and_then(|holder| holder.get("_meta"))
            .and_then(|meta| meta.get("claudeCode"))
            .and_then(|claude| claude.get("kind"))
            .and_then(Value::as_str)
            == Some("informational")
    };
    kind(Some(update)) || kind(update.get("content"))
}

/// Whether a message chunk carries answer text (non-blank text, not informational).
pub fn is_answer_text(update: &Value) -> bool {
    update.get("sessionUpdate").and_then(Value::as_str) == Some("agent_message_chunk")
        && !is_informational(update)
        && update
            .get("content")
            .and_then(|content| content.get("text"))
            .and_then(Value::as_str)
            .is_some_and(|text| !text.trim().is_empty())
}

/// The model a session update names: a `config_option_update` with a model selector, or
/// a `current_model_update`.
pub fn model_in_update(update: &Value) -> Option<String> {
    match update.get("sessionUpdate")?.as_str()? {
        "config_option_update" => model_in_options(update.get("configOptions")?),
        "current_model_update" => ["currentModelId", "modelId"]
            .iter()
            .find_map(|key| update.get(*key)?.as_str())
            .map(str::to_string),
        _ => None,
    }
}

/// The current value of the `model` selector among configuration options (raw JSON).
pub fn model_in_options(options: &Value) -> Option<String> {
    options.as_array()?.iter().find_map(|option| {
        let is_model = option.get("category").and_then(Value::as_str) == Some("model")
            || option.get("id").and_then(Value::as_str) == Some("model");
        is_model
            .then(|| option.get("currentValue")?.as_str().map(str::to_string))
            .flatten()
    })
}

/// Tokens a prompt response's `_meta` reports (gemini-cli:
/// `_meta.quota.token_count.{input_tokens, output_tokens}`).
pub fn tokens_in_response_meta(meta: &Value) -> Option<(u64, u64)> {
    let count = meta.get("quota")?.get("token_count")?;
    let tokens = |key: &str| count.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some((tokens("input_tokens"), tokens("output_tokens")))
}

/// The model a prompt response's `_meta` names (gemini-cli: the model of
/// `_meta.quota.model_usage` with the most output tokens).
pub fn model_in_response_meta(meta: &Value) -> Option<String> {
    meta.get("quota")?
        .get("model_usage")?
        .as_array()?
        .iter()
        .filter_map(|usage| {
            let model = usage.get("model")?.as_str()?;
            let output = usage
                .get("token_count")
                .and_then(|count| count.get("output_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Some((output, model))
        })
        .max_by_key(|(output, _)| *output)
        .map(|(_, model)| model.to_string())
}

fn shorten(message: &str) -> String {
    let head = super::events::char_prefix(message, MAX_REPORTED_ERROR);
    if head.len() < message.len() {
        format!("{head}…")
    } else {
        head.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(kind: &str) -> Value {
        json!({"sessionUpdate": "session_info_update", "_meta": {"codex": {"threadStatus": {"type": kind}}}})
    }

    fn text(text: &str) -> Value {
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
    }

    fn turn(updates: &[Value]) -> TurnReports {
        let mut reports = TurnReports::default();
        for update in updates {
            reports.record(update);
        }
        reports
    }

    #[test]
    fn a_system_error_status_is_named_by_the_error_message_codex_sent_before_it() {
        let reports = turn(&[
            text("unexpected status 500 Internal Server Error"),
            status("systemError"),
        ]);
        assert_eq!(
            reports.unanswered_error().as_deref(),
            Some("unexpected status 500 Internal Server Error")
        );
    }

    #[test]
    fn a_system_error_status_with_a_message_is_named_by_it() {
        let update = json!({"sessionUpdate": "session_info_update",
            "_meta": {"codex": {"threadStatus": {"type": "systemError", "message": "stream error"}}}});
        assert_eq!(
            turn(&[update]).unanswered_error().as_deref(),
            Some("stream error")
        );
    }

    #[test]
    fn a_system_error_status_stays_when_error_text_follows_it() {
        let reports = turn(&[status("systemError"), text("HTTP 502 Bad Gateway")]);
        assert_eq!(
            reports.unanswered_error().as_deref(),
            Some("HTTP 502 Bad Gateway")
        );
    }

    #[test]
    fn a_later_active_status_clears_a_system_error() {
        let reports = turn(&[status("systemError"), status("active"), text("done")]);
        assert_eq!(reports.unanswered_error(), None);
    }

    #[test]
    fn an_error_event_is_cleared_by_answer_text_after_it() {
        let notice = json!({"sessionUpdate": "notice", "severity": "error", "title": "API failed", "description": "HTTP 503"});
        assert_eq!(
            turn(std::slice::from_ref(&notice))
                .unanswered_error()
                .as_deref(),
            Some("API failed: HTTP 503")
        );
        assert_eq!(turn(&[notice, text("recovered")]).unanswered_error(), None);
    }

    #[test]
    fn an_error_that_will_be_retried_is_no_report() {
        let update = json!({"sessionUpdate": "session_info_update",
            "_meta": {"codex": {"error": {"message": "reconnecting", "willRetry": true}}}});
        assert_eq!(report_in_update(&update), None);
    }

    #[test]
    fn claudes_informational_chunk_is_not_answer_text() {
        let update = json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "**Warning:** hook blocked"},
            "_meta": {"claudeCode": {"kind": "informational"}}
        });
        assert!(is_informational(&update));
        assert!(!is_answer_text(&update));
    }

    #[test]
    fn geminis_quota_meta_gives_tokens_and_model() {
        let meta = json!({"quota": {
            "token_count": {"input_tokens": 1200, "output_tokens": 80},
            "model_usage": [{"model": "gemini-2.5-pro", "token_count": {"input_tokens": 1200, "output_tokens": 80}}]
        }});
        assert_eq!(tokens_in_response_meta(&meta), Some((1200, 80)));
        assert_eq!(
            model_in_response_meta(&meta).as_deref(),
            Some("gemini-2.5-pro")
        );
    }

    #[test]
    fn a_config_option_update_names_the_model() {
        let update = json!({"sessionUpdate": "config_option_update", "configOptions": [
            {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "gpt-5-codex", "options": []}
        ]});
        assert_eq!(model_in_update(&update).as_deref(), Some("gpt-5-codex"));
    }
}
