//! Which agent of a Feature's pool and which model the next attempt of a task uses, called
//! by the controller and the local mode alike. Pure: the task's attempt history, the
//! agents' rest times and the time are arguments.
//!
//! - Agents: the first agent of the pool (in the Feature's order) that is not resting after
//!   exhausting its quota. All resting: the task waits until the first rest ends. A crash
//!   does not make an agent rest.
//! - Models (`spec.models`, cheapest first): `fixed` uses the first; `escalate` starts with
//!   the first and moves to the next after a failed or crashed attempt; `costOptimized`
//!   uses the cheapest model no attempt of this task failed or crashed on. The agent's
//!   `<next-model>` of the last attempt wins when it names a listed model, and is refused
//!   with a warning otherwise.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conclusion::AgentRest;
use super::policy::AttemptOutcome;

/// How a Feature picks the model of each attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ModelStrategy {
    /// Always the first model of the list.
    #[default]
    Fixed,
    /// Start with the first (cheapest) model; after a failed or crashed attempt, the next one.
    Escalate,
    /// The cheapest model that no attempt of this task failed or crashed on.
    CostOptimized,
}

impl ModelStrategy {
    /// The name used in manifests (`fixed`, `escalate`, `costOptimized`).
    pub fn as_str(self) -> &'static str {
        match self {
            ModelStrategy::Fixed => "fixed",
            ModelStrategy::Escalate => "escalate",
            ModelStrategy::CostOptimized => "costOptimized",
        }
    }
}

/// A Feature's models and how it picks among them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelChoice<'a> {
    /// The strategy.
    pub strategy: ModelStrategy,
    /// The models, cheapest first. Empty: the agent's own default model.
    pub models: &'a [String],
}

/// One agent of a Feature's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolAgent<'a> {
    /// Its name in the Feature.
    pub name: &'a str,
    /// Who it is as a quota holder (see `AgentSpec::identity`): agents with the same
    /// identity rest together, in every Feature of the namespace.
    pub identity: &'a str,
}

/// What the selection needs to know about one earlier attempt of the task: the model it
/// tried, how it ended, the model it asked for next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TriedModel {
    /// The model it was given (`None`: the agent's default).
    pub model: Option<String>,
    /// How it ended (`None`: it has not ended).
    pub outcome: Option<AttemptOutcome>,
    /// The model the agent asked for with `<next-model>`.
    pub next_model: Option<String>,
}

/// Resting agents by identity.
pub type Rests = BTreeMap<String, AgentRest>;

/// What the next attempt of a task runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The pool agent's name.
    pub agent: String,
    /// The model to ask the agent for (`None`: its default).
    pub model: Option<String>,
    /// Why this model (for the log and the attempt's event).
    pub reason: ModelReason,
    /// A `<next-model>` hint that was refused, with the reason (a warning for the user).
    pub refused_hint: Option<String>,
}

/// Why a model was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelReason {
    /// No models listed: the agent's default.
    AgentDefault,
    /// The strategy picked it.
    Strategy(ModelStrategy),
    /// The agent asked for it with `<next-model>`.
    AgentHint,
}

/// The selection for the next attempt of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Start the attempt with this agent and model.
    Run(Choice),
    /// Every agent of the pool rests: no attempt before `until_ms`.
    Wait {
        /// When the first agent of the pool may be used again, Unix ms.
        until_ms: i64,
        /// Which agents rest until when, and what they said.
        message: String,
    },
}

/// Outcomes that count as the model failing the task.
fn failed(outcome: Option<AttemptOutcome>) -> bool {
    matches!(
        outcome,
        Some(AttemptOutcome::Failed | AttemptOutcome::Crashed)
    )
}

/// The agent and model of the next attempt. `history` is the task's attempts, oldest first.
pub fn select(
    pool: &[PoolAgent<'_>],
    models: &ModelChoice<'_>,
    history: &[TriedModel],
    rests: &Rests,
    now_ms: i64,
) -> Selection {
    let resting = |agent: &PoolAgent<'_>| {
        rests
            .get(agent.identity)
            .filter(|rest| rest.until_ms > now_ms)
    };
    let Some(agent) = pool.iter().find(|agent| resting(agent).is_none()) else {
        return all_resting(pool, rests, now_ms);
    };
    let (model, reason, refused_hint) = model_for(models, history);
    Selection::Run(Choice {
        agent: agent.name.to_owned(),
        model,
        reason,
        refused_hint,
    })
}

fn all_resting(pool: &[PoolAgent<'_>], rests: &Rests, now_ms: i64) -> Selection {
    let mut resting: Vec<(&str, &AgentRest)> = pool
        .iter()
        .filter_map(|agent| Some((agent.name, rests.get(agent.identity)?)))
        .collect();
    resting.sort_by_key(|(_, rest)| rest.until_ms);
    let until_ms = resting.first().map_or(now_ms, |(_, rest)| rest.until_ms);
    let each: Vec<String> = resting
        .iter()
        .map(|(name, rest)| {
            format!(
                "{name} until {} ({})",
                format_ms(rest.until_ms),
                rest.message
            )
        })
        .collect();
    let message = format!(
        "every agent of the pool is out of quota: {}; tasks wait until {}",
        each.join("; "),
        format_ms(until_ms)
    );
    Selection::Wait { until_ms, message }
}

/// A Unix ms time as RFC 3339 (UTC, seconds).
pub fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_else(|_| format!("{ms} ms"))
}

fn model_for(
    choice: &ModelChoice<'_>,
    history: &[TriedModel],
) -> (Option<String>, ModelReason, Option<String>) {
    let models = choice.models;
    if models.is_empty() {
        let refused = last_hint(history).map(|hint| refused_hint(hint, models));
        return (None, ModelReason::AgentDefault, refused);
    }
    let mut refused = None;
    if let Some(hint) = last_hint(history) {
        if models.iter().any(|m| m == hint) {
            return (Some(hint.to_owned()), ModelReason::AgentHint, None);
        }
        refused = Some(refused_hint(hint, models));
    }
    let index = match choice.strategy {
        ModelStrategy::Fixed => 0,
        ModelStrategy::Escalate => escalated(models, history),
        ModelStrategy::CostOptimized => cheapest_unfailed(models, history),
    };
    let model = models.get(index).or(models.last()).cloned();
    (model, ModelReason::Strategy(choice.strategy), refused)
}

/// The `<next-model>` of the last attempt that ended.
fn last_hint(history: &[TriedModel]) -> Option<&str> {
    history
        .iter()
        .rev()
        .find(|a| a.outcome.is_some())
        .and_then(|a| a.next_model.as_deref())
}

fn refused_hint(hint: &str, models: &[String]) -> String {
    if models.is_empty() {
        format!(
            "the agent asked for model {hint:?} with <next-model>, but the Feature lists no \
             models (spec.models); ignored: add it to spec.models to allow it"
        )
    } else {
        format!(
            "the agent asked for model {hint:?} with <next-model>, which is not in the \
             Feature's spec.models ({}); ignored: add it to spec.models to allow it",
            models.join(", ")
        )
    }
}

/// Escalation: the model of the last attempt that ran one of the listed models, one step up
/// when that attempt failed or crashed; the first model when none did.
fn escalated(models: &[String], history: &[TriedModel]) -> usize {
    let last = history.iter().rev().find_map(|attempt| {
        let index = models
            .iter()
            .position(|m| Some(m) == attempt.model.as_ref())?;
        Some((index, attempt.outcome))
    });
    match last {
        Some((index, outcome)) if failed(outcome) => (index + 1).min(models.len() - 1),
        Some((index, _)) => index,
        None => 0,
    }
}

/// The cheapest model no attempt failed or crashed on; the last when all did.
fn cheapest_unfailed(models: &[String], history: &[TriedModel]) -> usize {
    models
        .iter()
        .position(|model| {
            !history
                .iter()
                .any(|a| failed(a.outcome) && a.model.as_ref() == Some(model))
        })
        .unwrap_or(models.len() - 1)
}

#[cfg(test)]
#[path = "selection_tests.rs"]
mod tests;
