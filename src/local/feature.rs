//! What local mode needs from a Feature manifest, as plain values (built from the manifest's
//! plan; task IDs are the template names).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::backoff::RetryBackoff;
use crate::engine::budget::Budget;

/// One task as the manifest declares it, its title defaulted to its name (see
/// [`crate::local::plan`]). Changing any field bumps the task's generation.
pub type LocalTask = crate::api::TaskTemplate;

/// The feature-level settings local mode applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalFeature {
    /// Feature name.
    pub name: String,
    /// The agent command (program and arguments).
    pub agent_command: Vec<String>,
    /// The agent's environment (`spec.agent.env` values); never stored, it may hold keys.
    #[serde(skip)]
    pub agent_env: Vec<(String, String)>,
    /// The pool after the primary agent (`spec.fallbackAgents`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_agents: Vec<LocalAgent>,
    /// Which model each attempt asks the agent for (`spec.model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::api::ModelPolicy>,
    /// Maximum concurrent attempts.
    pub parallelism: u32,
    /// Attempt budget over the feature's life, if any.
    pub max_iterations: Option<u32>,
    /// Cost and token limits over the feature's life (`spec.budget`).
    #[serde(default)]
    pub budget: Budget,
    /// Retries allowed per task unless the task overrides it.
    pub max_retries: u32,
    /// Base of the exponential retry backoff.
    pub backoff_base: Duration,
    /// Cap of the retry backoff.
    pub backoff_max: Duration,
    /// How tasks reported done are verified (`spec.verify`).
    pub verify: crate::api::VerifySpec,
    /// The feature is paused: nothing starts.
    pub suspend: bool,
    /// The feature's spec text for the prompt.
    pub spec_text: Option<String>,
    /// The feature's plan text for the prompt.
    pub plan_text: Option<String>,
    /// Journal and knowledge budgets, seeded knowledge (`knowledgeFrom` is refused locally).
    #[serde(default)]
    pub memory: crate::api::MemorySpec,
    /// The tasks, in manifest (creation) order.
    pub tasks: Vec<LocalTask>,
}

impl LocalFeature {
    /// The feature's retry settings (a task's own `maxRetries` applied with
    /// [`RetryBackoff::for_task`]).
    pub fn retry(&self) -> RetryBackoff {
        RetryBackoff {
            base: self.backoff_base,
            cap: self.backoff_max,
            max_retries: self.max_retries,
        }
    }
}

/// An agent of the pool after the primary one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalAgent {
    /// Its name in the pool.
    pub name: String,
    /// Its command (program and arguments).
    pub command: Vec<String>,
    /// Its environment (`env` values); never stored, it may hold keys.
    #[serde(skip)]
    pub env: Vec<(String, String)>,
}
