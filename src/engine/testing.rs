//! Fixtures for tests of the engine and its callers (unit and integration tests).
#![allow(clippy::expect_used)]

use std::time::Duration;

use super::attempt::{AttemptResult, Exhaustion, Misconfiguration, OutcomeClass, StopReason};
use super::backoff::RetryBackoff;
use super::conclusion::{self, ConclusionPolicy, NextState, TaskState};
use super::dag::{PhaseCounts, TaskPhase};
use super::lifecycle::AttemptEnd;
use super::sigils::Sigils;
use super::verification::{AttemptKind, Verification};
use super::workspace::WorkspaceReport;

/// The clock (Unix ms) at which [`conclude`] concludes.
pub const NOW_MS: i64 = 1_000_000;

/// Retries with a base of 10 s, a cap of 10 min and at most 2 retries.
pub fn conclusion_policy() -> ConclusionPolicy {
    ConclusionPolicy::with_retry(RetryBackoff {
        base: Duration::from_secs(10),
        cap: Duration::from_secs(600),
        max_retries: 2,
    })
}

/// Task `t` after a work attempt: no retries used, no attempts without a verdict, no
/// verification; change what a test is about with struct update syntax.
pub fn task_state() -> TaskState {
    TaskState {
        name: "t".to_owned(),
        retry_count: 0,
        without_verdict: 0,
        verify: Verification::default(),
        kind: AttemptKind::Work,
    }
}

/// An attempt that ended with this result.
pub fn reported(result: AttemptResult) -> AttemptEnd {
    AttemptEnd::Reported(Box::new(result))
}

/// `end` of an attempt of `task`, concluded under [`conclusion_policy`] at [`NOW_MS`]
/// without jitter.
pub fn conclude(end: &AttemptEnd, task: &TaskState) -> NextState {
    conclude_with_workspace(end, None, task)
}

/// [`conclude`] with the report of the git step.
pub fn conclude_with_workspace(
    end: &AttemptEnd,
    workspace: Option<&WorkspaceReport>,
    task: &TaskState,
) -> NextState {
    conclusion::conclude(end, workspace, task, &conclusion_policy(), NOW_MS, 0.0)
}

/// A result of attempt `<task>-a1` that finished its turn with `end_turn` and said nothing:
/// change what a test is about with struct update syntax or the helpers below.
pub fn result(task: &str) -> AttemptResult {
    // Built from JSON so fields the runner adds later take their defaults here too.
    serde_json::from_value(serde_json::json!({
        "version": super::attempt::RESULT_SCHEMA_VERSION,
        "task": task,
        "attempt": format!("{task}-a1"),
        "outcome": "finished",
        "stopReason": "end_turn",
    }))
    .expect("the fixture is a valid result document")
}

/// A finished turn with `stop` and no sigils.
pub fn stopped(task: &str, stop: StopReason) -> AttemptResult {
    AttemptResult {
        stop_reason: Some(stop),
        ..result(task)
    }
}

/// A finished turn with these sigils.
pub fn with_sigils(task: &str, sigils: Sigils) -> AttemptResult {
    AttemptResult {
        sigils,
        ..result(task)
    }
}

/// `<task-done>task</task-done>`.
pub fn done(task: &str) -> AttemptResult {
    with_sigils(
        task,
        Sigils {
            task_done: Some(task.to_owned()),
            ..Sigils::default()
        },
    )
}

/// `<task-failed>task</task-failed>` with an optional reason.
pub fn failed(task: &str, reason: Option<&str>) -> AttemptResult {
    with_sigils(
        task,
        Sigils {
            task_failed: Some(task.to_owned()),
            task_failed_reason: reason.map(str::to_owned),
            ..Sigils::default()
        },
    )
}

/// An attempt that ended as `outcome` without a stop reason.
pub fn ended(task: &str, outcome: OutcomeClass) -> AttemptResult {
    AttemptResult {
        outcome,
        stop_reason: None,
        ..result(task)
    }
}

/// A crash with this summary.
pub fn crashed(task: &str, summary: &str) -> AttemptResult {
    AttemptResult {
        crash: Some(summary.to_owned()),
        ..ended(task, OutcomeClass::Crashed)
    }
}

/// Quota exhaustion, resetting at `reset_at` (Unix s) when known.
pub fn exhausted(task: &str, message: &str, reset_at: Option<i64>) -> AttemptResult {
    AttemptResult {
        exhaustion: Some(Exhaustion {
            message: message.to_owned(),
            reset_at,
        }),
        ..ended(task, OutcomeClass::Exhausted)
    }
}

/// An agent that cannot run as configured.
pub fn misconfigured(task: &str, problem: &str, fix: &str) -> AttemptResult {
    AttemptResult {
        misconfiguration: Some(Misconfiguration {
            problem: problem.to_owned(),
            fix: fix.to_owned(),
            reason: None,
        }),
        ..ended(task, OutcomeClass::Misconfigured)
    }
}

/// One `#[test]` per row, named by the row, each calling `check` with the row's arguments:
/// a table of cases that stays a list of named specifications.
///
/// ```ignore
/// named_cases! { assert_hidden;
///     quotation_lines_are_hidden("a\n  > b\nc", "....####.");
/// }
/// ```
#[cfg(test)]
macro_rules! named_cases {
    ($check:path; $($(#[$meta:meta])* $name:ident($($arg:expr),* $(,)?);)*) => {
        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                $check($($arg),*);
            }
        )*
    };
}
#[cfg(test)]
pub(crate) use named_cases;

/// Counts of `n` tasks in each listed phase, none of them ready.
pub fn phase_counts(phases: &[(TaskPhase, usize)]) -> PhaseCounts {
    let mut counts = PhaseCounts::default();
    for &(phase, n) in phases {
        let slot = match phase {
            TaskPhase::Pending => &mut counts.pending,
            TaskPhase::Running => &mut counts.running,
            TaskPhase::Done => &mut counts.done,
            TaskPhase::Failed => &mut counts.failed,
            TaskPhase::Blocked => &mut counts.blocked,
        };
        *slot += n;
    }
    counts
}
