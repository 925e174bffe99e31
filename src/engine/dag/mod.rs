//! The task DAG: validation, readiness, derived parent status and the feature outcome.
//!
//! Pure: no I/O and no clock. Callers build [`TaskNode`]s from the `Task` resources (or the
//! local store), construct a [`Dag`], ask it for [`Dag::ready`] tasks, report each phase a
//! runner produced with [`Dag::set_phase`], persist the [`AutoTransition`]s it returns, and
//! read the feature's [`Dag::outcome`].
//!
//! Rules (stated here once; `tests/dag_properties.rs` checks them):
//! - A task is *ready* when it is Pending, every task it depends on is Done, its parent (if
//!   any) has neither Failed nor is Blocked, and it has no children: a parent task is never
//!   run itself. A subtask also waits for its ancestors' dependencies, so a dependency
//!   declared on a parent gates everything inside it.
//! - Ready tasks run by priority (lower first), then creation `order`, then input position.
//! - A parent's phase is derived: Done when every child is Done, Failed when a child Failed,
//!   Blocked when every child is resolved and some are Blocked, Pending otherwise.
//! - A Pending task whose dependency (or an ancestor's dependency) Failed or is Blocked, or
//!   whose ancestor Failed, becomes Blocked; it returns to Pending when that cause goes away
//!   (the failed task is reset for a retry).

mod cycle;
mod error;
mod graph;
mod outcome;
mod query;
mod reason;
mod shape;
mod state;
mod transition;
mod validate;

#[cfg(test)]
mod tests;

pub use error::{CycleLink, CycleStep, DagError, DagErrors, PhaseError, write_one_per_line};
pub use outcome::{OutcomeInputs, PhaseCounts};
pub use shape::Shape;
pub use state::Dag;
pub use transition::{AutoTransition, TransitionReason};
pub use validate::validate;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One task as the DAG sees it: built from a `Task` resource or a local store row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskNode {
    /// Unique name within the feature.
    pub name: String,
    /// Names of the tasks that must be Done before this one can run.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Name of the parent task, if this is a subtask.
    #[serde(default)]
    pub parent: Option<String>,
    /// Lower runs first.
    #[serde(default)]
    pub priority: i32,
    /// Creation order; breaks priority ties.
    #[serde(default)]
    pub order: u64,
    /// Current phase (for a parent task it is recomputed from its children).
    #[serde(default)]
    pub phase: TaskPhase,
}

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

impl TaskPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [TaskPhase; 5] = [
        TaskPhase::Pending,
        TaskPhase::Running,
        TaskPhase::Done,
        TaskPhase::Failed,
        TaskPhase::Blocked,
    ];

    /// The phase's name, as status, the local store and the display write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskPhase::Pending => "Pending",
            TaskPhase::Running => "Running",
            TaskPhase::Done => "Done",
            TaskPhase::Failed => "Failed",
            TaskPhase::Blocked => "Blocked",
        }
    }

    /// The phase named `name`, if any.
    pub fn parse(name: &str) -> Option<TaskPhase> {
        TaskPhase::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for TaskPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
