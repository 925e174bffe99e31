//! The controller's side of the pool and model selection ([`crate::engine::selection`]):
//! a Task's attempt history in, the choice recorded on the attempt it starts.

use crate::api::{Feature, TaskStatus};
use crate::controller::plan::cached::CachedTask;
use crate::engine::selection::{
    self, Choice, ModelChoice, PoolAgent, Rests, Selection, TriedModel,
};

/// A Task's attempts (the ones its status keeps), oldest first, as the selection reads them.
pub fn history(task: &CachedTask) -> Vec<TriedModel> {
    task.status
        .as_ref()
        .map(|status| {
            status
                .attempts
                .iter()
                .map(|a| TriedModel {
                    model: a.ran_by.requested_model.clone(),
                    outcome: a.outcome,
                    next_model: a.sigils.next_model.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Feature's pool with each agent's identity, and its model policy: computed once per
/// reconcile, then asked for every ready task.
#[derive(Clone, Debug)]
pub struct FeaturePool<'a> {
    agents: Vec<(&'a str, String)>,
    models: ModelChoice<'a>,
}

impl<'a> FeaturePool<'a> {
    /// The pool and model policy of `feature`.
    pub fn of(feature: &'a Feature) -> Self {
        FeaturePool {
            agents: feature
                .spec
                .pool()
                .into_iter()
                .map(|(name, agent)| (name, agent.identity()))
                .collect(),
            models: feature.spec.model_choice(),
        }
    }

    /// The agent and model of the task's next attempt.
    pub fn select(&self, task: &CachedTask, rests: &Rests, now_ms: i64) -> Selection {
        let agents: Vec<PoolAgent<'_>> = self
            .agents
            .iter()
            .map(|(name, identity)| PoolAgent { name, identity })
            .collect();
        selection::select(&agents, &self.models, &history(task), rests, now_ms)
    }
}

/// The agent and model of the task's next attempt (see [`FeaturePool`] for many tasks).
pub fn select(feature: &Feature, task: &CachedTask, rests: &Rests, now_ms: i64) -> Selection {
    FeaturePool::of(feature).select(task, rests, now_ms)
}

/// Records the pool agent and model on the attempt just started (the last record).
pub fn record_choice(status: &mut TaskStatus, choice: &Choice) {
    if let Some(record) = status.attempts.last_mut() {
        record.pool_agent = Some(choice.agent.clone());
        record.ran_by.requested_model = choice.model.clone();
    }
}

/// The identity of the pool agent that ran the task's current attempt (the one that
/// reported exhaustion), and its name; the primary agent for an attempt that recorded none.
pub fn exhausted_agent(feature: &Feature, task: &CachedTask) -> (String, String) {
    let name = task
        .status
        .as_ref()
        .and_then(|s| s.attempts.last())
        .and_then(|a| a.pool_agent.clone())
        .unwrap_or_else(|| crate::api::PRIMARY_AGENT.to_owned());
    let agent = feature
        .spec
        .pool_agent(&name)
        .unwrap_or(&feature.spec.agent);
    (agent.identity(), name)
}

/// Sets `AgentsAvailable=False` with until when while every agent of the pool rests, and
/// back to `True` once one is available (the condition appears only after a pool rested).
pub fn set_pool_condition(
    status: &mut crate::api::FeatureStatus,
    pool_resting: Option<&(i64, String)>,
    generation: Option<i64>,
    now_ms: i64,
) {
    use crate::api::conditions::{self, AGENTS_AVAILABLE, STATUS_FALSE, STATUS_TRUE};
    let condition = match pool_resting {
        Some((_, message)) => conditions::condition(
            AGENTS_AVAILABLE,
            STATUS_FALSE,
            "PoolExhausted",
            message.clone(),
            generation,
            super::time::time(now_ms),
        ),
        None if conditions::find(&status.conditions, AGENTS_AVAILABLE).is_some() => {
            conditions::condition(
                AGENTS_AVAILABLE,
                STATUS_TRUE,
                "AgentAvailable",
                "an agent of the pool is available",
                generation,
                super::time::time(now_ms),
            )
        }
        None => return,
    };
    conditions::set_condition(&mut status.conditions, condition);
}

/// A fallback agent no Pod can be built for (it names no image): the user must fix it
/// before any attempt starts, as for `spec.agent`.
pub fn fallback_problem(feature: &Feature) -> Option<super::problem::Problem> {
    use kube::ResourceExt;
    let missing = feature.spec.fallback_agents.iter().find(|named| {
        named
            .agent
            .image
            .as_deref()
            .is_none_or(|i| i.trim().is_empty())
    })?;
    Some(super::problem::Problem {
        reason: crate::api::conditions::REASON_MISSING_AGENT_IMAGE,
        message: format!(
            "Feature {}/{}: spec.fallbackAgents[{}].image is required to run on a cluster: set \
             it to an image that contains the agent CLI; no attempt starts until it is fixed",
            feature.namespace().unwrap_or_default(),
            feature.name_any(),
            missing.name
        ),
    })
}
