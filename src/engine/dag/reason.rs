//! Why the DAG derives a phase change: the reason attached to each [`AutoTransition`].
//!
//! [`AutoTransition`]: super::AutoTransition

use super::TaskPhase;
use super::state::{Dag, is_broken};
use super::transition::TransitionReason;

impl Dag {
    /// Why `task` moves to `to` (called before the move).
    pub(super) fn reason(&self, task: u32, to: TaskPhase) -> TransitionReason {
        if self.graph.is_parent(task) {
            return match to {
                TaskPhase::Done => TransitionReason::SubtasksDone,
                TaskPhase::Failed => TransitionReason::SubtaskFailed {
                    subtask: self
                        .first_child_in(task, TaskPhase::Failed)
                        .unwrap_or_default(),
                },
                TaskPhase::Blocked => TransitionReason::SubtasksBlocked,
                TaskPhase::Pending | TaskPhase::Running => TransitionReason::SubtaskReopened,
            };
        }
        if to == TaskPhase::Blocked {
            self.blocking_cause(task)
        } else {
            TransitionReason::Unblocked
        }
    }

    fn first_child_in(&self, task: u32, phase: TaskPhase) -> Option<String> {
        self.graph
            .children
            .of(task)
            .iter()
            .find(|&&c| self.tasks[c as usize].phase == phase)
            .map(|&c| self.graph.name(c).to_owned())
    }

    /// The nearest failed prerequisite or ancestor that blocks `task`.
    fn blocking_cause(&self, task: u32) -> TransitionReason {
        let mut at = Some(task);
        while let Some(t) = at {
            if t != task && self.tasks[t as usize].phase == TaskPhase::Failed {
                return TransitionReason::AncestorFailed {
                    ancestor: self.graph.name(t).to_owned(),
                };
            }
            let broken = self
                .graph
                .deps
                .of(t)
                .iter()
                .find(|&&d| is_broken(self.tasks[d as usize].phase));
            if let Some(&d) = broken {
                return TransitionReason::PrerequisiteFailed {
                    prerequisite: self.graph.name(d).to_owned(),
                };
            }
            at = self.graph.parent[t as usize];
        }
        // Unreachable while the counters are consistent; an empty name rather than a panic.
        TransitionReason::PrerequisiteFailed {
            prerequisite: String::new(),
        }
    }
}
