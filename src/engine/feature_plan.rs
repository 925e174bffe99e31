//! The feature-level part of a plan, shared by the controller and `ralph run`: the order
//! a feature's tasks are looked at (ready ones first, in run order, so the free attempt
//! slots go to them) and the hand-out of those slots in one pass under the feature's
//! [`Gate`], taken once per pass: a slot to each attempt that starts. Each mode builds its
//! own task views and performs its own effects.

use super::conclusion::Gate;
use super::dag::{Dag, TaskPhase};
use super::lifecycle::{self, Action, ClaimView, FeatureGate, RunView, TaskView};

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

/// A feature's attempt slots, handed out in one pass over its tasks to the attempts that
/// start, in the order the tasks are looked at. A slot is counted only when a task starts
/// its next attempt: a ready task whose claim someone else holds, an attempt started again
/// (its run never began) and a renewed claim take none.
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

    /// The gate of the next task that would start: `Open` while the feature and the start
    /// limit have a slot left.
    pub fn next(&self) -> FeatureGate {
        match self.gate.next(self.handed_out) {
            FeatureGate::Open if self.handed_out >= self.start_limit => FeatureGate::AtCapacity,
            gate => gate,
        }
    }

    /// The gate of a task: one that asks (`may_start`) sees [`Slots::next`], one that does
    /// not the standing gate. Nothing is handed out yet: [`Slots::decide`] counts the slot.
    pub fn offer(&self, may_start: bool) -> FeatureGate {
        match may_start {
            true => self.next(),
            false => self.standing(),
        }
    }

    /// What `task` must do ([`lifecycle::decide`]) under the gate it was offered; its slot
    /// is counted when the actions start its next attempt.
    pub fn decide(
        &mut self,
        task: &TaskView,
        claim: Option<&ClaimView>,
        run: &RunView,
        now_ms: i64,
    ) -> Vec<Action> {
        let actions = lifecycle::decide(task, claim, run, now_ms);
        if starts_next_attempt(task, &actions) {
            self.handed_out += 1;
        }
        actions
    }

    /// Slots handed out so far: the attempts started in this pass.
    pub fn handed_out(&self) -> usize {
        self.handed_out
    }
}

/// Whether `actions` start `task`'s next attempt (a new iteration), rather than start the
/// attempt it records again or start nothing.
pub fn starts_next_attempt(task: &TaskView, actions: &[Action]) -> bool {
    let next = task.attempt.as_ref().map_or(0, |a| a.number) + 1;
    actions
        .iter()
        .any(|a| matches!(a, Action::StartAttempt { attempt } if *attempt == next))
}

#[cfg(test)]
#[path = "feature_plan_tests.rs"]
mod tests;
