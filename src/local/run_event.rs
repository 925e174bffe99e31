//! What happens during a local run, as data: the display renders these as progress, plain
//! log lines or JSON lines.

use crate::engine::verification::AttemptKind;
use serde::Serialize;

use crate::engine::dag::{FeatureOutcome, TaskPhase};
use crate::local::summary::Summary;

/// One thing that happened in a local run (`--json` prints each as one line).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum RunEvent {
    /// The run starts: the plan after syncing with the manifest.
    #[serde(rename_all = "camelCase")]
    Plan {
        /// Feature name.
        feature: String,
        /// Number of tasks.
        total: usize,
        /// Tasks already done (from an earlier run).
        done: usize,
        /// Tasks new in the manifest since the last run.
        added: Vec<String>,
        /// Tasks changed in the manifest since the last run.
        edited: Vec<String>,
        /// Tasks removed from the manifest since the last run.
        removed: Vec<String>,
    },
    /// An attempt started.
    #[serde(rename_all = "camelCase")]
    Started {
        /// Task.
        task: String,
        /// Attempt ID.
        attempt: String,
        /// Task generation the attempt runs for.
        generation: i64,
        /// What the attempt does (`verify`: a read-only check of work reported done).
        #[serde(default, skip_serializing_if = "is_work")]
        kind: AttemptKind,
    },
    /// The agent did something.
    #[serde(rename_all = "camelCase")]
    Activity {
        /// Task.
        task: String,
        /// Attempt ID.
        attempt: String,
        /// Short description.
        text: String,
    },
    /// An attempt ended and its result was applied.
    #[serde(rename_all = "camelCase")]
    Ended {
        /// Task.
        task: String,
        /// Attempt ID.
        attempt: String,
        /// How the attempt is recorded (done, failed, crashed, released, ...).
        outcome: String,
        /// The task's phase afterwards.
        phase: TaskPhase,
        /// How long the attempt ran, ms.
        duration_ms: i64,
        /// When the next attempt may start (retry backoff), Unix ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_at_ms: Option<i64>,
        /// Explanation (crash summary, warning).
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A task changed phase because of another task (parent done, dependents blocked ...).
    #[serde(rename_all = "camelCase")]
    Transition {
        /// Task.
        task: String,
        /// Phase before.
        from: TaskPhase,
        /// Phase after.
        to: TaskPhase,
        /// Why.
        reason: String,
    },
    /// Something worth a look that is not an attempt's end.
    #[serde(rename_all = "camelCase")]
    Warning {
        /// Task concerned.
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        /// What happened.
        message: String,
    },
    /// Nothing runs: the next attempt waits (retry backoff, or an agent out of quota).
    #[serde(rename_all = "camelCase")]
    Waiting {
        /// When the next attempt may start, Unix ms.
        until_ms: i64,
        /// How long that is from now, ms.
        wait_ms: i64,
    },
    /// Ctrl+C: running attempts are being cancelled.
    #[serde(rename_all = "camelCase")]
    Interrupting {
        /// Attempts being cancelled.
        attempts: Vec<String>,
        /// Whether they are killed at once (second Ctrl+C) rather than cancelled.
        kill: bool,
    },
    /// The run is over.
    #[serde(rename_all = "camelCase")]
    Finished {
        /// The feature's outcome, `None` when interrupted.
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<FeatureOutcome>,
        /// Explanation.
        message: String,
    },
    /// Per-task outcome, attempts, duration, tokens and cost.
    Summary(Summary),
}

fn is_work(kind: &AttemptKind) -> bool {
    *kind == AttemptKind::Work
}
