//! The worktree variant (`ralph run`): each attempt gets its own `git worktree` of a
//! repository on disk; integration moves the feature branch by compare-and-swap, and
//! pushes it when a remote is configured.

use std::path::{Path, PathBuf};

use super::attempt::{
    AttemptRef, AttemptWorkspace, CommitOutcome, GitOptions, IntegrationOutcome, PushEnd,
    commit_workspace, ensure_fresh_directory, push, push_backoff, rebase_onto,
};
use super::error::WorkspaceError;
use super::git::{Git, Net};
use super::settings::{CommitAuthor, default_feature_branch, validate_branch_name};

/// `ralph-work/<feature>/<task>/a<attempt>`: the branch of one attempt's worktree.
///
/// Not `ralph/<feature>/<task>` as in a clone: here the feature branch `ralph/<feature>`
/// lives in the same repository, and git cannot hold both `ralph/x` and `ralph/x/y`.
pub fn local_work_branch(feature: &str, task: &str, attempt: u32) -> String {
    format!("ralph-work/{feature}/{task}/a{attempt}")
}

/// A repository on disk that attempts work in through worktrees.
#[derive(Debug)]
pub struct LocalRepo {
    git: Git,
    repo: PathBuf,
    feature: String,
    base_ref: String,
    feature_branch: String,
    push_remote: Option<String>,
    options: GitOptions,
}

impl LocalRepo {
    /// `feature_branch: None` means `ralph/<feature>`; `push_remote` names a configured
    /// remote the feature branch is pushed to after each integration.
    pub fn new(
        repo: &Path,
        feature: &str,
        base_ref: &str,
        feature_branch: Option<&str>,
        push_remote: Option<&str>,
        author: CommitAuthor,
        options: GitOptions,
    ) -> Result<Self, WorkspaceError> {
        validate_branch_name("baseRef", base_ref)?;
        let feature_branch = feature_branch
            .map(str::to_owned)
            .unwrap_or_else(|| default_feature_branch(feature));
        validate_branch_name("featureBranch", &feature_branch)?;
        validate_branch_name("work branch", &local_work_branch(feature, "task", 1))?;
        let repo = std::path::absolute(repo).map_err(WorkspaceError::io(repo))?;
        Ok(Self {
            git: Git {
                url: repo.display().to_string(),
                timeout: options.command_timeout,
                author,
                credentials: None,
            },
            repo,
            feature: feature.to_owned(),
            base_ref: base_ref.to_owned(),
            feature_branch,
            push_remote: push_remote.map(str::to_owned),
            options,
        })
    }

    pub fn feature_branch(&self) -> &str {
        &self.feature_branch
    }

    /// The feature branch's head, `None` before the first attempt made it.
    pub async fn feature_head(&self) -> Result<Option<String>, WorkspaceError> {
        self.resolve(&format!("refs/heads/{}", self.feature_branch))
            .await
    }

    /// Adds a worktree at `dir` (absent or empty) on a new work branch starting at the
    /// feature branch, which is created from baseRef the first time.
    pub async fn prepare(
        &self,
        dir: &Path,
        task: &str,
        attempt: u32,
    ) -> Result<AttemptWorkspace, WorkspaceError> {
        let work_branch = local_work_branch(&self.feature, task, attempt);
        validate_branch_name("work branch", &work_branch)?;
        ensure_fresh_directory(dir)?;
        let feature_ref = format!("refs/heads/{}", self.feature_branch);
        if self.resolve(&feature_ref).await?.is_none() {
            let Some(base) = self.resolve(&self.base_ref).await? else {
                return Err(WorkspaceError::BaseRefMissing {
                    url: self.git.url.clone(),
                    base_ref: self.base_ref.clone(),
                    feature_branch: self.feature_branch.clone(),
                });
            };
            // Zero as the old value: only created if nobody else created it meanwhile.
            let _ = self
                .git
                .run(
                    &self.repo,
                    &["update-ref", &feature_ref, &base, &"0".repeat(base.len())],
                    &self.feature_branch,
                    Net::Local,
                )
                .await?;
        }
        let dir_arg = std::path::absolute(dir)
            .map_err(WorkspaceError::io(dir))?
            .to_string_lossy()
            .into_owned();
        self.git
            .ok(
                &self.repo,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "-B",
                    &work_branch,
                    &dir_arg,
                    &feature_ref,
                ],
                &work_branch,
                Net::Local,
            )
            .await?;
        let start_commit = self.git.commit_at(dir, "HEAD", &work_branch).await?;
        Ok(AttemptWorkspace {
            dir: PathBuf::from(dir_arg),
            attempt: AttemptRef::new(&self.feature, task, attempt),
            work_branch,
            feature_branch: self.feature_branch.clone(),
            start_commit,
        })
    }

    /// Commits everything in the worktree as one commit naming the task and attempt.
    pub async fn commit(&self, ws: &AttemptWorkspace) -> Result<CommitOutcome, WorkspaceError> {
        commit_workspace(&self.git, ws).await
    }

    /// Rebases the attempt's commit onto the feature branch and moves the branch to it
    /// (compare-and-swap, retried while parallel attempts move it first); then pushes the
    /// feature branch to the configured remote, if any.
    pub async fn integrate(
        &self,
        ws: &AttemptWorkspace,
    ) -> Result<IntegrationOutcome, WorkspaceError> {
        let branch = ws.feature_branch.as_str();
        let feature_ref = format!("refs/heads/{branch}");
        for attempt in 1..=self.options.max_push_attempts {
            let head = self.git.commit_at(&ws.dir, &feature_ref, branch).await?;
            if let Some(conflict) = rebase_onto(&self.git, ws, &head).await? {
                return Ok(conflict);
            }
            let commit = self.git.commit_at(&ws.dir, "HEAD", branch).await?;
            let swap = self
                .git
                .run(
                    &ws.dir,
                    &["update-ref", &feature_ref, &commit, &head],
                    branch,
                    Net::Local,
                )
                .await?;
            if !swap.success {
                push_backoff(attempt).await;
                continue;
            }
            if let Some(remote) = &self.push_remote {
                self.push(remote).await?;
            }
            return Ok(IntegrationOutcome::Integrated {
                commit,
                onto: head,
                push_attempts: attempt,
            });
        }
        Err(WorkspaceError::PushRetriesExhausted {
            url: self.git.url.clone(),
            branch: branch.to_owned(),
            attempts: self.options.max_push_attempts,
        })
    }

    /// Removes an attempt's worktree and its work branch (for finished attempts; those of
    /// failed ones are kept for a look until the task is reset).
    pub async fn remove(&self, ws: &AttemptWorkspace) -> Result<(), WorkspaceError> {
        let dir = ws.dir.to_string_lossy().into_owned();
        let branch = ws.work_branch.as_str();
        if ws.dir.exists() {
            self.git
                .ok(
                    &self.repo,
                    &["worktree", "remove", "--force", &dir],
                    branch,
                    Net::Local,
                )
                .await?;
        }
        self.git
            .ok(&self.repo, &["worktree", "prune"], branch, Net::Local)
            .await?;
        let _ = self
            .git
            .run(
                &self.repo,
                &["branch", "-q", "-D", branch],
                branch,
                Net::Local,
            )
            .await?;
        Ok(())
    }

    async fn push(&self, remote: &str) -> Result<(), WorkspaceError> {
        let branch = self.feature_branch.as_str();
        let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
        let url = format!("remote `{remote}`");
        match push(&self.git, &self.repo, &[remote, &spec], branch, &url).await? {
            PushEnd::Pushed => Ok(()),
            PushEnd::Raced { .. } => Err(WorkspaceError::PushRejected {
                url,
                branch: branch.to_owned(),
                reason: "the remote branch has commits this repository lacks".to_owned(),
            }),
        }
    }

    async fn resolve(&self, name: &str) -> Result<Option<String>, WorkspaceError> {
        let spec = format!("{name}^{{commit}}");
        let output = self
            .git
            .run(
                &self.repo,
                &["rev-parse", "--verify", "-q", &spec],
                name,
                Net::Local,
            )
            .await?;
        Ok(output.success.then(|| output.stdout.trim().to_owned()))
    }
}
