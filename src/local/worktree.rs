//! `ralph run` in a git repository: every attempt works in its own `git worktree` on its
//! work branch under the state directory, and done work is committed and integrated into
//! the feature branch ([`crate::workspace::LocalRepo`]). What that did is a
//! [`WorkspaceReport`], concluded by the engine exactly as on the cluster.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::attempt::AttemptResult;
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport, finish_commits};
use crate::local::state_dir;
use crate::workspace::{
    AttemptRef, AttemptWorkspace, CommitAuthor, CommitOutcome, GitOptions, LocalRepo,
    WorkspaceError, local_work_branch, report,
};

/// The base a new feature branch starts from: the repository's current commit.
const BASE_REF: &str = "HEAD";

/// A repository whose attempts work in worktrees under `root`.
#[derive(Debug)]
pub struct Worktrees {
    repo: LocalRepo,
    top: PathBuf,
    root: PathBuf,
    feature: String,
    /// Held while a worktree is added or removed: git races on its worktree records when
    /// parallel attempts do that at once (`failed to read .git/worktrees/…/commondir`).
    admin: tokio::sync::Mutex<()>,
}

impl Worktrees {
    /// The worktrees of `feature` in the repository holding `dir`, kept under
    /// `<state>/worktrees`; `None` when `dir` is not in a git repository.
    /// `push_remote` names a configured remote the feature branch is pushed to.
    pub async fn open(
        dir: &Path,
        feature: &str,
        state: &Path,
        push_remote: Option<&str>,
    ) -> Result<Option<Self>, WorkspaceError> {
        let Some(top) = repository_root(dir).await else {
            return Ok(None);
        };
        let repo = LocalRepo::new(
            &top,
            feature,
            BASE_REF,
            None,
            push_remote,
            repository_author(&top).await,
            GitOptions::default(),
        )?;
        Ok(Some(Self {
            repo,
            top,
            root: root(state),
            feature: feature.to_owned(),
            admin: tokio::sync::Mutex::new(()),
        }))
    }

    /// The feature branch done work is integrated into.
    pub fn feature_branch(&self) -> &str {
        self.repo.feature_branch()
    }

    /// The repository's top directory.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// Whether the feature branch exists or can be started from the current commit (a
    /// repository without any commit has neither).
    pub async fn has_base(&self) -> bool {
        let feature = format!("refs/heads/{}", self.feature_branch());
        for name in [feature.as_str(), BASE_REF] {
            let commit = format!("{name}^{{commit}}");
            if git_output(&self.top, &["rev-parse", "--verify", "-q", &commit])
                .await
                .is_some()
            {
                return true;
            }
        }
        false
    }

    /// The directory of attempt `number` of `task`.
    pub fn dir(&self, task: &str, number: u32) -> PathBuf {
        attempt_dir(&self.root, task, number)
    }
}

/// The directory of attempt `number` of `task` under the worktrees' `root`.
pub(crate) fn attempt_dir(root: &Path, task: &str, number: u32) -> PathBuf {
    root.join(task).join(format!("a{number}"))
}

/// The worktree root of the state directory `state`.
pub(crate) fn root(state: &Path) -> PathBuf {
    state.join("worktrees")
}

/// Where one attempt works.
#[derive(Clone, Debug)]
pub(crate) struct AttemptWorktree {
    /// The repository.
    pub worktrees: Arc<Worktrees>,
    /// The task.
    pub task: String,
    /// The attempt number.
    pub number: u32,
    /// `Some(n)`: a verifier, working in the worktree of work attempt `n`.
    pub verifies: Option<u32>,
    /// True when a verifier follows a done work attempt (its work waits on its branch).
    pub verifier_follows: bool,
}

impl AttemptWorktree {
    /// The worktree the attempt works in: a new one from the feature branch, or for a
    /// verifier the one of the work it checks.
    pub(crate) async fn prepare(&self) -> Result<AttemptWorkspace, String> {
        let worktrees = &self.worktrees;
        match self.verifies {
            None => {
                let dir = worktrees.dir(&self.task, self.number);
                let _admin = worktrees.admin.lock().await;
                worktrees
                    .repo
                    .prepare(&dir, &self.task, self.number)
                    .await
                    .map_err(|error| format!("cannot prepare the attempt's worktree: {error}"))
            }
            Some(work) => self.work_to_verify(work).await,
        }
    }

    /// The worktree of work attempt `work`, whose commit (if it made one) the verifier
    /// checks.
    async fn work_to_verify(&self, work: u32) -> Result<AttemptWorkspace, String> {
        let dir = self.worktrees.dir(&self.task, work);
        let feature_ref = format!("refs/heads/{}", self.worktrees.feature_branch());
        let start_commit = git_output(&dir, &["merge-base", "HEAD", &feature_ref])
            .await
            .ok_or_else(|| {
                format!(
                    "the work to verify is gone: no worktree of attempt {work} at {}",
                    dir.display()
                )
            })?;
        Ok(AttemptWorkspace {
            dir,
            attempt: AttemptRef::new(&self.worktrees.feature, &self.task, work),
            work_branch: local_work_branch(&self.worktrees.feature, &self.task, work),
            feature_branch: self.worktrees.feature_branch().to_owned(),
            start_commit,
        })
    }

    /// Removes the worktree `ws` and its work branch.
    async fn remove(&self, ws: &AttemptWorkspace) -> Result<(), WorkspaceError> {
        let _admin = self.worktrees.admin.lock().await;
        self.worktrees.repo.remove(ws).await
    }

    /// True for a work attempt whose worktree a verifier uses next.
    fn verified_next(&self) -> bool {
        self.verifier_follows && self.verifies.is_none()
    }

    /// After the runner ended with `result`: a done verdict commits the worktree and
    /// integrates it (a work attempt followed by a verifier only commits); the worktree of
    /// an attempt whose work is integrated, or that changed nothing, is removed; any other
    /// is kept for a look until `ralph task reset`.
    pub(crate) async fn finish(
        &self,
        ws: &AttemptWorkspace,
        result: &Result<AttemptResult, String>,
    ) -> WorkspaceReport {
        let kind = match self.verifies {
            None => AttemptKind::Work,
            Some(_) => AttemptKind::Verify,
        };
        let verdict = result
            .as_ref()
            .is_ok_and(|result| finish_commits(kind, result));
        if !verdict {
            return WorkspaceReport {
                message: Some(format!(
                    "no done verdict: nothing committed; the worktree {} is kept",
                    ws.dir.display()
                )),
                ..WorkspaceReport::new(WorkspaceOutcome::NotCommitted)
            };
        }
        let report = match self.commit_and_integrate(ws).await {
            Ok(report) => report,
            Err(error) => report::failure(&error, error.to_string()),
        };
        let finished = match report.outcome {
            WorkspaceOutcome::Integrated => true,
            WorkspaceOutcome::Unchanged => !self.verified_next(),
            _ => false,
        };
        if finished && let Err(error) = self.remove(ws).await {
            return WorkspaceReport {
                message: Some(format!(
                    "{}; the worktree {} could not be removed: {error}",
                    report.message.clone().unwrap_or_default(),
                    ws.dir.display()
                )),
                ..report
            };
        }
        report
    }

    async fn commit_and_integrate(
        &self,
        ws: &AttemptWorkspace,
    ) -> Result<WorkspaceReport, WorkspaceError> {
        let repo = &self.worktrees.repo;
        let commit = match self.verifies {
            // The verifier checks the work's commit; what it leaves behind is not work.
            Some(_) => {
                if git_output(&ws.dir, &["rev-parse", "HEAD"]).await.as_ref()
                    == Some(&ws.start_commit)
                {
                    return Ok(report::unchanged(ws));
                }
                None
            }
            None => match repo.commit(ws).await? {
                CommitOutcome::Unchanged => return Ok(report::unchanged(ws)),
                CommitOutcome::Committed { commit } => Some(commit),
            },
        };
        if self.verified_next() {
            return Ok(WorkspaceReport {
                commit,
                work_branch: Some(ws.work_branch.clone()),
                message: Some(format!(
                    "committed on {} in {} for verification",
                    ws.work_branch,
                    ws.dir.display()
                )),
                ..WorkspaceReport::new(WorkspaceOutcome::PushedWorkBranch)
            });
        }
        let outcome = repo.integrate(ws).await?;
        Ok(report::integration(ws, commit, outcome))
    }
}

/// The top directory of the git repository holding `dir`, if any.
async fn repository_root(dir: &Path) -> Option<PathBuf> {
    git_output(dir, &["rev-parse", "--show-toplevel"])
        .await
        .filter(|top| !top.is_empty())
        .map(PathBuf::from)
}

/// The author the repository's own configuration names (`user.name`, `user.email`), so
/// the work lands as the user's; ralph's own when it names none.
async fn repository_author(top: &Path) -> CommitAuthor {
    let name = git_output(top, &["config", "user.name"]).await;
    let email = git_output(top, &["config", "user.email"]).await;
    match (name, email) {
        (Some(name), Some(email)) if !name.is_empty() && !email.is_empty() => {
            CommitAuthor { name, email }
        }
        _ => CommitAuthor::default(),
    }
}

/// Adds `.ralph/` to the `info/exclude` of the repository the state directory `state` lies
/// in, if any, so the state never shows as untracked. Best effort: a repository that
/// cannot be written keeps showing it, nothing else changes.
pub(crate) async fn exclude_state(state: &Path) {
    let Some(top) = repository_root(state).await else {
        return;
    };
    let Some(root) = state
        .ancestors()
        .find(|dir| dir.file_name() == Some(std::ffi::OsStr::new(state_dir::DEFAULT_STATE_DIR)))
    else {
        return;
    };
    if !root.starts_with(&top) {
        return;
    }
    let Some(common) = git_output(
        &top,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await
    else {
        return;
    };
    let exclude = Path::new(&common).join("info").join("exclude");
    let pattern = format!("{}/", state_dir::DEFAULT_STATE_DIR);
    let current = std::fs::read_to_string(&exclude).unwrap_or_default();
    if current.lines().any(|line| line.trim() == pattern) {
        return;
    }
    let separator = if current.is_empty() || current.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    let _ = std::fs::create_dir_all(Path::new(&common).join("info"));
    let _ = std::fs::write(&exclude, format!("{current}{separator}{pattern}\n"));
}

/// The trimmed output of a git command in `dir` that succeeded.
async fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let output = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .ok()
        .filter(|output| output.status.success())?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The worktrees of `task`'s attempts `numbers` that are still there, under the state
/// directory `state` (kept for a look, or in use).
pub(crate) fn kept(
    state: &Path,
    task: &str,
    numbers: impl IntoIterator<Item = u32>,
) -> Vec<(u32, PathBuf)> {
    let root = root(&std::path::absolute(state).unwrap_or_else(|_| state.to_path_buf()));
    numbers
        .into_iter()
        .map(|number| (number, attempt_dir(&root, task, number)))
        .filter(|(_, dir)| dir.exists())
        .collect()
}

/// Removes the kept worktrees of `task` under the state directory `state` and their work
/// branches (`ralph task reset`); returns the directories removed.
pub(crate) async fn remove_kept(state: &Path, task: &str) -> Result<Vec<PathBuf>, String> {
    let state = std::path::absolute(state).unwrap_or_else(|_| state.to_path_buf());
    let task_dir = root(&state).join(task);
    let Ok(entries) = std::fs::read_dir(&task_dir) else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let branch = git_output(&dir, &["symbolic-ref", "-q", "--short", "HEAD"]).await;
        let common = git_output(
            &dir,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )
        .await;
        let Some(common) = common else {
            // Not a worktree (any more): only the directory is left.
            std::fs::remove_dir_all(&dir)
                .map_err(|error| format!("cannot remove {}: {error}", dir.display()))?;
            removed.push(dir);
            continue;
        };
        let in_repo = |args: &[&str]| {
            tokio::process::Command::new("git")
                .arg("--git-dir")
                .arg(&common)
                .args(args)
                .output()
        };
        let dir_arg = dir.display().to_string();
        let output = in_repo(&["worktree", "remove", "--force", &dir_arg])
            .await
            .map_err(|error| format!("cannot run git: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "cannot remove the worktree {dir_arg}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        if let Some(branch) = branch.filter(|b| b.starts_with("ralph-work/")) {
            // A branch already gone is fine.
            let _ = in_repo(&["branch", "-q", "-D", &branch]).await;
        }
        removed.push(dir);
    }
    let _ = std::fs::remove_dir(&task_dir);
    Ok(removed)
}
