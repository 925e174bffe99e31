//! An attempt in flight, and how the lifecycle sees it.

use super::planner::Liveness;
use crate::engine::budget::Allowance;
use crate::engine::lifecycle::{AttemptView, ClaimView, RunView};
use crate::local::executor::Ended;
use crate::local::process::ProcessId;
use crate::local::store::{AttemptRow, ClaimRow, TaskRow};

/// An attempt whose task is Running.
#[derive(Debug)]
pub(super) struct Live {
    /// Attempt ID.
    pub attempt: String,
    /// Attempt number.
    pub number: u32,
    /// Task generation it was spawned for.
    pub generation: i64,
    /// The runner process, once spawned (its start time once it reported it).
    pub process: Option<ProcessId>,
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
    /// The pool agent that runs it (`primary` for one left by an earlier run).
    pub agent: String,
    /// The model it asked the agent for.
    pub model: Option<String>,
    /// The share of the budget its model gateway lets it spend.
    pub share: Option<Allowance>,
}

impl Live {
    /// Attempt `number` (`attempt`, for `generation`) started by this run at `now_ms`,
    /// its claim held; its runner not spawned yet.
    pub(super) fn started(
        attempt: String,
        number: u32,
        generation: i64,
        now_ms: i64,
        claim_ms: i64,
    ) -> Self {
        Live {
            attempt,
            number,
            generation,
            process: None,
            child: true,
            claimed: true,
            started_at_ms: now_ms,
            renewed_at_ms: now_ms,
            claim_ms,
            ended: None,
            agent: crate::api::PRIMARY_AGENT.to_owned(),
            model: None,
            share: None,
        }
    }

    /// The attempt `holder` of the Running task `row`, left by an earlier run: its claim and
    /// its record, if the store has them (`claim_ms`: how long a claim lasts).
    pub(super) fn left_over(
        holder: String,
        row: &TaskRow,
        claim: Option<&ClaimRow>,
        attempt: Option<&AttemptRow>,
        now_ms: i64,
        claim_ms: i64,
    ) -> Self {
        Live {
            attempt: holder,
            number: attempt.map_or(row.attempt_count, |a| a.number),
            generation: attempt.map_or(row.generation, |a| a.generation),
            process: claim.and_then(|c| c.process),
            child: false,
            claimed: claim.is_some(),
            started_at_ms: attempt.map_or(now_ms, |a| a.started_at_ms),
            renewed_at_ms: claim.map_or(now_ms, |c| c.expires_at_ms - claim_ms),
            claim_ms,
            ended: None,
            agent: crate::api::PRIMARY_AGENT.to_owned(),
            model: None,
            share: None,
        }
    }

    /// The attempt as the lifecycle sees it.
    pub(super) fn attempt_view(&self) -> AttemptView {
        AttemptView {
            number: self.number,
            generation: self.generation,
        }
    }

    /// The claim as the lifecycle sees it.
    pub(super) fn claim_view(&self) -> Option<ClaimView> {
        self.claimed.then(|| ClaimView {
            holder: self.attempt.clone(),
            renewed_at_ms: self.renewed_at_ms,
            duration_ms: self.claim_ms,
        })
    }

    /// The run as the lifecycle sees it; `alive` tells whether a runner of an earlier run
    /// still runs.
    pub(super) fn run_view(&self, alive: Liveness) -> RunView {
        match (&self.ended, self.process) {
            (Some(ended), _) => RunView::Ended {
                result: ended.result.clone().ok().map(Box::new),
                reason: ended.result.clone().err(),
            },
            (None, None) => RunView::NotStarted,
            (None, Some(process)) if self.child || alive(&process) => RunView::Running,
            (None, Some(_)) => RunView::Missing,
        }
    }

    /// Whether its runner was left by an earlier run and has not ended (it is polled).
    pub(super) fn is_orphan(&self) -> bool {
        !self.child && self.ended.is_none()
    }

    /// Whether its runner process still runs (spawned and not ended).
    pub(super) fn is_running(&self) -> bool {
        self.process.is_some() && self.ended.is_none()
    }
}
