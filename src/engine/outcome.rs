//! The words of an attempt's conclusion, shared by the deciders above them: how an attempt
//! ended ([`AttemptEnd`]), what the outcome policy needs to know about its task
//! ([`TaskContext`]), and what it decides ([`Decision`]: the recorded [`AttemptOutcome`], the
//! task's [`PhaseChange`], the [`Event`], the [`FeatureEffect`]). Types only: the rules are in
//! `policy.rs` (the outcome table), `workspace.rs` (after the git steps) and `conclusion.rs`
//! (the one entry point, [`super::conclusion::conclude`]).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::attempt::AttemptResult;
use super::backoff::RetryBackoff;

/// How an attempt ended, before the outcome policy judges it.
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptEnd {
    /// The run reported a result for this attempt while it held the claim.
    Reported(Box<AttemptResult>),
    /// The run ended or vanished without a usable result (OOMKilled, evicted, deleted).
    NoResult {
        /// The executor's reason, for the crash summary.
        reason: String,
    },
    /// The claim expired or passed to someone else before the attempt reported.
    ClaimLost {
        /// What happened to the claim.
        reason: String,
    },
    /// The run never started within its start deadline (no node, images not pulled): the
    /// attempt is released and the task tried again, no retry charged.
    NotStarted {
        /// Why it waited, and how long.
        reason: String,
    },
    /// The attempt was stopped on purpose (suspend) and reported nothing.
    Interrupted {
        /// Why it was stopped.
        reason: String,
    },
    /// The task's spec changed while the attempt ran: it is stopped and a fresh attempt
    /// starts for the new generation (not counted as a retry).
    Superseded {
        /// The generation the attempt was spawned for.
        from_generation: i64,
        /// The task's current generation.
        to_generation: i64,
    },
}

/// What the policy needs to know about the task an attempt ran for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskContext {
    /// The task's ID (the name its sigils must carry).
    pub name: String,
    /// Retries already used (0 before the first retry).
    pub retry_count: u32,
    /// Retries allowed before the task fails for good.
    pub max_retries: u32,
    /// Whether a verification attempt must confirm `task-done` before the task is done.
    pub verify: bool,
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AttemptOutcome {
    /// The agent completed the task.
    Done,
    /// The agent reported failure or refused.
    Failed,
    /// The attempt ended without a verdict on this task; the claim was given back.
    Released,
    /// The turn stopped early (token or request limit, unknown stop reason): tried again.
    /// Recorded as `blocked`, the word of the Blocked task phase, before it was renamed;
    /// such records still read.
    #[serde(alias = "blocked")]
    StoppedEarly,
    /// The agent process crashed, hung or vanished.
    Crashed,
    /// The agent ran out of quota.
    Exhausted,
    /// The attempt was cancelled (suspend or cancel).
    Interrupted,
    /// The claim Lease was not renewed in time.
    Lost,
    /// The agent promised FAILURE for the whole feature.
    StoppedFeature,
    /// The agent could not run as configured; the feature halts until the user fixes it.
    Misconfigured,
    /// Done, but the work conflicts with work integrated meanwhile: retried on the new head.
    Conflict,
    /// The model gateway refused a model call: the attempt's share of the budget was spent.
    LimitReached,
}

impl AttemptOutcome {
    /// The camelCase name used in status and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Released => "released",
            Self::StoppedEarly => "stoppedEarly",
            Self::Crashed => "crashed",
            Self::Exhausted => "exhausted",
            Self::Interrupted => "interrupted",
            Self::Lost => "lost",
            Self::StoppedFeature => "stoppedFeature",
            Self::Misconfigured => "misconfigured",
            Self::Conflict => "conflict",
            Self::LimitReached => "limitReached",
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The task's phase after the attempt. Concluding spends the claim (`lifecycle::is_spent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PhaseChange {
    /// No transition: the task keeps the phase it had before it was claimed (Pending), so it
    /// is claimable again once the claim is released.
    Unchanged,
    /// Back to Pending to be claimed again; after backoff when [`Decision::retry`] is set.
    Pending,
    /// Done.
    Done,
    /// Failed for good.
    Failed,
}

/// What the feature as a whole must do because of the attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeatureEffect {
    /// Nothing beyond the task's own transition.
    None,
    /// Stop the feature: outcome Failed with the agent's reason, no new attempts.
    Stop {
        /// The agent's explanation, or a stand-in when it gave none.
        reason: String,
    },
    /// Halt the feature until the user fixes its configuration (the Feature's spec changes,
    /// or a local run is started again): no new attempts; no task is charged a retry.
    Halt {
        /// What is wrong and how to fix it.
        reason: String,
    },
}

/// The agent ran out of quota and must not be used before `until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentExhausted {
    /// Unix seconds when the quota resets, when the agent said.
    pub until: Option<i64>,
    /// What the agent said.
    pub message: String,
}

/// Why the previous attempt did not finish the task; the next prompt tells the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PreviousAttempt {
    /// The agent reported `<task-failed>` (with its reason when it gave one).
    Failed {
        /// The agent's explanation near the sigil.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The agent process crashed, hung or vanished.
    Crashed {
        /// Exit code, signal, first stderr line, matched pattern or timeout.
        summary: String,
    },
    /// The attempt lost its claim (node lost, pod gone).
    Lost,
    /// The attempt's work conflicted with work other tasks integrated meanwhile.
    Conflict {
        /// Files changed on both sides.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<String>,
        /// The tasks whose work it conflicted with.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tasks: Vec<String>,
    },
}

impl fmt::Display for PreviousAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed {
                reason: Some(reason),
            } => write!(f, "Previous attempt failed: {reason}"),
            Self::Failed { reason: None } => f.write_str("Previous attempt failed."),
            Self::Crashed { summary } => write!(f, "Previous attempt crashed: {summary}"),
            Self::Lost => f.write_str(
                "Previous attempt was lost (its claim expired: the node or pod went away).",
            ),
            Self::Conflict { files, tasks } => {
                f.write_str("Previous attempt's work conflicted with work integrated meanwhile")?;
                if !tasks.is_empty() {
                    write!(f, " by task {}", tasks.join(", "))?;
                }
                if !files.is_empty() {
                    write!(f, " in {}", files.join(", "))?;
                }
                f.write_str(
                    ". Your workspace starts from the feature branch with that work in it: \
                     redo your change on top of it.",
                )
            }
        }
    }
}

/// Severity of the event announcing a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// An expected transition.
    Normal,
    /// Something an operator should look at.
    Warning,
}

/// The event to emit for a decision (Kubernetes Event or local log line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub kind: EventKind,
    /// Short CamelCase reason, e.g. `TaskDone`, `SigilForOtherTask`.
    pub reason: &'static str,
    /// Human-readable message naming the task.
    pub message: String,
}

/// What to do with a task after one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// How the attempt is recorded.
    pub outcome: AttemptOutcome,
    /// The task's new phase.
    pub phase: PhaseChange,
    /// Verification is on: the task went back to Pending and becomes Done only when a
    /// verification attempt passes (`policy::decide_verification`).
    pub verify_first: bool,
    /// `Some(n)`: the attempt counts as a retry and the task's retry count becomes `n`; the
    /// next attempt waits for the backoff (see [`Decision::next_attempt_after`]).
    pub retry: Option<u32>,
    /// The event to emit.
    pub event: Event,
    /// Effect on the whole feature.
    pub feature: FeatureEffect,
    /// The agent promised COMPLETE (recorded only; the outcome still comes from the DAG).
    pub promise_complete: bool,
    /// The agent is exhausted; schedule no attempt on it before the reset time.
    pub agent_exhausted: Option<AgentExhausted>,
    /// What the next attempt's prompt should say about this one.
    pub previous_attempt: Option<PreviousAttempt>,
}

impl Decision {
    /// When the next attempt may start (Unix ms): after the backoff for a counted retry,
    /// `None` when the task can be claimed again at once or will not run again.
    pub fn next_attempt_after(
        &self,
        policy: &RetryBackoff,
        now_ms: i64,
        jitter: f64,
    ) -> Option<i64> {
        let retry = self.retry?;
        Some(policy.next_attempt_after(now_ms, retry.saturating_sub(1), jitter))
    }
}
