//! A Feature's agent pool (`spec.agent` plus `spec.fallbackAgents`) and its model policy
//! (`spec.model`). Which agent and model an attempt uses is decided in
//! [`crate::engine::selection`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent::AgentSpec;
use super::feature::FeatureSpec;
use super::names::DNS_LABEL_PATTERN;
use crate::engine::selection::{ModelChoice, ModelStrategy};
use crate::engine::stable_hash::fnv1a;

/// The pool name of `spec.agent`.
pub const PRIMARY_AGENT: &str = "primary";
/// Most entries in `spec.fallbackAgents`.
pub const MAX_FALLBACK_AGENTS: usize = 8;
/// Most entries in `spec.model.models`.
pub const MAX_MODELS: usize = 16;
/// Longest model name.
pub const MAX_MODEL_NAME_LEN: usize = 128;

/// An agent of the pool after `spec.agent`, with its name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedAgentSpec {
    /// Its name in the pool (unique; `primary` is `spec.agent`). Attempts record it.
    #[schemars(pattern(DNS_LABEL_PATTERN), length(min = 1, max = 63))]
    pub name: String,

    /// The agent, as in `spec.agent`.
    #[serde(flatten)]
    pub agent: AgentSpec,
}

/// Which model each attempt asks the agent for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPolicy {
    /// `fixed`: always the first model; `escalate`: start with the first, move to the next
    /// after a failed or crashed attempt; `costOptimized`: the cheapest model that has not
    /// failed the task. An agent's `<next-model>` naming a listed model wins for the next
    /// attempt; one not listed is ignored with a warning.
    #[serde(default)]
    pub strategy: ModelStrategy,

    /// Model names as the agent knows them (its ACP `model` session option, e.g. `haiku`,
    /// `sonnet`, `opus` for claude-agent-acp), cheapest first.
    #[schemars(length(min = 1, max = MAX_MODELS), inner(length(min = 1, max = MAX_MODEL_NAME_LEN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub models: Vec<String>,
}

impl FeatureSpec {
    /// The pool: `spec.agent` (named [`PRIMARY_AGENT`]), then `spec.fallbackAgents`, in order.
    pub fn pool(&self) -> Vec<(&str, &AgentSpec)> {
        std::iter::once((PRIMARY_AGENT, &self.agent))
            .chain(
                self.fallback_agents
                    .iter()
                    .map(|named| (named.name.as_str(), &named.agent)),
            )
            .collect()
    }

    /// The pool agent named `name`.
    pub fn pool_agent(&self, name: &str) -> Option<&AgentSpec> {
        self.pool()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, agent)| agent)
    }

    /// The model policy as the selection reads it (no models: the agent's default).
    pub fn model_choice(&self) -> ModelChoice<'_> {
        model_choice(self.model.as_ref())
    }
}

/// A `spec.model` policy as the selection reads it (none: the agent's default model).
pub fn model_choice(policy: Option<&ModelPolicy>) -> ModelChoice<'_> {
    match policy {
        Some(policy) => ModelChoice {
            strategy: policy.strategy,
            models: &policy.models,
        },
        None => ModelChoice {
            strategy: ModelStrategy::Fixed,
            models: &[],
        },
    }
}

impl AgentSpec {
    /// Who this agent is as a quota holder: its command's program name and a hash of its
    /// image, command, arguments and environment (values and the Secrets and ConfigMaps
    /// they come from, which hold its credentials). Agents with the same identity in a
    /// namespace share one quota, so they rest together. A valid ConfigMap key.
    pub fn identity(&self) -> String {
        let relevant = serde_json::json!({
            "image": self.image,
            "command": self.command,
            "args": self.args,
            "env": self.env,
            "envFrom": self.env_from,
        });
        identity_of(&self.command, &relevant)
    }
}

/// The identity of a local agent: its command line (local agents share the environment of
/// `ralph run`, so the command tells them apart).
pub fn command_identity(command: &[String]) -> String {
    identity_of(command, &serde_json::json!(command))
}

fn identity_of(command: &[String], relevant: &serde_json::Value) -> String {
    let hash = fnv1a(relevant.to_string().as_bytes());
    let program: String = command
        .first()
        .map(|c| c.rsplit('/').next().unwrap_or(c))
        .unwrap_or("agent")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    format!("{program}-{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_s_identity_keeps_the_value_rests_are_stored_under() {
        assert_eq!(
            command_identity(&["claude-agent-acp".to_owned()]),
            "claude-agent-acp-301b904c93f44fca"
        );
    }

    fn agent(json: serde_json::Value) -> AgentSpec {
        match serde_json::from_value(json) {
            Ok(agent) => agent,
            Err(error) => panic!("test agent does not parse: {error}"),
        }
    }

    #[test]
    fn the_identity_names_the_program_and_hashes_the_credentials() {
        let id = agent(serde_json::json!({"command": ["/usr/bin/claude-agent-acp"]})).identity();
        assert!(id.starts_with("claude-agent-acp-"), "{id}");
    }

    #[test]
    fn agents_with_other_credentials_have_other_identities() {
        let with_secret = |secret: &str| {
            agent(serde_json::json!({
                "command": ["claude-agent-acp"],
                "envFrom": [{"secretRef": {"name": secret}}],
            }))
            .identity()
        };
        assert_ne!(with_secret("team-a-key"), with_secret("team-b-key"));
        assert_eq!(with_secret("team-a-key"), with_secret("team-a-key"));
    }

    #[test]
    fn timeouts_do_not_change_the_identity() {
        let a = agent(serde_json::json!({"command": ["codex-acp"], "idleTimeoutSeconds": 60}));
        let b = agent(serde_json::json!({"command": ["codex-acp"], "idleTimeoutSeconds": 900}));
        assert_eq!(a.identity(), b.identity());
    }

    #[test]
    fn the_pool_is_the_primary_agent_then_the_fallbacks_in_order() {
        let spec: FeatureSpec = match serde_json::from_value(serde_json::json!({
            "agent": {"command": ["claude-agent-acp"]},
            "fallbackAgents": [
                {"name": "second-key", "command": ["claude-agent-acp"]},
                {"name": "codex", "command": ["codex-acp"]},
            ],
        })) {
            Ok(spec) => spec,
            Err(error) => panic!("{error}"),
        };
        let names: Vec<&str> = spec.pool().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["primary", "second-key", "codex"]);
        assert_eq!(
            spec.pool_agent("codex").map(|a| a.command.clone()),
            Some(vec!["codex-acp".to_owned()])
        );
    }
}
