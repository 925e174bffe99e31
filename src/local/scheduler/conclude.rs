//! The local adapter of the engine's conclusion ([`crate::engine::conclusion`]): the task
//! row and the feature's settings in, the next state applied to the row. Pure.

use crate::engine::conclusion::{self, ConclusionPolicy, NextState, RecordedAttempt, TaskState};
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::AttemptEnd;
use crate::engine::policy::AttemptOutcome;
use crate::engine::workspace::WorkspaceReport;
use crate::local::feature::LocalFeature;
use crate::local::store::{AttemptRow, TaskRow};

/// Concludes the attempt that ended with `end` and applies the next state to `row`.
/// `history` is the task's attempts, oldest first (the one ending now not yet closed).
pub fn conclude(
    feature: &LocalFeature,
    row: &mut TaskRow,
    history: &[AttemptRow],
    end: &AttemptEnd,
    now_ms: i64,
    jitter: f64,
) -> NextState {
    conclude_with_workspace(feature, row, history, end, None, now_ms, jitter)
}

/// [`conclude`] after the git steps of a worktree attempt, which `workspace` reports.
pub fn conclude_with_workspace(
    feature: &LocalFeature,
    row: &mut TaskRow,
    history: &[AttemptRow],
    end: &AttemptEnd,
    workspace: Option<&WorkspaceReport>,
    now_ms: i64,
    jitter: f64,
) -> NextState {
    let history = history.iter().map(|a| RecordedAttempt {
        number: a.number,
        kind: a.kind,
        outcome: recorded_outcome(a.outcome.as_deref()),
    });
    let task = TaskState::from_history(
        row.name().to_string(),
        row.retry_count,
        feature.verify.verification(),
        row.attempt_count,
        history,
    );
    let next = conclusion::conclude(end, workspace, &task, &policy(feature, row), now_ms, jitter);
    apply(row, &next);
    next
}

/// An attempt outcome as the store records it (its API name).
pub fn recorded_outcome(text: Option<&str>) -> Option<AttemptOutcome> {
    serde_json::from_value(serde_json::Value::String(text?.to_string())).ok()
}

/// Applies a next state to the task row: phase, retry count and wait, what the next prompt
/// says about this attempt, and usage.
fn apply(row: &mut TaskRow, next: &NextState) {
    row.phase = next.phase;
    row.retry_count = next.retry_count;
    row.next_attempt_after_ms = next.next_attempt_after_ms;
    if let Some(previous) = &next.previous_attempt {
        row.previous_attempt = serde_json::to_string(previous).ok();
    } else if row.phase == TaskPhase::Done {
        row.previous_attempt = None;
    }
    row.usage.add(&next.usage);
}

/// The conclusion policy for a task: the feature's retry settings, with the task's own
/// retry limit if it has one.
pub fn policy(feature: &LocalFeature, row: &TaskRow) -> ConclusionPolicy {
    ConclusionPolicy::with_retry(feature.retry().for_task(row.spec.fields.max_retries))
}

#[cfg(test)]
#[path = "conclude_tests.rs"]
mod tests;
