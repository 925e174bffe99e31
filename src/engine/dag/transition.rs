//! Phase changes the DAG makes on its own, returned as data so callers persist them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::TaskPhase;

/// A phase change the DAG derived from another change (or from loading inconsistent phases).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoTransition {
    /// The task whose phase changed.
    pub task: String,
    /// Its phase before.
    pub from: TaskPhase,
    /// Its phase now.
    pub to: TaskPhase,
    /// Why.
    pub reason: TransitionReason,
}

/// Why the DAG changed a task's phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum TransitionReason {
    /// Every subtask of this parent is Done.
    SubtasksDone,
    /// A subtask of this parent Failed.
    SubtaskFailed {
        /// The first failed subtask.
        subtask: String,
    },
    /// Every subtask of this parent is resolved and some are Blocked.
    SubtasksBlocked,
    /// A prerequisite (a dependency of the task or of one of its ancestors) Failed or is Blocked.
    PrerequisiteFailed {
        /// The first such prerequisite.
        prerequisite: String,
    },
    /// An ancestor of the task Failed.
    AncestorFailed {
        /// The nearest failed ancestor.
        ancestor: String,
    },
    /// Nothing blocks the task any more (the failed prerequisite was reset).
    Unblocked,
    /// A subtask of this parent is open again.
    SubtaskReopened,
}

impl fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionReason::SubtasksDone => write!(f, "every subtask is done"),
            TransitionReason::SubtaskFailed { subtask } => {
                write!(f, "subtask \"{subtask}\" failed")
            }
            TransitionReason::SubtasksBlocked => {
                write!(f, "every subtask is resolved and some are blocked")
            }
            TransitionReason::PrerequisiteFailed { prerequisite } => {
                write!(f, "prerequisite \"{prerequisite}\" failed or is blocked")
            }
            TransitionReason::AncestorFailed { ancestor } => {
                write!(f, "parent task \"{ancestor}\" failed")
            }
            TransitionReason::Unblocked => write!(f, "no failed prerequisite any more"),
            TransitionReason::SubtaskReopened => write!(f, "a subtask is open again"),
        }
    }
}
