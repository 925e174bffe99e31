//! Verified completion: an agent saying a task is done is not enough. After a done verdict
//! the feature's `verify.command` runs in the workspace (the runner reports it as a
//! [`CheckReport`]), then, when `verify.agent` is on, a read-only verification attempt
//! ([`AttemptKind::Verify`]) must answer `<verify-pass>`. A failing command, a rejecting,
//! crashing or silent verifier all count as a failed verification: the task is retried with
//! the reason in its next prompt, counted against its retries.
//!
//! Pure: [`conclude_attempt`] is the one place an attempt's kind and the feature's
//! verification settings shape the policy's decision; [`next_attempt_kind`] derives from a
//! task's attempt history whether its next attempt works or verifies.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::attempt::AttemptResult;
use super::lifecycle::AttemptEnd;
use super::policy::{self, AttemptOutcome, Decision, TaskContext};

/// Default and largest number of bytes of the command's output kept in the result.
pub const MAX_OUTPUT_TAIL_BYTES: u32 = 2048;

/// Default time limit of `verify.command`, seconds.
pub const DEFAULT_COMMAND_TIMEOUT_SECONDS: u32 = 600;

/// Longest check reason carried into the next prompt (characters): the command, its exit
/// and its output tail.
const MAX_CHECK_REASON_CHARS: usize = 2400;

/// What an attempt does: the work, or a read-only check of work reported done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AttemptKind {
    /// An agent works on the task.
    #[default]
    Work,
    /// A fresh, read-only agent session checks the work another attempt reported done.
    Verify,
}

impl AttemptKind {
    /// The name used in status, labels, the store and the display.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Work => "work",
            Self::Verify => "verify",
        }
    }

    /// The kind named `text` (`work` for anything unknown).
    pub fn parse(text: &str) -> Self {
        if text == Self::Verify.as_str() {
            Self::Verify
        } else {
            Self::Work
        }
    }
}

impl fmt::Display for AttemptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which verification a feature asks for (its `spec.verify`, as the conclusion needs it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// A verification agent attempt must pass before the task is done.
    pub agent: bool,
    /// `verify.command` must pass (the runner runs it after a done verdict).
    pub command: bool,
}

/// How `verify.command` ended, as the runner reports it in the attempt result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The command, as given (run with `sh -c` in the workspace).
    pub command: String,
    /// Its exit code; unset when it was killed or could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// It ran past its time limit and was killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Why it could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The end of its combined stdout and stderr (at most the configured bytes).
    #[serde(default)]
    pub output_tail: String,
}

impl CheckReport {
    /// True when the command exited 0 in time.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && self.error.is_none()
    }

    /// One sentence on how it failed, followed by the output tail (for the next prompt).
    pub fn failure(&self) -> String {
        let how = match (&self.error, self.timed_out, self.exit_code) {
            (Some(error), ..) => format!("could not run: {error}"),
            (None, true, _) => "ran past its time limit and was killed".to_owned(),
            (None, false, Some(code)) => format!("exited with code {code}"),
            (None, false, None) => "was killed by a signal".to_owned(),
        };
        let mut text = format!("verify.command `{}` {how}", self.command.trim());
        let tail = self.output_tail.trim();
        if !tail.is_empty() {
            text.push_str("; the end of its output:\n");
            text.push_str(tail);
        }
        bounded_tail(&text, MAX_CHECK_REASON_CHARS)
    }
}

/// One earlier attempt of a task, as [`next_attempt_kind`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PastAttempt {
    /// Work or verify.
    pub kind: AttemptKind,
    /// How it ended; `None` while it runs (or when the record lost it).
    pub outcome: Option<AttemptOutcome>,
    /// The task generation it was spawned for, when recorded.
    pub generation: Option<i64>,
}

/// Whether the task's next attempt works or verifies: it verifies when verification agents
/// are on and the last attempt that judged the task was a work attempt of the current
/// generation that ended done. Verification attempts that did not judge (interrupted,
/// exhausted agent, misconfigured agent) are looked past, so the verification runs again.
pub fn next_attempt_kind(
    verify_agent: bool,
    generation: i64,
    history: impl DoubleEndedIterator<Item = PastAttempt>,
) -> AttemptKind {
    if !verify_agent {
        return AttemptKind::Work;
    }
    let judged = history.rev().find(|attempt| {
        !(attempt.kind == AttemptKind::Verify
            && matches!(
                attempt.outcome,
                Some(
                    AttemptOutcome::Interrupted
                        | AttemptOutcome::Exhausted
                        | AttemptOutcome::Misconfigured
                )
            ))
    });
    match judged {
        Some(PastAttempt {
            kind: AttemptKind::Work,
            outcome: Some(AttemptOutcome::Done),
            generation: attempt_generation,
        }) if attempt_generation.is_none_or(|g| g == generation) => AttemptKind::Verify,
        _ => AttemptKind::Work,
    }
}

/// The policy's decision on an attempt of `kind`: a verification attempt is judged by its
/// verdict (no verdict or a crash is a failed verification); a work attempt that reported
/// done must also have passed `verify.command` when the feature sets one, and is then
/// verified by an agent when `task.verify` is on.
pub fn conclude_attempt(
    end: &AttemptEnd,
    task: &TaskContext,
    kind: AttemptKind,
    verification: Verification,
) -> Decision {
    match (kind, end) {
        (AttemptKind::Verify, AttemptEnd::Reported(result)) => {
            policy::decide_verification(task, result)
        }
        (AttemptKind::Verify, AttemptEnd::NoResult { reason }) => policy::verification_failed(
            task,
            format!("the verifier ended without a result: {}", reason.trim()),
        ),
        (AttemptKind::Work, AttemptEnd::Reported(result)) if verification.command => {
            let decision = end.conclude(task);
            if decision.outcome == AttemptOutcome::Done {
                check_command(decision, task, result)
            } else {
                decision
            }
        }
        _ => end.conclude(task),
    }
}

/// A done work attempt stands only when its `verify.command` passed.
fn check_command(done: Decision, task: &TaskContext, result: &AttemptResult) -> Decision {
    match &result.check {
        Some(check) if check.passed() => done,
        Some(check) => policy::verification_failed(task, check.failure()),
        None => policy::verification_failed(
            task,
            "verify.command did not run (the runner reported no check); is the runner older \
             than the controller?"
                .to_owned(),
        ),
    }
}

/// The last `max` characters of `text`'s last lines, marking the cut at the start.
fn bounded_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let (head, _) = text.split_once('\n').unwrap_or((text, ""));
    let head: String = head.chars().take(max / 4).collect();
    let keep = max.saturating_sub(head.chars().count() + 2);
    let tail: String = text.chars().skip(count - keep).collect();
    format!("{head}\n…{tail}")
}

#[cfg(test)]
#[path = "verification_tests.rs"]
mod tests;
