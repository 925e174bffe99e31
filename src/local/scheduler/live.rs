//! An attempt in flight, and how the lifecycle sees it.

use crate::engine::lifecycle::{AttemptView, ClaimView, RunView};
use crate::local::executor::Ended;

/// An attempt whose task is Running.
#[derive(Debug)]
pub(super) struct Live {
    /// Attempt ID.
    pub attempt: String,
    /// Attempt number.
    pub number: u32,
    /// Task generation it was spawned for.
    pub generation: i64,
    /// The runner process, once spawned.
    pub pid: Option<u32>,
    /// The runner's start time, to tell a reused pid apart.
    pub pid_start: Option<i64>,
    /// True for our own child; false for a runner left by an earlier `ralph run` (polled).
    pub child: bool,
    /// When it started, Unix ms.
    pub started_at_ms: i64,
    /// Whether the store holds its claim (false: the claim was removed behind its back).
    pub claimed: bool,
    /// When its claim was last renewed, Unix ms.
    pub renewed_at_ms: i64,
    /// How long a renewal lasts, ms.
    pub claim_ms: i64,
    /// How the runner ended, once it did.
    pub ended: Option<Ended>,
}

impl Live {
    /// The attempt as the lifecycle sees it.
    pub fn attempt_view(&self) -> AttemptView {
        AttemptView {
            number: self.number,
            generation: self.generation,
        }
    }

    /// The claim as the lifecycle sees it.
    pub fn claim_view(&self) -> Option<ClaimView> {
        self.claimed.then(|| ClaimView {
            holder: self.attempt.clone(),
            renewed_at_ms: self.renewed_at_ms,
            duration_ms: self.claim_ms,
            fencing_token: 0,
        })
    }

    /// The run as the lifecycle sees it.
    pub fn run_view(&self) -> RunView {
        match (&self.ended, self.pid) {
            (Some(ended), _) => RunView::Ended {
                result: ended.result.clone().ok().map(Box::new),
                reason: ended.result.clone().err(),
            },
            (None, None) => RunView::NotStarted,
            (None, Some(pid))
                if self.child || crate::local::process::is_alive(pid, self.pid_start) =>
            {
                RunView::Running
            }
            (None, Some(_)) => RunView::Missing,
        }
    }

    /// Whether its runner process still runs (spawned and not ended).
    pub fn is_running(&self) -> bool {
        self.pid.is_some() && self.ended.is_none()
    }
}
