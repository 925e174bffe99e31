//! Verification on a cluster (docs/verification.md): which kind of attempt a Task runs next,
//! and what a Feature's `spec.verify` needs before any attempt may start. The decisions are
//! the engine's ([`crate::engine::verification`]); this reads them off Task and Feature objects.

use kube::ResourceExt;

use super::problem::Problem;
use super::time::time;
use crate::api::{Feature, TaskStatus, conditions};
use crate::controller::plan::cached::CachedTask;
use crate::engine::dag::TaskPhase;
use crate::engine::policy::Decision;
use crate::engine::verification::{self, AttemptKind, PastAttempt};

/// Whether a verification Pod of this Feature sees the work it verifies: only when the work
/// lives in git (`spec.workspace.git`), from which the verification Pod starts on the task's
/// work branch (the worker pushed it there). Each attempt Pod otherwise works in its own
/// emptyDir.
pub(crate) fn verifier_sees_the_work(feature: &Feature) -> bool {
    feature.spec.git().is_some()
}

/// What keeps the Feature's `spec.verify` from working on a cluster, if anything.
pub(crate) fn verify_problem(feature: &Feature) -> Option<Problem> {
    if !feature.spec.verify.agent || verifier_sees_the_work(feature) {
        return None;
    }
    Some(Problem {
        reason: conditions::REASON_VERIFY_NEEDS_WORKSPACE,
        message: format!(
            "Feature {}/{} sets spec.verify.agent, but its verification Pods could not see the \
             work: each attempt Pod works in its own empty directory unless the work is in git. \
             Set spec.workspace.git (the verifier then starts from the task's work branch), or \
             remove spec.verify.agent and check the work with spec.verify.command, which runs \
             in the worker's own Pod; no attempt starts until it is fixed",
            feature.namespace().unwrap_or_default(),
            feature.name_any()
        ),
    })
}

/// The Task's attempts as the engine reads them, oldest first.
fn history(task: &CachedTask) -> impl DoubleEndedIterator<Item = PastAttempt> + '_ {
    task.status
        .iter()
        .flat_map(|s| &s.attempts)
        .map(|a| PastAttempt {
            kind: a.kind,
            outcome: a.outcome,
            generation: a.generation,
        })
}

/// What the Task's next attempt does: verify the work its last attempt reported done, or work.
pub(crate) fn next_attempt_kind(feature: &Feature, task: &CachedTask) -> AttemptKind {
    verification::next_attempt_kind(
        feature.spec.verify.agent,
        task.metadata.generation.unwrap_or(0),
        history(task),
    )
}

/// What the agent that reported the task done said about its work (its journal notes), for
/// the verification prompt.
pub(crate) fn reported_work(task: &CachedTask) -> Option<String> {
    let last_work = task
        .status
        .iter()
        .flat_map(|s| &s.attempts)
        .rev()
        .find(|a| a.kind == AttemptKind::Work)?;
    let notes = last_work.sigils.journal.join("\n");
    (!notes.trim().is_empty()).then_some(notes)
}

/// Records the kind of the attempt that just started on its record, and a verification in
/// progress as the `Verifying` condition.
pub(crate) fn record_start(
    status: &mut TaskStatus,
    kind: AttemptKind,
    generation: Option<i64>,
    now_ms: i64,
) {
    let number = status.attempt_count;
    if let Some(record) = status
        .attempts
        .iter_mut()
        .rev()
        .find(|a| a.number == number)
    {
        record.kind = kind;
    }
    if kind == AttemptKind::Verify {
        let c = conditions::condition(
            conditions::VERIFYING,
            conditions::STATUS_TRUE,
            "VerificationRunning",
            format!("attempt {number} verifies the work reported done (read-only)"),
            generation,
            time(now_ms),
        );
        conditions::set_condition(&mut status.conditions, c);
    }
}

/// After an attempt ended: `Verifying=True` while a verification of reported work is due,
/// `False` (with the decision's reason) once a verification has ruled.
pub(crate) fn record_end(
    status: &mut TaskStatus,
    feature: &Feature,
    decision: &Decision,
    generation: Option<i64>,
    now_ms: i64,
) {
    let history = status.attempts.iter().map(|a| PastAttempt {
        kind: a.kind,
        outcome: a.outcome,
        generation: a.generation,
    });
    let due = status.phase == TaskPhase::Pending
        && verification::next_attempt_kind(
            feature.spec.verify.agent,
            generation.unwrap_or(0),
            history,
        ) == AttemptKind::Verify;
    let c = if due {
        conditions::condition(
            conditions::VERIFYING,
            conditions::STATUS_TRUE,
            "VerificationPending",
            "the work was reported done; a read-only verification attempt will check it",
            generation,
            time(now_ms),
        )
    } else if conditions::find(&status.conditions, conditions::VERIFYING).is_some() {
        conditions::condition(
            conditions::VERIFYING,
            conditions::STATUS_FALSE,
            decision.event.reason,
            decision.event.message.clone(),
            generation,
            time(now_ms),
        )
    } else {
        return;
    };
    conditions::set_condition(&mut status.conditions, c);
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
