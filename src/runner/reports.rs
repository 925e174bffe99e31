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
pub(crate) enum HealthReport {
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
pub(crate) fn report_in_update(update: &Value) -> Option<HealthReport> {
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
            Some(HealthReport::Error(shorten(&message)))
        }
        _ => None,
    }
}

/// A thread status or an error under any agent's `_meta` key.
fn vendor_report(meta: &Value) -> Option<HealthReport> {
    let Value::Object(vendors) = meta else {
        return None;
    };
    vendors.values().find_map(|vendor| {
        if let Some(status) = vendor.get("threadStatus") {
            let kind = status.get("type")?.as_str()?;
            return Some(if kind.eq_ignore_ascii_case("systemError") {
                HealthReport::StatusError(error_text(status).map(|message| shorten(&message)))
            } else {
                HealthReport::StatusOk
            });
        }
        let error = vendor.get("error")?;
        if error.get("willRetry").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        Some(HealthReport::Error(shorten(
            &error_text_of(error).unwrap_or_else(|| "the agent reported an error".into()),
        )))
    })
}

/// The errors an agent reported during one prompt turn, and whether it answered after.
#[derive(Clone, Debug, Default)]
pub(crate) struct TurnReports {
    status_error: Option<Option<String>>,
    event_error: Option<String>,
    answered: bool,
    last_message: String,
    in_message: bool,
    refusal: Option<String>,
}

impl TurnReports {
    /// Takes in one session update of the turn.
    pub(crate) fn record(&mut self, update: &Value) {
        match report_in_update(update) {
            Some(HealthReport::StatusError(message)) => self.status_error = Some(message),
            Some(HealthReport::StatusOk) => self.status_error = None,
            Some(HealthReport::Error(message)) => self.event_error = Some(message),
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
    pub(crate) fn unanswered_error(&self) -> Option<String> {
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
    pub(crate) fn answered(&self) -> bool {
        self.answered
    }

    /// The turn's last answer text (its first KiB).
    pub(crate) fn last_message(&self) -> &str {
        &self.last_message
    }

    /// Takes in a permission the runner refused in this turn (what and why).
    pub(crate) fn record_refusal(&mut self, refusal: String) {
        self.refusal = Some(refusal);
    }

    /// The last permission the runner refused in this turn.
    pub(crate) fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }
}

/// What codex writes when the model API cut its answer short (the Responses API's
/// `response.incomplete`); the reason (`incomplete_details.reason`) follows.
const INCOMPLETE_RESPONSE: &str = "incomplete response returned, reason: ";

/// The reason of an "Incomplete response returned, reason: REASON" error (e.g.
/// `max_output_tokens`), when `error` is one.
pub(crate) fn incomplete_response_reason(error: &str) -> Option<&str> {
    let start = error.to_ascii_lowercase().find(INCOMPLETE_RESPONSE)? + INCOMPLETE_RESPONSE.len();
    let rest = &error[start..];
    let end = rest
        .find(|character: char| !(character.is_ascii_alphanumeric() || character == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|reason| !reason.is_empty())
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
pub(crate) fn is_informational(update: &Value) -> bool {
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
pub(crate) fn is_answer_text(update: &Value) -> bool {
    update.get("sessionUpdate").and_then(Value::as_str) == Some("agent_message_chunk")
        && !is_informational(update)
        && update
            .get("content")
            .and_then(|content| content.get("text"))
            .and_then(Value::as_str)
            .is_some_and(|text| !text.trim().is_empty())
}

/// Reasoning-effort levels codex-acp appends to its model ids (`gpt-5.5[medium]`).
const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// The model a session update names: a `config_option_update` with a model selector, or
/// a `current_model_update`.
pub(crate) fn model_in_update(update: &Value) -> Option<String> {
    match update.get("sessionUpdate")?.as_str()? {
        "config_option_update" => model_in_options(update.get("configOptions")?),
        "current_model_update" => ["currentModelId", "modelId"]
            .iter()
            .find_map(|key| update.get(*key)?.as_str())
            .and_then(|model| real_model(model, None)),
        _ => None,
    }
}

/// The model a `session/new` answer names: the `model` selector among the configuration
/// options, else the unstable `models` state (codex-acp's `currentModelId` there carries
/// the reasoning effort, its selector does not).
pub(crate) fn model_of_session(
    config_options: Option<&Value>,
    models: Option<&Value>,
) -> Option<String> {
    config_options
        .and_then(model_in_options)
        .or_else(|| model_in_models(models?))
}

/// The model the `model` selector among configuration options (raw JSON) is set to.
pub(crate) fn model_in_options(options: &Value) -> Option<String> {
    let selector = options.as_array()?.iter().find(|option| {
        option.get("category").and_then(Value::as_str) == Some("model")
            || option.get("id").and_then(Value::as_str) == Some("model")
    })?;
    let current = selector.get("currentValue")?.as_str()?;
    let choices = selector.get("options").and_then(Value::as_array);
    // Choices may be flat or in groups (`{group, name, options: [..]}`).
    let description = choices
        .into_iter()
        .flatten()
        .flat_map(
            |choice| match choice.get("options").and_then(Value::as_array) {
                Some(grouped) => grouped.iter().collect(),
                None => vec![choice],
            },
        )
        .find(|choice| choice.get("value").and_then(Value::as_str) == Some(current))
        .and_then(|choice| choice.get("description")?.as_str());
    real_model(current, description)
}

/// The model of the unstable `models` state (`currentModelId` among `availableModels`).
fn model_in_models(models: &Value) -> Option<String> {
    let current = models.get("currentModelId")?.as_str()?;
    let description = models
        .get("availableModels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|model| model.get("modelId").and_then(Value::as_str) == Some(current))
        .and_then(|model| model.get("description")?.as_str());
    real_model(current, description)
}

/// The model a selector value stands for: claude-agent-acp's `default` is the model its
/// description names ("Use the default model (currently Opus 4.8 (1M context)) · …"),
/// or none when it names none; codex-acp's reasoning-effort suffix is dropped.
fn real_model(value: &str, description: Option<&str>) -> Option<String> {
    if value.eq_ignore_ascii_case("default") {
        return description.and_then(model_in_description);
    }
    Some(without_effort(value).to_string())
}

/// The text inside "(currently …)", nested parentheses included.
fn model_in_description(description: &str) -> Option<String> {
    let (_, rest) = description.split_once("(currently ")?;
    let mut depth = 0_usize;
    for (index, character) in rest.char_indices() {
        match character {
            '(' => depth += 1,
            ')' if depth == 0 => {
                let model = rest[..index].trim();
                return (!model.is_empty()).then(|| model.to_string());
            }
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// `gpt-5.5[medium]` → `gpt-5.5`; other bracketed suffixes (claude's `opus[1m]`) stay.
fn without_effort(model: &str) -> &str {
    model
        .strip_suffix(']')
        .and_then(|head| head.rsplit_once('['))
        .filter(|(base, effort)| {
            !base.is_empty()
                && REASONING_EFFORTS
                    .iter()
                    .any(|known| known.eq_ignore_ascii_case(effort))
        })
        .map_or(model, |(base, _)| base)
}

/// Tokens a prompt response's `_meta` reports (gemini-cli:
/// `_meta.quota.token_count.{input_tokens, output_tokens}`).
pub(crate) fn tokens_in_response_meta(meta: &Value) -> Option<(u64, u64)> {
    let count = meta.get("quota")?.get("token_count")?;
    let tokens = |key: &str| count.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some((tokens("input_tokens"), tokens("output_tokens")))
}

/// The model a prompt response's `_meta` names (gemini-cli: the model of
/// `_meta.quota.model_usage` with the most output tokens).
pub(crate) fn model_in_response_meta(meta: &Value) -> Option<String> {
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

    /// claude-agent-acp 0.49.0's model selector: `default`, its model in the description.
    fn claude_options(current: &str) -> Value {
        json!([{"id": "model", "name": "Model", "category": "model", "type": "select",
        "currentValue": current, "options": [
            {"value": "default", "name": "Default (recommended)",
             "description": "Use the default model (currently Opus 4.8 (1M context)) · $5/$25 per Mtok"},
            {"value": "opus[1m]", "name": "Opus (1M context)", "description": "Opus 4.8 with 1M context"}
        ]}])
    }

    #[test]
    fn claudes_default_model_is_the_one_its_option_description_names() {
        assert_eq!(
            model_of_session(Some(&claude_options("default")), None).as_deref(),
            Some("Opus 4.8 (1M context)")
        );
    }

    #[test]
    fn claudes_default_model_is_resolved_from_the_unstable_models_too() {
        let models = json!({"currentModelId": "default", "availableModels": [
            {"modelId": "default", "name": "Default (recommended)",
             "description": "Use the default model (currently Sonnet 4.5) · $3/$15 per Mtok"}
        ]});
        assert_eq!(
            model_of_session(None, Some(&models)).as_deref(),
            Some("Sonnet 4.5")
        );
    }

    #[test]
    fn a_default_model_no_description_names_is_not_recorded() {
        let options = json!([{"id": "model", "category": "model", "currentValue": "default",
            "options": [{"value": "default", "name": "Default"}]}]);
        assert_eq!(model_of_session(Some(&options), None), None);
    }

    #[test]
    fn a_config_update_back_to_default_still_names_the_real_model() {
        let update = json!({"sessionUpdate": "config_option_update", "configOptions": claude_options("default")});
        assert_eq!(
            model_in_update(&update).as_deref(),
            Some("Opus 4.8 (1M context)")
        );
    }

    #[test]
    fn a_claude_model_alias_with_a_context_suffix_is_kept() {
        assert_eq!(
            model_of_session(Some(&claude_options("opus[1m]")), None).as_deref(),
            Some("opus[1m]")
        );
    }

    #[test]
    fn codexs_model_selector_wins_over_its_model_id_with_effort() {
        let options =
            json!([{"id": "model", "category": "model", "currentValue": "gpt-5.5", "options": []}]);
        let models = json!({"currentModelId": "gpt-5.5[medium]", "availableModels": []});
        assert_eq!(
            model_of_session(Some(&options), Some(&models)).as_deref(),
            Some("gpt-5.5")
        );
    }

    #[test]
    fn codexs_reasoning_effort_suffix_is_dropped_from_a_model_id() {
        let models = json!({"currentModelId": "gpt-5.5[xhigh]", "availableModels": []});
        assert_eq!(
            model_of_session(None, Some(&models)).as_deref(),
            Some("gpt-5.5")
        );
        let update =
            json!({"sessionUpdate": "current_model_update", "currentModelId": "gpt-5.5[low]"});
        assert_eq!(model_in_update(&update).as_deref(), Some("gpt-5.5"));
    }

    #[test]
    fn a_model_in_a_grouped_selector_is_found() {
        let options = json!([{"id": "model", "category": "model", "currentValue": "default",
        "options": [{"group": "anthropic", "name": "Anthropic", "options": [
            {"value": "default", "name": "Default", "description": "Use the default model (currently Haiku 4.5)"}
        ]}]}]);
        assert_eq!(
            model_of_session(Some(&options), None).as_deref(),
            Some("Haiku 4.5")
        );
    }

    #[test]
    fn codexs_incomplete_response_names_its_reason() {
        assert_eq!(
            incomplete_response_reason("Incomplete response returned, reason: max_output_tokens"),
            Some("max_output_tokens")
        );
        assert_eq!(
            incomplete_response_reason(
                "stream disconnected before completion: Incomplete response returned, reason: content_filter"
            ),
            Some("content_filter")
        );
        assert_eq!(incomplete_response_reason("HTTP 500"), None);
    }
}
