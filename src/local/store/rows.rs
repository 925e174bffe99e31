//! Plain values read from and written to the store.

use crate::engine::attempt::{AttemptResult, Usage};
use crate::engine::dag::TaskPhase;
use crate::engine::verification::AttemptKind;
use crate::local::feature::LocalTask;
use crate::local::process::ProcessId;

/// One task's state.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRow {
    /// The task as the manifest last declared it.
    pub spec: LocalTask,
    /// Creation order (position in the manifest).
    pub order: u64,
    /// Bumped each time the manifest changes the task.
    pub generation: i64,
    /// Current phase.
    pub phase: TaskPhase,
    /// Retries used (failed or crashed attempts).
    pub retry_count: u32,
    /// Attempts started.
    pub attempt_count: u32,
    /// No new attempt before this time (retry backoff), Unix ms.
    pub next_attempt_after_ms: Option<i64>,
    /// What the next prompt must say about the last unsuccessful attempt: the JSON of an
    /// `engine::policy::PreviousAttempt` (failed with a reason, crashed with a summary, lost).
    pub previous_attempt: Option<String>,
    /// Tokens and cost over all attempts.
    pub usage: Usage,
    /// The manifest no longer has this task; it is kept only until its attempt ends.
    pub removed: bool,
}

impl TaskRow {
    /// The task's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// A claim on a task: the attempt holding it, its runner process, and when it expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    /// The claimed task.
    pub task: String,
    /// The attempt ID holding the claim.
    pub holder: String,
    /// The runner process, once spawned.
    pub process: Option<ProcessId>,
    /// When the claim was taken, Unix ms.
    pub acquired_at_ms: i64,
    /// When the claim expires unless renewed, Unix ms.
    pub expires_at_ms: i64,
}

/// One attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRow {
    /// Attempt ID `<task>-a<N>`.
    pub id: String,
    /// The task.
    pub task: String,
    /// N, counting from 1.
    pub number: u32,
    /// What the attempt does: work, or verify the work reported done.
    pub kind: AttemptKind,
    /// The task generation it was spawned for.
    pub generation: i64,
    /// Start, Unix ms.
    pub started_at_ms: i64,
    /// End, Unix ms, once ended.
    pub ended_at_ms: Option<i64>,
    /// Recorded outcome (done, failed, released, crashed, interrupted, lost ...).
    pub outcome: Option<String>,
    /// What its end recorded besides the outcome (empty while it runs).
    pub details: EndDetails,
}

/// How an attempt ended, to record on its row.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptClose {
    /// Attempt ID.
    pub id: String,
    /// End, Unix ms.
    pub ended_at_ms: i64,
    /// Recorded outcome.
    pub outcome: String,
    /// What else to record.
    pub details: EndDetails,
}

/// What is recorded of an ended attempt besides its end time and outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndDetails {
    /// The agent's stop reason.
    pub stop_reason: Option<String>,
    /// Crash summary.
    pub crash: Option<String>,
    /// Warning or explanation recorded with the outcome.
    pub message: Option<String>,
    /// Tokens and cost.
    pub usage: Usage,
    /// The runner's result document, as JSON.
    pub result: Option<String>,
}

impl EndDetails {
    /// The runner's result document, read; `None` when there was none or it does not parse.
    pub fn reported(&self) -> Option<AttemptResult> {
        serde_json::from_str(self.result.as_deref()?).ok()
    }
}

/// An entry of the event log: an appended [`NewEvent`] with its place and time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// Sequence number (log order).
    pub seq: i64,
    /// When, Unix ms.
    pub at_ms: i64,
    /// What was appended.
    pub event: NewEvent,
}

/// An event to append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// The task concerned.
    pub task: Option<String>,
    /// The attempt concerned.
    pub attempt: Option<String>,
    /// What happened (`claimed`, `started`, `done`, `retry`, ...).
    pub kind: String,
    /// Human-readable detail.
    pub message: String,
}

impl NewEvent {
    /// An event about a task.
    pub fn task(task: &str, kind: &str, message: impl Into<String>) -> NewEvent {
        NewEvent {
            task: Some(task.to_string()),
            attempt: None,
            kind: kind.to_string(),
            message: message.into(),
        }
    }

    /// An event about an attempt of a task.
    pub fn attempt(task: &str, attempt: &str, kind: &str, message: impl Into<String>) -> NewEvent {
        NewEvent {
            attempt: Some(attempt.to_string()),
            ..NewEvent::task(task, kind, message)
        }
    }

    /// An event about the whole feature.
    pub fn feature(kind: &str, message: impl Into<String>) -> NewEvent {
        NewEvent {
            task: None,
            attempt: None,
            kind: kind.to_string(),
            message: message.into(),
        }
    }
}

/// A batch of state changes applied in one transaction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transition {
    /// Attempt to close.
    pub close: Option<AttemptClose>,
    /// Task rows to save (mutable fields only).
    pub tasks: Vec<TaskRow>,
    /// Tasks whose claims to release.
    pub release: Vec<String>,
    /// Events to append.
    pub events: Vec<NewEvent>,
    /// Stop the feature with this reason (`<promise>FAILURE</promise>`).
    pub stop_feature: Option<String>,
}
