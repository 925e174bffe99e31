//! Status subresources of Feature and Task, written only by the controller. Every field
//! is optional or defaulted so server-side-apply patches may carry only what changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::attempt::{RanBy, Usage};
use crate::engine::budget::UsageTotals;
use crate::engine::dag::{FeatureOutcome, PhaseCounts, TaskPhase};
use crate::engine::sigils::Sigils;
use crate::engine::verification::{AttemptKind, CheckReport};

/// How many attempt records a Task's status keeps (the most recent ones).
pub const MAX_ATTEMPT_HISTORY: usize = 10;

/// Observed state of a Task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Lifecycle phase: Pending, Running, Done, Failed or Blocked.
    #[serde(default)]
    pub phase: TaskPhase,

    /// True when the task can be claimed now: pending, every task it depends on done, no
    /// failed parent, no children, and its retry backoff over.
    #[serde(default)]
    pub ready: bool,

    /// Conditions of the task (e.g. Ready, Claimed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The spec generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The claim of the running attempt, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Box<ClaimStatus>>,

    /// The most recent attempts, oldest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ATTEMPT_HISTORY))]
    pub attempts: Vec<AttemptRecord>,

    /// Attempts started so far.
    #[serde(default)]
    pub attempt_count: u32,

    /// Retries used so far (failed or crashed attempts that were retried).
    #[serde(default)]
    pub retry_count: u32,

    /// No new attempt starts before this time (retry backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_after: Option<Time>,

    /// Why the last failed or crashed attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,

    /// Tokens and cost of all ended attempts (each counted once, when ingested).
    #[serde(default)]
    pub usage: UsageTotals,

    /// A human-readable note on the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl TaskStatus {
    /// Appends an attempt record, dropping the oldest beyond [`MAX_ATTEMPT_HISTORY`].
    pub fn push_attempt(&mut self, record: AttemptRecord) {
        self.attempts.push(record);
        let excess = self.attempts.len().saturating_sub(MAX_ATTEMPT_HISTORY);
        self.attempts.drain(..excess);
    }
}

/// The claim Lease an attempt holds on its task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatus {
    /// Name of the `coordination.k8s.io/v1` Lease.
    pub lease: String,

    /// The Lease's holder identity: the attempt holding the claim.
    pub holder: String,

    /// Number of the attempt holding the claim.
    pub attempt: u32,

    /// When the claim was acquired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<Time>,

    /// The Lease's `leaseTransitions` when acquired: a result reported under another
    /// token is stale and ignored.
    #[serde(default)]
    pub fencing_token: i32,
}

/// How one attempt ended: the engine's outcome, one definition for status, store and display.
pub use crate::engine::policy::AttemptOutcome;

/// One attempt of a task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// Attempt number, from 1.
    pub number: u32,

    /// What the attempt did: `work`, or `verify` (a read-only check of work reported done).
    #[serde(default)]
    pub kind: AttemptKind,

    /// Name of the agent Pod that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,

    /// The task spec generation the attempt was spawned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,

    /// The agent and model that ran it: `agent`, `model`, `requestedModel`.
    #[serde(flatten)]
    pub ran_by: RanBy,

    /// The agent of the Feature's pool that ran it (`primary` is `spec.agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_agent: Option<String>,

    /// When the attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the attempt ended; unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Time>,

    /// The ACP stop reason of the prompt turn (end_turn, max_tokens, max_turn_requests,
    /// refusal, cancelled, or another value verbatim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,

    /// Exit code of the agent process, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,

    /// How the attempt ended; unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptOutcome>,

    /// The sigils the agent wrote in this attempt.
    #[serde(default, skip_serializing_if = "Sigils::is_empty")]
    pub sigils: Sigils,

    /// A short summary of a crash (exit code, stderr line, matched pattern, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,

    /// Why the attempt did not finish the task (the agent's reason, the verifier's, or the
    /// failing `verify.command` with the end of its output); the next prompt says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// How `verify.command` ended, when the runner ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Box<CheckReport>>,

    /// Token and cost usage of this attempt.
    #[serde(default)]
    pub usage: Usage,

    /// What the git steps did with the attempt's work (its commit, the integration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Box<crate::engine::workspace::WorkspaceReport>>,
}

/// Where a feature stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum FeaturePhase {
    /// Accepted; no attempt has started yet.
    #[default]
    Pending,
    /// Attempts are running or tasks are ready.
    Running,
    /// Every task is done.
    Complete,
    /// Every task is resolved and some failed, or an agent promised FAILURE.
    Failed,
    /// Nothing is ready and nothing is running, but not every task is resolved.
    Blocked,
    /// The feature has no tasks.
    NoPlan,
    /// The attempt limit (`maxIterations`) or the budget (`budget`) is used up.
    LimitReached,
    /// `spec.suspend` is set.
    Suspended,
    /// The plan is invalid (dependency cycle, unknown task, ...); see the Valid condition.
    Invalid,
    /// A configuration problem keeps every attempt from starting until the spec changes
    /// (an image that cannot be pulled, an agent that reports itself misconfigured ...);
    /// nothing runs. See the Configured condition.
    Halted,
    /// A planner's plan waits for a person to approve or reject it (`spec.planning.approval:
    /// Manual`, docs/planning.md); nothing else runs.
    AwaitingApproval,
}

impl From<FeatureOutcome> for FeaturePhase {
    fn from(outcome: FeatureOutcome) -> Self {
        match outcome {
            FeatureOutcome::Complete => FeaturePhase::Complete,
            FeatureOutcome::Failed => FeaturePhase::Failed,
            FeatureOutcome::Blocked => FeaturePhase::Blocked,
            FeatureOutcome::NoPlan => FeaturePhase::NoPlan,
            FeatureOutcome::LimitReached => FeaturePhase::LimitReached,
            FeatureOutcome::Suspended => FeaturePhase::Suspended,
        }
    }
}

/// How many of a feature's tasks are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCounts {
    /// Tasks in the plan.
    #[serde(default)]
    pub total: u32,
    /// Tasks pending (including ready ones).
    #[serde(default)]
    pub pending: u32,
    /// Tasks ready to be claimed now.
    #[serde(default)]
    pub ready: u32,
    /// Tasks with a running attempt.
    #[serde(default)]
    pub running: u32,
    /// Tasks done.
    #[serde(default)]
    pub done: u32,
    /// Tasks failed for good.
    #[serde(default)]
    pub failed: u32,
    /// Tasks that cannot run because a task they need failed.
    #[serde(default)]
    pub blocked: u32,
}

impl From<PhaseCounts> for TaskCounts {
    fn from(counts: PhaseCounts) -> Self {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        TaskCounts {
            total: clamp(counts.total()),
            pending: clamp(counts.pending),
            ready: clamp(counts.ready),
            running: clamp(counts.running),
            done: clamp(counts.done),
            failed: clamp(counts.failed),
            blocked: clamp(counts.blocked),
        }
    }
}

/// Observed state of a Feature.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureStatus {
    /// Where the feature stands.
    #[serde(default)]
    pub phase: FeaturePhase,

    /// How the feature ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<FeatureOutcome>,

    /// A human-readable note on the current state (e.g. the agent's reason for FAILURE,
    /// or what makes the plan invalid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Conditions of the feature: Valid, Progressing, Complete, Failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The spec generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// How many tasks are in each state.
    #[serde(default)]
    pub counts: TaskCounts,

    /// Attempts started so far, over all tasks (counted against `maxIterations`).
    #[serde(default)]
    pub iterations: u32,

    /// Tokens and cost of all ended attempts: the sum of its Tasks' usage.
    #[serde(default)]
    pub usage: UsageTotals,

    /// The feature branch and its head, when the Feature works in a git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<super::workspace::FeatureBranchStatus>,

    /// Where planning stands, when the Feature has `spec.planning`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planning: Option<super::planning::PlanningStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(number: u32) -> AttemptRecord {
        AttemptRecord {
            number,
            ..AttemptRecord::default()
        }
    }

    #[test]
    fn push_attempt_keeps_only_the_most_recent_records() {
        let mut status = TaskStatus::default();
        for number in 1..=13 {
            status.push_attempt(record(number));
        }
        let numbers: Vec<u32> = status.attempts.iter().map(|a| a.number).collect();
        assert_eq!(numbers, (4..=13).collect::<Vec<_>>());
    }

    #[test]
    fn push_attempt_below_the_bound_keeps_everything() {
        let mut status = TaskStatus::default();
        status.push_attempt(record(1));
        status.push_attempt(record(2));
        assert_eq!(status.attempts.len(), 2);
    }

    #[test]
    fn empty_status_serializes_to_phase_and_counters_only() {
        let json = match serde_json::to_value(TaskStatus::default()) {
            Ok(json) => json,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(json["phase"], "Pending");
        assert!(json.get("claim").is_none());
        assert!(json.get("attempts").is_none());
    }

    #[test]
    fn attempt_outcomes_serialize_in_camel_case() {
        let json = serde_json::to_value(AttemptOutcome::StoppedFeature).ok();
        assert_eq!(json, Some(serde_json::json!("stoppedFeature")));
    }

    #[test]
    fn task_counts_copy_the_dag_counts_and_their_total() {
        let counts = TaskCounts::from(PhaseCounts {
            pending: 3,
            running: 1,
            done: 2,
            failed: 1,
            blocked: 1,
            ready: 2,
        });
        assert_eq!(counts.total, 8);
        assert_eq!((counts.pending, counts.ready), (3, 2));
        assert_eq!((counts.running, counts.done), (1, 2));
        assert_eq!((counts.failed, counts.blocked), (1, 1));
    }

    #[test]
    fn feature_phase_follows_the_outcome() {
        assert_eq!(
            FeaturePhase::from(FeatureOutcome::LimitReached),
            FeaturePhase::LimitReached
        );
    }

    /// A Task status as controllers before the shared `RanBy` and `Tokens` wrote it.
    const WRITTEN_BEFORE: &str = r#"{
        "phase": "Done", "ready": false, "attemptCount": 1, "retryCount": 0,
        "usage": {"inputTokens": 10, "outputTokens": 5, "cacheReadTokens": 2,
                  "cacheWriteTokens": 1, "costUSD": "0.25"},
        "attempts": [{
            "number": 1, "kind": "work", "pod": "t-a1", "agent": "claude-agent-acp 0.5",
            "model": "sonnet", "poolAgent": "primary", "requestedModel": "sonnet",
            "stopReason": "end_turn", "exitCode": 0, "outcome": "done",
            "usage": {"inputTokens": 10, "outputTokens": 5, "cacheReadTokens": 2,
                      "cacheWriteTokens": 1, "costUsd": 0.25}
        }]
    }"#;

    #[test]
    fn a_status_written_before_reads_with_every_field() {
        let status: TaskStatus = serde_json::from_str(WRITTEN_BEFORE).expect("reads");
        let record = &status.attempts[0];
        assert_eq!(record.ran_by.agent.as_deref(), Some("claude-agent-acp 0.5"));
        assert_eq!(record.ran_by.model.as_deref(), Some("sonnet"));
        assert_eq!(record.ran_by.requested_model.as_deref(), Some("sonnet"));
        assert_eq!(record.pool_agent.as_deref(), Some("primary"));
        assert_eq!(record.usage.tokens.cache_write, 1);
        assert_eq!(status.usage.tokens.cache_read, 2);
        assert_eq!(status.usage.cost_text(), "$0.25");
    }

    #[test]
    fn a_status_written_before_is_written_again_unchanged() {
        let before: serde_json::Value = serde_json::from_str(WRITTEN_BEFORE).expect("json");
        let status: TaskStatus = serde_json::from_value(before.clone()).expect("reads");
        assert_eq!(serde_json::to_value(&status).ok(), Some(before));
    }
}
