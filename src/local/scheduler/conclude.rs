//! From how an attempt ended to what happens to its task: the lifecycle's
//! [`AttemptEnd`] is judged by the engine's outcome policy, and the policy's [`Decision`]
//! is applied to the stored task row. Pure: time and jitter are arguments.

use crate::engine::attempt::{AttemptResult, OutcomeClass, RESULT_SCHEMA_VERSION, Timings};
use crate::engine::backoff::RetryPolicy;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::AttemptEnd;
use crate::engine::policy::{self, Decision, PhaseChange, TaskContext};
use crate::local::store::TaskRow;

/// Judges an ended attempt with the outcome policy.
pub fn judge(task: &TaskContext, attempt: &str, end: &AttemptEnd, now_ms: i64) -> Decision {
    match end {
        AttemptEnd::Reported(result) => policy::decide(task, result),
        AttemptEnd::NoResult { reason } => policy::on_ended_without_result(task, reason),
        AttemptEnd::ClaimLost { .. } => policy::on_claim_lost(task),
        // Stopped on purpose (Ctrl+C, or superseded by a new generation) without a result
        // of its own: the policy's "cancelled" row.
        AttemptEnd::Interrupted { .. } | AttemptEnd::Superseded { .. } => {
            policy::decide(task, &cancelled(&task.name, attempt, now_ms))
        }
    }
}

/// A result document standing for an attempt that was stopped before it reported.
fn cancelled(task: &str, attempt: &str, now_ms: i64) -> AttemptResult {
    AttemptResult {
        version: RESULT_SCHEMA_VERSION,
        task: task.to_string(),
        attempt: Some(attempt.to_string()),
        outcome: OutcomeClass::Cancelled,
        stop_reason: None,
        exit_code: None,
        signal: None,
        sigils: Default::default(),
        crash: None,
        misconfiguration: None,
        exhaustion: None,
        agent: None,
        model: None,
        usage: Default::default(),
        timings: Timings {
            started_at_ms: now_ms,
            ended_at_ms: now_ms,
            initialize_ms: None,
        },
        truncated: Vec::new(),
    }
}

/// The phase a decision puts the task in. A claimed task was Pending before it ran, so
/// "unchanged" means Pending again.
pub fn next_phase(decision: &Decision) -> TaskPhase {
    match decision.phase {
        PhaseChange::Unchanged | PhaseChange::Pending => TaskPhase::Pending,
        PhaseChange::Done => TaskPhase::Done,
        PhaseChange::Failed => TaskPhase::Failed,
    }
}

/// Applies a decision to the task row: phase, retry count and backoff, what the next prompt
/// says about this attempt, and usage. `jitter` is uniform in `[0, 1)`.
pub fn apply(
    row: &mut TaskRow,
    decision: &Decision,
    retry: &RetryPolicy,
    usage: &crate::engine::attempt::Usage,
    now_ms: i64,
    jitter: f64,
) {
    row.phase = next_phase(decision);
    if let Some(retries) = decision.retry {
        row.retry_count = retries;
    }
    row.next_attempt_after_ms = decision.next_attempt_after(retry, now_ms, jitter);
    if let Some(previous) = &decision.previous_attempt {
        row.previous_attempt = serde_json::to_string(previous).ok();
    } else if row.phase == TaskPhase::Done {
        row.previous_attempt = None;
    }
    row.usage.add(usage);
}

/// The retry policy for a task: the feature's, with the task's own retry limit if it has one.
pub fn retry_policy(feature: &crate::local::feature::FeatureSpec, row: &TaskRow) -> RetryPolicy {
    RetryPolicy {
        base: feature.backoff_base,
        cap: feature.backoff_max,
        max_retries: row.spec.max_retries.unwrap_or(feature.max_retries),
    }
}

/// What the policy needs to know about the task. Local mode has no verifier, so the
/// agent's `task-done` is final (the run warns when the feature asks for verification).
pub fn context(feature: &crate::local::feature::FeatureSpec, row: &TaskRow) -> TaskContext {
    TaskContext {
        name: row.name().to_string(),
        retry_count: row.retry_count,
        max_retries: retry_policy(feature, row).max_retries,
        verify: false,
    }
}

#[cfg(test)]
#[path = "conclude_tests.rs"]
mod tests;
