//! What agents report beside their answer, read from raw ACP messages (pure): errors
//! reported inside a turn, informational chunks, the model, and token counts sent in
//! agent-specific `_meta` fields.

use serde_json::Value;

/// Longest error message kept from a session update.
const MAX_REPORTED_ERROR: usize = 500;

/// An error the agent reported in a session update (the turn may still end with
/// `end_turn`): codex-acp's `session_info_update` whose
/// `_meta.codex.threadStatus.type` is `systemError`, or a `notice` of severity `error`.
pub fn reported_error(update: &Value) -> Option<String> {
    match update.get("sessionUpdate")?.as_str()? {
        "session_info_update" => thread_error(update.get("_meta")?),
        "notice" if update.get("severity")?.as_str()? == "error" => {
            let title = update
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("error");
            Some(match update.get("description").and_then(Value::as_str) {
                Some(description) => format!("{title}: {description}"),
                None => title.to_string(),
            })
        }
        _ => None,
    }
    .map(|message| shorten(&message))
}

/// A `threadStatus` of type `systemError` under any agent's `_meta` key, with its message.
fn thread_error(meta: &Value) -> Option<String> {
    let Value::Object(vendors) = meta else {
        return None;
    };
    vendors.values().find_map(|vendor| {
        let status = vendor.get("threadStatus")?;
        let kind = status.get("type")?.as_str()?;
        if !kind.eq_ignore_ascii_case("systemError") {
            return None;
        }
        Some(error_text(status).unwrap_or_else(|| {
            vendor
                .get("error")
                .and_then(error_text_of)
                .unwrap_or_else(|| "the agent reported a system error".to_string())
        }))
    })
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

    #[test]
    fn a_codex_system_error_is_an_error_with_its_message() {
        let update = json!({
            "sessionUpdate": "session_info_update",
            "_meta": {"codex": {"threadStatus": {"type": "systemError", "message": "stream error: 500 Internal Server Error"}}}
        });
        assert_eq!(
            reported_error(&update).as_deref(),
            Some("stream error: 500 Internal Server Error")
        );
    }

    #[test]
    fn an_idle_thread_status_is_no_error() {
        let update = json!({
            "sessionUpdate": "session_info_update",
            "_meta": {"codex": {"threadStatus": {"type": "idle"}}}
        });
        assert_eq!(reported_error(&update), None);
    }

    #[test]
    fn an_error_notice_is_an_error() {
        let update = json!({"sessionUpdate": "notice", "severity": "error", "title": "API failed", "description": "HTTP 503"});
        assert_eq!(
            reported_error(&update).as_deref(),
            Some("API failed: HTTP 503")
        );
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
