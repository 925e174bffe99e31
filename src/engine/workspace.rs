//! What the git steps of an attempt did with its work, and what that means for the task
//! (pure). The same report comes from the finishing container of an agent Pod (its
//! termination message) and from `ralph run`'s worktree integration.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::attempt::AttemptResult;
use super::outcome::{
    AttemptOutcome, Decision, Event, EventKind, FeatureEffect, PhaseChange, PreviousAttempt,
    TaskContext,
};
use super::policy::{decide, decide_verification, retry_or_fail};
use super::verification::AttemptKind;

/// Most conflicting files a report carries (it travels in a 4 KiB termination message).
pub const MAX_REPORTED_FILES: usize = 20;
/// Longest message a report carries, in bytes.
pub const MAX_REPORT_MESSAGE: usize = 1024;

/// How the git steps of an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WorkspaceOutcome {
    /// The attempt's commit is on the feature branch.
    Integrated,
    /// Done, and the agent changed nothing: nothing to commit.
    Unchanged,
    /// The attempt's commit was pushed to its work branch only (a verifier integrates it).
    PushedWorkBranch,
    /// No done verdict: nothing was committed.
    NotCommitted,
    /// The attempt's change conflicts with work integrated since it started.
    Conflict,
    /// A git step failed for a reason that may pass (server unreachable, a timeout).
    Failed,
    /// A git step failed for a reason the user must fix (credentials, a protected branch, a
    /// missing baseRef or repository).
    Misconfigured,
}

/// What the git steps did: the attempt's commit and where the feature branch stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceReport {
    /// How the git steps ended.
    pub outcome: WorkspaceOutcome,
    /// The attempt's commit (after the rebase, when integrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The work branch the attempt committed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_branch: Option<String>,
    /// The feature branch head after the step (the integrated commit, or the head the
    /// change conflicted with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_head: Option<String>,
    /// The feature branch head the integrated commit was put on top of: the next report's
    /// `featureHead` names it, which orders integrations without clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrated_onto: Option<String>,
    /// Pushes the integration took (more than one when other tasks pushed first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_attempts: Option<u32>,
    /// Files changed on both sides of a conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflict_files: Vec<String>,
    /// Tasks whose integrated work the change conflicted with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicting_tasks: Vec<String>,
    /// What happened, for people (the error of a failed step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl WorkspaceReport {
    /// A report of `outcome` with nothing else.
    pub fn new(outcome: WorkspaceOutcome) -> Self {
        Self {
            outcome,
            commit: None,
            work_branch: None,
            feature_head: None,
            integrated_onto: None,
            push_attempts: None,
            conflict_files: Vec::new(),
            conflicting_tasks: Vec::new(),
            message: None,
        }
    }

    /// The report cut to fit a termination message: at most [`MAX_REPORTED_FILES`] files
    /// and tasks, a message of at most [`MAX_REPORT_MESSAGE`] bytes.
    pub fn bounded(mut self) -> Self {
        self.conflict_files.truncate(MAX_REPORTED_FILES);
        self.conflicting_tasks.truncate(MAX_REPORTED_FILES);
        if let Some(message) = self.message.as_mut()
            && message.len() > MAX_REPORT_MESSAGE
        {
            let mut end = MAX_REPORT_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        self
    }
}

/// True when the attempt's result is a done verdict for its task: the work is committed
/// and integrated. The one rule the finishing step and the conclusion share.
pub fn integrates(result: &AttemptResult) -> bool {
    decide(&verdict_only(result, false), result).outcome == AttemptOutcome::Done
}

/// True when a verifier's result passes the task's work: it is integrated.
pub fn verifier_integrates(result: &AttemptResult) -> bool {
    decide_verification(&verdict_only(result, true), result).outcome == AttemptOutcome::Done
}

/// The task of `result` with no retries in play: its verdict alone decides.
fn verdict_only(result: &AttemptResult, verify: bool) -> TaskContext {
    TaskContext {
        name: result.task.clone(),
        retry_count: 0,
        max_retries: 0,
        verify,
    }
}

/// True when the finishing step of an attempt of `kind` commits its work: a done verdict of
/// a work attempt, a pass of a verification attempt. The rule the finishing step and the
/// controller (waiting for that step before it concludes) share.
pub fn finish_commits(kind: AttemptKind, result: &AttemptResult) -> bool {
    match kind {
        AttemptKind::Work => integrates(result),
        AttemptKind::Verify => verifier_integrates(result),
    }
}

/// The task names in commit subjects of the form `<task>: work of attempt <n>` (the
/// subjects of the commits the git layer makes), each once, in order.
pub fn tasks_in_subjects<'a>(subjects: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut tasks: Vec<String> = Vec::new();
    for subject in subjects {
        let Some((task, rest)) = subject.split_once(": ") else {
            continue;
        };
        if rest.starts_with("work of attempt ") && !tasks.iter().any(|t| t == task) {
            tasks.push(task.to_owned());
        }
    }
    tasks
}

/// The decision after the git steps: a done attempt whose work did not reach the feature
/// branch is not done. A conflict sends the task back to pending, counted as a retry, with
/// the files and the other tasks in the next prompt; a git failure is retried like a crash;
/// a git misconfiguration halts the feature. Other decisions stand.
pub fn after_git(decision: Decision, task: &TaskContext, report: &WorkspaceReport) -> Decision {
    if decision.outcome != AttemptOutcome::Done {
        return decision;
    }
    let (outcome, reason, message, previous) = match report.outcome {
        WorkspaceOutcome::Integrated
        | WorkspaceOutcome::Unchanged
        | WorkspaceOutcome::PushedWorkBranch
        | WorkspaceOutcome::NotCommitted => return decision,
        WorkspaceOutcome::Misconfigured => return git_misconfigured(decision, task, report),
        WorkspaceOutcome::Conflict => {
            let previous = PreviousAttempt::Conflict {
                files: report.conflict_files.clone(),
                tasks: report.conflicting_tasks.clone(),
            };
            let message = format!("task {}: {previous}", task.name);
            (AttemptOutcome::Conflict, "MergeConflict", message, previous)
        }
        WorkspaceOutcome::Failed => {
            let summary = format!(
                "its work could not be integrated: {}",
                report.message.as_deref().unwrap_or("a git step failed")
            );
            let message = format!("task {}: {summary}", task.name);
            let previous = PreviousAttempt::Crashed { summary };
            (
                AttemptOutcome::Crashed,
                "IntegrationFailed",
                message,
                previous,
            )
        }
    };
    let ruling = retry_or_fail(task, outcome, reason, message, previous);
    Decision {
        feature: decision.feature,
        promise_complete: decision.promise_complete,
        agent_exhausted: decision.agent_exhausted,
        ..ruling
    }
}

/// A done attempt whose work the git steps could not integrate for a reason the user must
/// fix: the feature halts.
fn git_misconfigured(decision: Decision, task: &TaskContext, report: &WorkspaceReport) -> Decision {
    let reason = report
        .message
        .clone()
        .unwrap_or_else(|| "the git workspace is misconfigured".to_owned());
    Decision {
        outcome: AttemptOutcome::Misconfigured,
        phase: PhaseChange::Pending,
        verify_first: false,
        retry: None,
        event: Event {
            kind: EventKind::Warning,
            reason: "GitMisconfigured",
            message: format!(
                "task {}: its work could not be integrated; no new attempts until \
                 the workspace is fixed: {reason}",
                task.name
            ),
        },
        feature: FeatureEffect::Halt { reason },
        previous_attempt: None,
        ..decision
    }
}

#[cfg(test)]
#[path = "workspace_tests.rs"]
mod tests;
