//! Giving the agent the model the Feature chose (`ralph runner --model`), the way ACP
//! allows: the session configuration option of category `model`
//! (`session/set_config_option`, offered by claude-agent-acp, codex-acp and gemini-cli),
//! else the unstable `session/set_model` when the agent sends a `models` state. An agent
//! that offers neither cannot be given a model: that is a misconfiguration, not a silent
//! default. (The agents' own model variables are no substitute: claude-agent-acp takes any
//! name in `ANTHROPIC_MODEL` as a custom model, so a typo would reach the model API and
//! fail every attempt instead of being refused up front.)

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, JsonRpcRequest, JsonRpcResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::attempt::Misconfiguration;

/// `session/set_config_option` with a string value.
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/set_config_option", response = RawSetResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSetConfigOption {
    /// The session.
    pub session_id: String,
    /// The option's id (`model`).
    pub config_id: String,
    /// The chosen value.
    pub value: String,
}

/// `session/set_model` (unstable ACP).
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/set_model", response = RawSetResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSetModel {
    /// The session.
    pub session_id: String,
    /// The chosen model.
    pub model_id: String,
}

/// The answer to either request (its content is not needed).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonRpcResponse)]
pub(crate) struct RawSetResponse {
    /// Whatever the agent answered.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

/// How a session lets the client choose its model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ModelRoute {
    /// A configuration option of category `model` (or id `model`), with the values it offers.
    ConfigOption {
        /// The option's id.
        id: String,
        /// The values (and names) it offers.
        offered: Vec<String>,
    },
    /// The unstable `models` state, with the model ids it offers.
    SessionModel {
        /// The model ids.
        offered: Vec<String>,
    },
    /// Neither: the client cannot choose the model.
    None,
}

/// How the session answered by `session/new` lets the client choose its model.
pub(crate) fn model_route(config_options: Option<&Value>, models: Option<&Value>) -> ModelRoute {
    let selector = config_options
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|option| {
            option.get("category").and_then(Value::as_str) == Some("model")
                || option.get("id").and_then(Value::as_str) == Some("model")
        });
    if let Some(selector) = selector
        && let Some(id) = selector.get("id").and_then(Value::as_str)
    {
        return ModelRoute::ConfigOption {
            id: id.to_owned(),
            offered: offered_values(selector),
        };
    }
    match models.and_then(|m| m.get("availableModels")?.as_array().cloned()) {
        Some(available) => ModelRoute::SessionModel {
            offered: available
                .iter()
                .filter_map(|m| Some(m.get("modelId")?.as_str()?.to_owned()))
                .collect(),
        },
        None => ModelRoute::None,
    }
}

/// The values a select configuration option offers, groups flattened.
pub(crate) fn offered_values(selector: &Value) -> Vec<String> {
    selector
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(
            |choice| match choice.get("options").and_then(Value::as_array) {
                Some(grouped) => grouped.clone(),
                None => vec![choice.clone()],
            },
        )
        .filter_map(|choice| Some(choice.get("value")?.as_str()?.to_owned()))
        .collect()
}

/// Asks the agent of session `session_id` (answered by `session/new` with
/// `config_options` and `models`) for `model`: the route taken and the model the agent's
/// answer says it now uses (mistral-vibe says so only there, with the configuration
/// options it answers). `Err`: the agent rejected it, offers models without it, or offers
/// no model choice at all.
pub(crate) async fn choose(
    cx: &ConnectionTo<Agent>,
    session_id: &str,
    config_options: Option<&Value>,
    models: Option<&Value>,
    model: &str,
) -> Result<(ModelRoute, Option<String>), Misconfiguration> {
    let route = model_route(config_options, models);
    let answer = match &route {
        ModelRoute::ConfigOption { id, .. } => {
            cx.send_request(RawSetConfigOption {
                session_id: session_id.to_owned(),
                config_id: id.clone(),
                value: model.to_owned(),
            })
            .block_task()
            .await
        }
        ModelRoute::SessionModel { offered } => {
            if !offered.iter().any(|m| m == model) {
                return Err(rejected(model, "the agent does not offer it", offered));
            }
            cx.send_request(RawSetModel {
                session_id: session_id.to_owned(),
                model_id: model.to_owned(),
            })
            .block_task()
            .await
        }
        ModelRoute::None => return Err(no_model_choice(model)),
    };
    match answer {
        Ok(answer) => {
            let now = answer
                .rest
                .get("configOptions")
                .and_then(super::reports::model_in_options);
            Ok((route, now))
        }
        Err(error) => {
            let offered = match &route {
                ModelRoute::ConfigOption { offered, .. } | ModelRoute::SessionModel { offered } => {
                    offered.clone()
                }
                ModelRoute::None => Vec::new(),
            };
            Err(rejected(model, &error.message, &offered))
        }
    }
}

/// The misconfiguration of an agent that offers no model choice over ACP.
pub(crate) fn no_model_choice(model: &str) -> Misconfiguration {
    Misconfiguration {
        problem: format!(
            "the agent offers no model choice over ACP (no session configuration option of \
             category model, no models state), so model {model:?} cannot be set"
        ),
        fix: "leave the Feature's spec.model unset and choose the model in the agent's own \
              configuration (e.g. its environment in spec.agent.env)"
            .to_owned(),
        reason: None,
    }
}

/// The misconfiguration of an agent that refused `model`.
pub(crate) fn rejected(model: &str, reason: &str, offered: &[String]) -> Misconfiguration {
    let offers = if offered.is_empty() {
        String::new()
    } else {
        format!(" (it offers: {})", offered.join(", "))
    };
    Misconfiguration {
        problem: format!("the agent rejected model {model:?}: {reason}{offers}"),
        fix: "list only models the agent offers in the Feature's spec.model.models (or fix the \
              agent's <next-model> hint)"
            .to_owned(),
        reason: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claude_agent_acp_offers_its_model_as_a_config_option() {
        let options = json!([{"id": "model", "category": "model", "currentValue": "default",
            "options": [{"value": "default", "name": "Default"}, {"value": "opus[1m]", "name": "Opus"},
                        {"value": "haiku", "name": "Haiku"}]}]);
        assert_eq!(
            model_route(Some(&options), None),
            ModelRoute::ConfigOption {
                id: "model".into(),
                offered: vec!["default".into(), "opus[1m]".into(), "haiku".into()],
            }
        );
    }

    #[test]
    fn grouped_config_choices_are_flattened() {
        let options = json!([{"id": "m", "category": "model", "currentValue": "a",
            "options": [{"group": "g", "name": "G", "options": [{"value": "a"}, {"value": "b"}]}]}]);
        assert_eq!(
            model_route(Some(&options), None),
            ModelRoute::ConfigOption {
                id: "m".into(),
                offered: vec!["a".into(), "b".into()],
            }
        );
    }

    #[test]
    fn an_agent_with_only_the_models_state_gets_set_model() {
        let models = json!({"currentModelId": "gemini-2.5-pro",
            "availableModels": [{"modelId": "gemini-2.5-pro"}, {"modelId": "gemini-2.5-flash"}]});
        assert_eq!(
            model_route(None, Some(&models)),
            ModelRoute::SessionModel {
                offered: vec!["gemini-2.5-pro".into(), "gemini-2.5-flash".into()]
            }
        );
    }

    #[test]
    fn an_agent_offering_no_model_choice_has_no_route() {
        assert_eq!(model_route(Some(&json!([])), None), ModelRoute::None);
    }

    #[test]
    fn a_rejected_model_names_what_the_agent_offers() {
        let problem = rejected("gpt-9", "Invalid value", &["haiku".into(), "opus".into()]);
        assert!(
            problem.problem.contains("\"gpt-9\"") && problem.problem.contains("haiku, opus"),
            "{}",
            problem.problem
        );
    }
}
