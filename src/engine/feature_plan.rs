//! The feature-level part of a plan, shared by the controller and `ralph run`: the order
//! a feature's tasks are looked at (ready ones first, in run order, so the free attempt
//! slots go to them) and the hand-out of those slots under the feature's [`Gate`].
//! Each mode builds its own task views and performs its own effects.

use super::conclusion::Gate;
use super::dag::{Dag, TaskPhase};
use super::lifecycle::FeatureGate;

/// The input positions of `dag`'s tasks, the ready ones first in the order they should
/// run, then the others in input order; each with whether it is ready.
pub fn ready_first(dag: &Dag) -> impl Iterator<Item = (usize, bool)> + '_ {
    let ready = dag.ready_positions().map(|p| (p, true));
    let rest = (0..dag.len())
        .filter(|&p| !dag.is_ready_at(p))
        .map(|p| (p, false));
    ready.chain(rest)
}

/// Whether a task asks for an attempt slot now: it is ready, Pending, and not waiting
/// (for its backoff or its pool's rest) past `now_ms`.
pub fn may_start(
    phase: TaskPhase,
    ready: bool,
    next_attempt_after_ms: Option<i64>,
    now_ms: i64,
) -> bool {
    phase == TaskPhase::Pending && ready && next_attempt_after_ms.is_none_or(|at| now_ms >= at)
}

/// A feature's attempt slots, handed out to the tasks that ask, in the order they ask.
#[derive(Clone, Debug)]
pub struct Slots {
    gate: Gate,
    start_limit: usize,
    handed_out: usize,
}

impl Slots {
    /// The slots `gate` leaves free, at most `start_limit` of them (a limit on new attempts
    /// from outside the feature, such as the controller's).
    pub fn new(gate: Gate, start_limit: usize) -> Self {
        Slots {
            gate,
            start_limit,
            handed_out: 0,
        }
    }

    /// The feature's gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The gate of a task that asks for no slot (running, waiting, not ready).
    pub fn standing(&self) -> FeatureGate {
        self.gate.standing()
    }

    /// The gate of the next task: a task that asks (`may_start`) is handed a slot (`Open`)
    /// while the feature and the start limit have one, and is `AtCapacity` after that.
    pub fn take(&mut self, may_start: bool) -> FeatureGate {
        if !may_start {
            return self.standing();
        }
        let gate = match self.gate.next(self.handed_out) {
            FeatureGate::Open if self.handed_out >= self.start_limit => FeatureGate::AtCapacity,
            gate => gate,
        };
        if gate == FeatureGate::Open {
            self.handed_out += 1;
        }
        gate
    }

    /// Slots handed out so far.
    pub fn handed_out(&self) -> usize {
        self.handed_out
    }
}

#[cfg(test)]
#[path = "feature_plan_tests.rs"]
mod tests;
