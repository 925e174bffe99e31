//! A git step's outcome as the engine's [`WorkspaceReport`]: one wording for a Pod's git
//! steps (`ralph git finish`) and `ralph run`'s worktrees.

use super::attempt::{AttemptWorkspace, IntegrationOutcome};
use super::error::WorkspaceError;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport, tasks_in_subjects};

/// Done, and the agent left `ws` as it found it.
pub(crate) fn unchanged(ws: &AttemptWorkspace) -> WorkspaceReport {
    WorkspaceReport {
        work_branch: Some(ws.work_branch.clone()),
        feature_head: Some(ws.start_commit.clone()),
        message: Some(
            "done, and the agent left the workspace unchanged: nothing to commit".to_owned(),
        ),
        ..WorkspaceReport::new(WorkspaceOutcome::Unchanged)
    }
}

/// What integrating the commit `commit` of `ws` gave.
pub(crate) fn integration(
    ws: &AttemptWorkspace,
    commit: Option<String>,
    outcome: IntegrationOutcome,
) -> WorkspaceReport {
    match outcome {
        IntegrationOutcome::Integrated {
            commit,
            onto,
            push_attempts,
        } => WorkspaceReport {
            commit: Some(commit.clone()),
            work_branch: Some(ws.work_branch.clone()),
            feature_head: Some(commit),
            integrated_onto: Some(onto),
            push_attempts: Some(push_attempts),
            message: Some(format!("integrated into {}", ws.feature_branch)),
            ..WorkspaceReport::new(WorkspaceOutcome::Integrated)
        },
        IntegrationOutcome::Conflict {
            files,
            other_commit_subjects,
            feature_head,
        } => WorkspaceReport {
            commit,
            work_branch: Some(ws.work_branch.clone()),
            feature_head: Some(feature_head),
            message: Some(format!(
                "the work conflicts with {} in {}",
                ws.feature_branch,
                files.join(", ")
            )),
            conflicting_tasks: tasks_in_subjects(other_commit_subjects.iter().map(String::as_str)),
            conflict_files: files,
            ..WorkspaceReport::new(WorkspaceOutcome::Conflict)
        },
    }
}

/// A failed git step, said as `message`: misconfigured when only the user can fix it.
pub(crate) fn failure(error: &WorkspaceError, message: String) -> WorkspaceReport {
    let outcome = if error.needs_user_fix() {
        WorkspaceOutcome::Misconfigured
    } else {
        WorkspaceOutcome::Failed
    };
    WorkspaceReport {
        message: Some(message),
        ..WorkspaceReport::new(outcome)
    }
}
