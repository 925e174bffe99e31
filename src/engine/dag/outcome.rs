//! Phase counts and the feature outcome.

use serde::{Deserialize, Serialize};

use super::state::{Dag, phase_slot};
use super::{FeatureOutcome, TaskPhase};

/// What, besides the tasks, decides whether a feature stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutcomeInputs {
    /// The user paused the feature.
    pub suspended: bool,
    /// Attempts started so far.
    pub iterations_used: u64,
    /// Most attempts allowed; `None` for no limit.
    pub max_iterations: Option<u64>,
    /// The token or cost budget is spent.
    pub budget_reached: bool,
}

impl OutcomeInputs {
    fn limit_reached(&self) -> bool {
        self.budget_reached
            || self
                .max_iterations
                .is_some_and(|max| self.iterations_used >= max)
    }
}

/// How many tasks (parents included) are in each phase, and how many are ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseCounts {
    /// Pending tasks (ready or not).
    pub pending: usize,
    /// Running tasks.
    pub running: usize,
    /// Done tasks.
    pub done: usize,
    /// Failed tasks.
    pub failed: usize,
    /// Blocked tasks.
    pub blocked: usize,
    /// Pending tasks that can run now.
    pub ready: usize,
}

impl PhaseCounts {
    /// Tasks counted.
    pub fn total(&self) -> usize {
        self.pending + self.running + self.done + self.failed + self.blocked
    }

    /// Tasks that will not change without outside help: Done, Failed or Blocked.
    pub fn resolved(&self) -> usize {
        self.done + self.failed + self.blocked
    }
}

impl Dag {
    /// Counts per phase, plus the ready count. O(1).
    pub fn counts(&self) -> PhaseCounts {
        let of = |phase| self.phase_counts[phase_slot(phase)];
        PhaseCounts {
            pending: of(TaskPhase::Pending),
            running: of(TaskPhase::Running),
            done: of(TaskPhase::Done),
            failed: of(TaskPhase::Failed),
            blocked: of(TaskPhase::Blocked),
            ready: self.ready_count(),
        }
    }

    /// The feature's outcome, or `None` while progress is possible. In order: NoPlan (no
    /// tasks), Complete (all Done), Failed (all resolved, some Failed), Suspended,
    /// LimitReached (once the attempts running when the limit was reached have finished),
    /// Blocked (nothing ready or running, yet not all resolved).
    pub fn outcome(&self, inputs: OutcomeInputs) -> Option<FeatureOutcome> {
        let counts = self.counts();
        if counts.total() == 0 {
            Some(FeatureOutcome::NoPlan)
        } else if counts.done == counts.total() {
            Some(FeatureOutcome::Complete)
        } else if counts.resolved() == counts.total() && counts.failed > 0 {
            Some(FeatureOutcome::Failed)
        } else if inputs.suspended {
            Some(FeatureOutcome::Suspended)
        } else if inputs.limit_reached() && counts.running == 0 {
            Some(FeatureOutcome::LimitReached)
        } else if counts.ready == 0 && counts.running == 0 {
            Some(FeatureOutcome::Blocked)
        } else {
            None
        }
    }
}
