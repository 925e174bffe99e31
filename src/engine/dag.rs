//! The task DAG: validation, readiness, derived parent status and the feature outcome.
//!
//! Shared types fixed here; the algorithms are filled in by the engine work.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle phase of a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TaskPhase {
    /// Waiting to run (its blockers may not be done yet).
    #[default]
    Pending,
    /// Claimed: an attempt is running.
    Running,
    /// Finished successfully.
    Done,
    /// Failed for good (retries used up, refused, or a child failed).
    Failed,
    /// Cannot run: a task it depends on (or its parent) failed.
    Blocked,
}

/// How a feature ended, or why it is not progressing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FeatureOutcome {
    /// Every task is done.
    Complete,
    /// Every task is resolved and some failed (or an agent promised FAILURE).
    Failed,
    /// Nothing is ready and nothing is running, but not every task is resolved.
    Blocked,
    /// The feature has no tasks.
    NoPlan,
    /// The iteration or budget limit was reached.
    LimitReached,
    /// The user paused the feature.
    Suspended,
}
