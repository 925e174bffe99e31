//! One attempt's workspace: prepared from the feature branch, committed after a done
//! verdict, integrated back into the feature branch. Shared by the clone (cluster) and
//! worktree (local) variants.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::WorkspaceError;
use super::git::{Git, Net};

/// Which attempt of which task a workspace belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    pub feature: String,
    pub task: String,
    pub attempt: u32,
}

impl AttemptRef {
    pub fn new(feature: impl Into<String>, task: impl Into<String>, attempt: u32) -> Self {
        Self {
            feature: feature.into(),
            task: task.into(),
            attempt,
        }
    }

    /// The commit message of this attempt's work.
    pub fn commit_message(&self) -> String {
        format!(
            "{task}: work of attempt {attempt}\n\nRalph-Feature: {feature}\nRalph-Task: {task}\nRalph-Attempt: {attempt}\n",
            task = self.task,
            attempt = self.attempt,
            feature = self.feature,
        )
    }
}

/// Limits of the git layer.
#[derive(Debug, Clone)]
pub struct GitOptions {
    /// Longest time any single git command may take (a clone of a large repository too).
    pub command_timeout: Duration,
    /// How many pushes an integration tries when other tasks keep getting there first.
    pub max_push_attempts: u32,
    /// Where the private credentials directory is made (default: the system temp dir).
    /// In a Pod: a memory-backed volume mounted only into the git steps.
    pub credentials_parent: Option<PathBuf>,
}

impl Default for GitOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(600),
            max_push_attempts: 64,
            credentials_parent: None,
        }
    }
}

/// A workspace ready for an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptWorkspace {
    pub dir: PathBuf,
    pub attempt: AttemptRef,
    /// The branch the agent's work is committed on.
    pub work_branch: String,
    pub feature_branch: String,
    /// The feature branch head the attempt started from.
    pub start_commit: String,
}

/// What committing the workspace gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The attempt's changes, as one commit on the work branch.
    Committed { commit: String },
    /// The agent left the workspace as it found it: nothing to integrate.
    Unchanged,
}

/// What integrating a commit into the feature branch gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntegrationOutcome {
    /// The feature branch now ends with `commit` (the attempt's commit, rebased).
    Integrated {
        commit: String,
        /// The feature branch head `commit` was put on top of (its parent).
        onto: String,
        /// Pushes it took (more than one when other tasks pushed first).
        push_attempts: u32,
    },
    /// The attempt's changes conflict with work integrated since it started.
    Conflict {
        /// Files changed on both sides.
        files: Vec<String>,
        /// Subjects of the feature branch commits made since the attempt started
        /// (the other tasks' work), oldest first.
        other_commit_subjects: Vec<String>,
        /// The feature branch head the next attempt should start from.
        feature_head: String,
    },
}

const MERGE_STATE_FILES: &[&str] = &[
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
];
const MERGE_STATE_DIRS: &[&str] = &["rebase-merge", "rebase-apply"];

/// Fails unless `dir` is absent or an empty directory.
pub(crate) fn ensure_fresh_directory(dir: &Path) -> Result<(), WorkspaceError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(WorkspaceError::DirectoryNotEmpty {
                    path: dir.to_owned(),
                });
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(WorkspaceError::io(dir)(error)),
    }
}

/// Commits everything in the workspace as one commit on the work branch, relative to the
/// start commit: commits the agent made itself are folded in, a moved HEAD is put back on
/// the work branch, an unfinished merge or rebase it left is dropped.
pub(crate) async fn commit_workspace(
    git: &Git,
    ws: &AttemptWorkspace,
) -> Result<CommitOutcome, WorkspaceError> {
    let dir = &ws.dir;
    let branch = ws.work_branch.as_str();
    let git_dir = git
        .ok(
            dir,
            &["rev-parse", "--absolute-git-dir"],
            branch,
            Net::Local,
        )
        .await?;
    let git_dir = PathBuf::from(git_dir);
    for file in MERGE_STATE_FILES {
        let _ = std::fs::remove_file(git_dir.join(file));
    }
    for state in MERGE_STATE_DIRS {
        let _ = std::fs::remove_dir_all(git_dir.join(state));
    }
    let work_ref = format!("refs/heads/{branch}");
    let steps: [&[&str]; 3] = [
        &["add", "-A"],
        &["symbolic-ref", "HEAD", &work_ref],
        &["update-ref", &work_ref, &ws.start_commit],
    ];
    git.ok_each(dir, &steps, branch).await?;
    let diff = git
        .run(dir, &["diff", "--cached", "--quiet"], branch, Net::Local)
        .await?;
    if diff.success {
        return Ok(CommitOutcome::Unchanged);
    }
    let message = ws.attempt.commit_message();
    git.ok(
        dir,
        &["commit", "-q", "--no-verify", "-m", &message],
        branch,
        Net::Local,
    )
    .await?;
    let commit = git.commit_at(dir, "HEAD", branch).await?;
    Ok(CommitOutcome::Committed { commit })
}

/// Puts the workspace's single attempt commit on top of `head`. Returns the conflict when
/// the change does not apply.
pub(crate) async fn rebase_onto(
    git: &Git,
    ws: &AttemptWorkspace,
    head: &str,
) -> Result<Option<IntegrationOutcome>, WorkspaceError> {
    let dir = &ws.dir;
    let branch = ws.feature_branch.as_str();
    let parent = git.commit_at(dir, "HEAD^", branch).await?;
    if parent == head {
        return Ok(None);
    }
    let rebase = git
        .run(
            dir,
            &["rebase", "-q", "--onto", head, &parent],
            branch,
            Net::Local,
        )
        .await?;
    if rebase.success {
        return Ok(None);
    }
    let files = git
        .ok(
            dir,
            &["diff", "--name-only", "--diff-filter=U"],
            branch,
            Net::Local,
        )
        .await?;
    if files.is_empty() {
        let _ = git
            .run(dir, &["rebase", "--abort"], branch, Net::Local)
            .await;
        return Err(git.failure(&["rebase"], branch, Net::Local, &rebase.stderr));
    }
    let range = format!("{}..{head}", ws.start_commit);
    let subjects = git
        .run(
            dir,
            &["log", "--reverse", "--format=%s", &range],
            branch,
            Net::Local,
        )
        .await?;
    git.ok(dir, &["rebase", "--abort"], branch, Net::Local)
        .await?;
    Ok(Some(IntegrationOutcome::Conflict {
        files: files.lines().map(str::to_owned).collect(),
        other_commit_subjects: subjects.stdout.lines().map(str::to_owned).collect(),
        feature_head: head.to_owned(),
    }))
}

/// A short random pause between push attempts, growing with the attempt number.
pub(crate) async fn push_backoff(attempt: u32) {
    let ceiling = 20 + 30 * u64::from(attempt.min(10));
    let millis = rand::random_range(5..ceiling);
    tokio::time::sleep(Duration::from_millis(millis)).await;
}

/// How `git push --porcelain` ended when it did not fail.
#[derive(Debug)]
pub(crate) enum PushEnd {
    /// The branch was updated.
    Pushed,
    /// Someone else moved the branch first (git's stderr, for a caller that cannot retry).
    Raced { stderr: String },
}

/// Runs `git push --porcelain <args>` in `dir` for `branch`. A refused update is
/// [`WorkspaceError::PushRejected`] naming `url`; a push without a ref status (network,
/// credentials) is git's failure.
pub(crate) async fn push(
    git: &Git,
    dir: &Path,
    args: &[&str],
    branch: &str,
    url: &str,
) -> Result<PushEnd, WorkspaceError> {
    let mut command = vec!["push", "--porcelain"];
    command.extend_from_slice(args);
    let push = git.run(dir, &command, branch, Net::Remote).await?;
    if push.success {
        return Ok(PushEnd::Pushed);
    }
    match read_push_failure(&push.stdout) {
        PushFailure::Raced => Ok(PushEnd::Raced {
            stderr: push.stderr,
        }),
        PushFailure::Refused(reason) => Err(WorkspaceError::PushRejected {
            url: url.to_owned(),
            branch: branch.to_owned(),
            reason,
        }),
        PushFailure::NoStatus => Err(git.failure(&["push"], branch, Net::Remote, &push.stderr)),
    }
}

/// How a push that did not succeed failed, read from `git push --porcelain`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushFailure {
    /// Someone else moved the branch first: fetch and try again.
    Raced,
    /// The server refused the update (a hook, a protected branch).
    Refused(String),
    /// No ref status: the push did not get that far (network, credentials).
    NoStatus,
}

pub(crate) fn read_push_failure(stdout: &str) -> PushFailure {
    for line in stdout.lines() {
        let Some(status) = line.strip_prefix("!\t") else {
            continue;
        };
        let summary = status.split('\t').nth(1).unwrap_or_default();
        let lower = summary.to_lowercase();
        let raced = [
            "fetch first",
            "non-fast-forward",
            "stale info",
            "cannot lock ref",
            "failed to update ref",
            "incorrect old value",
            "but expected",
        ]
        .iter()
        .any(|pattern| lower.contains(pattern));
        if raced {
            return PushFailure::Raced;
        }
        let reason = summary
            .trim_start_matches("[remote rejected]")
            .trim_start_matches("[rejected]")
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .to_owned();
        return PushFailure::Refused(reason);
    }
    PushFailure::NoStatus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_behind_the_remote_is_a_race() {
        let out = "To git://h/r.git\n!\tHEAD:refs/heads/f\t[rejected] (fetch first)\nDone\n";
        assert_eq!(read_push_failure(out), PushFailure::Raced);
    }

    #[test]
    fn a_lost_ref_lock_is_a_race() {
        let out = "!\tHEAD:refs/heads/f\t[remote rejected] (cannot lock ref 'refs/heads/f': is at 1 but expected 2)\n";
        assert_eq!(read_push_failure(out), PushFailure::Raced);
    }

    #[test]
    fn a_declining_hook_is_a_refusal_with_its_reason() {
        let out = "!\tHEAD:refs/heads/f\t[remote rejected] (pre-receive hook declined)\n";
        assert_eq!(
            read_push_failure(out),
            PushFailure::Refused("pre-receive hook declined".to_owned())
        );
    }

    #[test]
    fn no_ref_line_means_no_status() {
        assert_eq!(read_push_failure(""), PushFailure::NoStatus);
    }

    #[test]
    fn the_commit_message_names_task_attempt_and_feature() {
        let message = AttemptRef::new("login", "t-2", 3).commit_message();
        assert!(message.starts_with("t-2: work of attempt 3\n"));
        assert!(message.contains("Ralph-Feature: login"));
    }
}
