//! The local side of the pool and model selection ([`crate::engine::selection`]): the
//! pool from the feature, the task's history from the store, the rests in the store (meta
//! key [`AGENT_RESTS`], one entry per agent identity: they outlive the run), and the runner
//! command of the chosen agent and model.

use crate::api::PRIMARY_AGENT;
use crate::api::pool::{command_identity, model_choice};
use crate::engine::conclusion::AgentRest;
use crate::engine::selection::{self, PoolAgent, Rests, Selection, TriedModel};
use crate::local::executor::RunnerCommand;
use crate::local::feature::LocalFeature;
use crate::local::scheduler::conclude::recorded_outcome;
use crate::local::store::{AttemptRow, Store, StoreError};

/// Store meta key of the agents' rests (JSON: identity → rest).
pub const AGENT_RESTS: &str = "agent_rests";

/// The pool: the primary agent (`agent_command`), then the fallback agents; name, command.
pub fn pool(feature: &LocalFeature) -> Vec<(&str, &[String])> {
    std::iter::once((PRIMARY_AGENT, feature.agent_command.as_slice()))
        .chain(
            feature
                .fallback_agents
                .iter()
                .map(|a| (a.name.as_str(), a.command.as_slice())),
        )
        .collect()
}

/// The identity of the pool agent `name` (the primary's when unknown).
pub fn identity(feature: &LocalFeature, name: &str) -> String {
    let pool = pool(feature);
    let command = pool
        .iter()
        .find(|(n, _)| *n == name)
        .or(pool.first())
        .map_or(&[][..], |(_, c)| *c);
    command_identity(command)
}

/// A task's attempts, oldest first, as the selection reads them (the model each was given
/// and the agent's `<next-model>` come from the runner's result).
pub fn history(attempts: &[AttemptRow]) -> Vec<TriedModel> {
    attempts
        .iter()
        .map(|row| {
            let result = row.details.reported();
            TriedModel {
                model: result
                    .as_ref()
                    .and_then(|r| r.ran_by.requested_model.clone()),
                outcome: recorded_outcome(row.outcome.as_deref()),
                next_model: result.and_then(|r| r.sigils.next_model),
            }
        })
        .collect()
}

/// The agent and model of the task's next attempt.
pub fn select(
    feature: &LocalFeature,
    attempts: &[AttemptRow],
    rests: &Rests,
    now_ms: i64,
) -> Selection {
    let pool = pool(feature);
    let identities: Vec<String> = pool.iter().map(|(_, c)| command_identity(c)).collect();
    let agents: Vec<PoolAgent<'_>> = pool
        .iter()
        .zip(&identities)
        .map(|((name, _), identity)| PoolAgent { name, identity })
        .collect();
    let models = model_choice(feature.model.as_ref());
    selection::select(&agents, &models, &history(attempts), rests, now_ms)
}

/// The runner command of an attempt of pool agent `agent` asking for `model`.
pub fn runner_for(
    base: &RunnerCommand,
    feature: &LocalFeature,
    agent: &str,
    model: Option<&str>,
) -> RunnerCommand {
    let mut command = base.clone();
    if let Some(fallback) = feature.fallback_agents.iter().find(|a| a.name == agent) {
        command.agent = fallback.command.clone();
        command.env = fallback.env.clone();
    }
    if let Some(model) = model {
        command
            .runner_args
            .extend(["--model".to_owned(), model.to_owned()]);
    }
    command
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredRest {
    until_ms: i64,
    message: String,
}

/// The rests the store holds.
pub fn load_rests(store: &Store) -> Result<Rests, StoreError> {
    let stored: std::collections::BTreeMap<String, StoredRest> = store
        .meta(AGENT_RESTS)?
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default();
    Ok(stored
        .into_iter()
        .map(|(identity, rest)| {
            (
                identity,
                AgentRest {
                    until_ms: rest.until_ms,
                    message: rest.message,
                },
            )
        })
        .collect())
}

/// Records that the agent `identity` rests until `rest.until_ms` (expired rests are dropped).
pub fn save_rest(
    store: &mut Store,
    identity: &str,
    rest: &AgentRest,
    now_ms: i64,
) -> Result<Rests, StoreError> {
    let mut rests = load_rests(store)?;
    rests.retain(|_, r| r.until_ms > now_ms);
    rests.insert(identity.to_owned(), rest.clone());
    let stored: std::collections::BTreeMap<&String, StoredRest> = rests
        .iter()
        .map(|(identity, rest)| {
            (
                identity,
                StoredRest {
                    until_ms: rest.until_ms,
                    message: rest.message.clone(),
                },
            )
        })
        .collect();
    let json = serde_json::to_string(&stored).ok();
    store.set_meta(AGENT_RESTS, json.as_deref())?;
    Ok(rests)
}
