//! Verified completion: an agent saying a task is done is not enough. After a done verdict
//! the feature's `verify.command` runs in the workspace (the runner reports it as a
//! [`CheckReport`]), then, when `verify.agent` is on, a read-only verification attempt
//! ([`AttemptKind::Verify`]) must answer `<verify-pass>`. A failing command, a rejecting,
//! crashing or silent verifier all count as a failed verification: the task is retried with
//! the reason in its next prompt, counted against its retries.
//!
//! Pure: [`next_attempt_kind`] derives from a task's attempt history whether its next
//! attempt works or verifies; `policy::judge` applies an attempt's kind and the feature's
//! [`Verification`] to its decision.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::outcome::AttemptOutcome;

pub use super::attempt::CheckReport;

/// Default and largest number of bytes of the command's output kept in the result.
pub const MAX_OUTPUT_TAIL_BYTES: u32 = 2048;

/// Default time limit of `verify.command`, seconds.
pub const DEFAULT_COMMAND_TIMEOUT_SECONDS: u32 = 600;

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

#[cfg(test)]
#[path = "verification_tests.rs"]
mod tests;
