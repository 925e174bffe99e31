//! The clone variant (an attempt in a Pod): a shallow single-branch clone of the feature
//! branch, integrated back with fetch, rebase and push.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::attempt::{
    AttemptRef, AttemptWorkspace, CommitOutcome, GitOptions, IntegrationOutcome, PushEnd,
    commit_workspace, ensure_fresh_directory, push, push_backoff, rebase_onto,
};
use super::error::WorkspaceError;
use super::git::{CredentialFiles, Git, Net};
use super::settings::RepoSettings;

/// Where an attempt's clone starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloneFrom {
    /// The feature branch: a work attempt builds on the integrated work of the others.
    FeatureBranch,
    /// The task's pushed work branch ([`pushed_work_branch`]), for a verifier: the work
    /// branch is at the work commit and `start_commit` is its parent, so
    /// [`RemoteRepo::integrate`] after [`RemoteRepo::commit`] integrates the work (and
    /// whatever the verifier changed).
    PushedWork,
}

/// A Feature's repository on a git server.
#[derive(Debug)]
pub struct RemoteRepo {
    git: Git,
    settings: RepoSettings,
    feature: String,
    feature_branch: String,
    options: GitOptions,
}

/// `ralph/<feature>/<task>`: the branch an attempt's work is committed on in its clone.
/// It is pushed only under [`pushed_work_branch`]'s name.
pub fn clone_work_branch(feature: &str, task: &str) -> String {
    format!("ralph/{feature}/{task}")
}

/// `ralph-work/<feature>/<task>`: where a task's work waits on the server for a verifier
/// ([`RemoteRepo::push_work_branch`]). Not `ralph/<feature>/<task>`: a server cannot hold
/// that beside the default feature branch `ralph/<feature>`.
pub fn pushed_work_branch(feature: &str, task: &str) -> String {
    format!("ralph-work/{feature}/{task}")
}

impl RemoteRepo {
    /// Validates the settings and writes the credentials (if any) to a private directory
    /// that lives as long as this value.
    pub fn new(
        settings: RepoSettings,
        feature: &str,
        options: GitOptions,
    ) -> Result<Self, WorkspaceError> {
        settings.validate(feature)?;
        super::settings::validate_branch_name("work branch", &clone_work_branch(feature, "task"))?;
        let credentials = match &settings.credentials {
            Some(credentials) => {
                let parent = options
                    .credentials_parent
                    .clone()
                    .unwrap_or_else(std::env::temp_dir);
                Some(Arc::new(CredentialFiles::write(&parent, credentials)?))
            }
            None => None,
        };
        Ok(Self {
            git: Git {
                url: settings.url.clone(),
                timeout: options.command_timeout,
                author: settings.author.clone(),
                credentials,
            },
            feature_branch: settings.feature_branch_for(feature),
            feature: feature.to_owned(),
            settings,
            options,
        })
    }

    pub fn feature_branch(&self) -> &str {
        &self.feature_branch
    }

    /// The private directory holding the credentials, if any (for tests and audits).
    pub fn credentials_dir(&self) -> Option<&Path> {
        self.git.credentials.as_deref().map(CredentialFiles::dir)
    }

    /// The feature branch's head on the server, `None` before the first attempt made it.
    pub async fn feature_head(&self) -> Result<Option<String>, WorkspaceError> {
        let refs = self.remote_refs().await?;
        Ok(refs.feature)
    }

    /// Clones the attempt's start ([`CloneFrom`]) into `dir`, which must be absent or
    /// empty, and makes the work branch `ralph/<feature>/<task>` there.
    pub async fn prepare(
        &self,
        dir: &Path,
        task: &str,
        attempt: u32,
        from: CloneFrom,
    ) -> Result<AttemptWorkspace, WorkspaceError> {
        let work_branch = clone_work_branch(&self.feature, task);
        let start_commit = match from {
            CloneFrom::FeatureBranch => self.clone_feature_branch(dir, &work_branch).await?,
            CloneFrom::PushedWork => self.clone_pushed_work(dir, task, &work_branch).await?,
        };
        Ok(AttemptWorkspace {
            dir: dir.to_owned(),
            attempt: AttemptRef::new(&self.feature, task, attempt),
            work_branch,
            feature_branch: self.feature_branch.clone(),
            start_commit,
        })
    }

    /// [`CloneFrom::FeatureBranch`], creating the feature branch from baseRef and pushing
    /// it the first time. Returns the start commit: the feature branch's head.
    async fn clone_feature_branch(
        &self,
        dir: &Path,
        work_branch: &str,
    ) -> Result<String, WorkspaceError> {
        super::settings::validate_branch_name("work branch", work_branch)?;
        ensure_fresh_directory(dir)?;
        let url = self.settings.url.as_str();
        let feature_branch = self.feature_branch.as_str();
        let refs = self.remote_refs().await?;
        let clone_branch = if refs.feature.is_some() {
            feature_branch
        } else if refs.base_exists {
            self.settings.base_ref.as_str()
        } else {
            return Err(WorkspaceError::BaseRefMissing {
                url: url.to_owned(),
                base_ref: self.settings.base_ref.clone(),
                feature_branch: feature_branch.to_owned(),
            });
        };
        self.clone_into(dir, clone_branch, "1").await?;
        let tracking = format!("refs/remotes/origin/{feature_branch}");
        self.git
            .ok(
                dir,
                &["remote", "set-branches", "origin", feature_branch],
                feature_branch,
                Net::Local,
            )
            .await?;
        if refs.feature.is_none() {
            self.create_feature_branch(dir).await?;
        }
        let steps: [&[&str]; 3] = [
            &["checkout", "-q", "--detach"],
            &["branch", "-q", "-D", clone_branch],
            &["checkout", "-q", "--no-track", "-b", work_branch, &tracking],
        ];
        self.git.ok_each(dir, &steps, feature_branch).await?;
        self.git.commit_at(dir, "HEAD", feature_branch).await
    }

    /// [`CloneFrom::PushedWork`]: the work branch is at the pushed work commit. Returns the
    /// start commit: its parent.
    async fn clone_pushed_work(
        &self,
        dir: &Path,
        task: &str,
        work_branch: &str,
    ) -> Result<String, WorkspaceError> {
        let pushed = pushed_work_branch(&self.feature, task);
        super::settings::validate_branch_name("work branch", &pushed)?;
        ensure_fresh_directory(dir)?;
        self.clone_into(dir, &pushed, "2").await?;
        let steps: [&[&str]; 2] = [
            &["checkout", "-q", "--no-track", "-b", work_branch],
            &["branch", "-q", "-D", &pushed],
        ];
        self.git.ok_each(dir, &steps, &pushed).await?;
        self.git.commit_at(dir, "HEAD^", &pushed).await
    }

    /// Pushes the attempt's commit (see [`RemoteRepo::commit`]) to the task's
    /// [`pushed_work_branch`], replacing what an earlier attempt left there; the feature
    /// branch is not touched. Returns the branch.
    pub async fn push_work_branch(&self, ws: &AttemptWorkspace) -> Result<String, WorkspaceError> {
        let pushed = pushed_work_branch(&self.feature, &ws.attempt.task);
        let url = self.settings.url.as_str();
        let push_spec = format!("+HEAD:refs/heads/{pushed}");
        match push(&self.git, &ws.dir, &["--", url, &push_spec], &pushed, url).await? {
            PushEnd::Pushed => Ok(pushed),
            PushEnd::Raced { stderr } => {
                Err(self.git.failure(&["push"], &pushed, Net::Remote, &stderr))
            }
        }
    }

    /// After [`RemoteRepo::commit`] found nothing to commit: an empty commit naming the task
    /// and attempt, so that [`RemoteRepo::push_work_branch`] replaces an earlier attempt's
    /// work with "no change" and a verifier never checks stale work. Returns the commit.
    pub async fn commit_no_change(&self, ws: &AttemptWorkspace) -> Result<String, WorkspaceError> {
        let message = ws.attempt.commit_message();
        let branch = ws.work_branch.as_str();
        self.git
            .ok(
                &ws.dir,
                &[
                    "commit",
                    "-q",
                    "--no-verify",
                    "--allow-empty",
                    "-m",
                    &message,
                ],
                branch,
                Net::Local,
            )
            .await?;
        self.git.commit_at(&ws.dir, "HEAD", branch).await
    }

    /// For a verifier (see [`CloneFrom::PushedWork`]): puts the work branch
    /// back at the pushed work commit and drops whatever the verifier left in the workspace
    /// (build output of the checks it ran), so that [`RemoteRepo::integrate`] integrates the
    /// worker's commit as it was verified. Unchanged when that commit changes nothing (see
    /// [`RemoteRepo::commit_no_change`]).
    pub async fn restore_pushed_work(
        &self,
        ws: &AttemptWorkspace,
    ) -> Result<CommitOutcome, WorkspaceError> {
        let pushed = pushed_work_branch(&self.feature, &ws.attempt.task);
        let tracking = format!("refs/remotes/origin/{pushed}");
        let work_ref = format!("refs/heads/{}", ws.work_branch);
        let local = Net::Local;
        let steps: [&[&str]; 3] = [
            &["symbolic-ref", "HEAD", &work_ref],
            &["reset", "-q", "--hard", &tracking],
            &["clean", "-q", "-f", "-d", "-x"],
        ];
        self.git.ok_each(&ws.dir, &steps, &pushed).await?;
        let empty = self
            .git
            .run(
                &ws.dir,
                &["diff", "--quiet", "HEAD^", "HEAD"],
                &pushed,
                local,
            )
            .await?;
        if empty.success {
            return Ok(CommitOutcome::Unchanged);
        }
        let commit = self.git.commit_at(&ws.dir, "HEAD", &pushed).await?;
        Ok(CommitOutcome::Committed { commit })
    }

    /// Commits everything in the workspace as one commit naming the task and attempt.
    pub async fn commit(&self, ws: &AttemptWorkspace) -> Result<CommitOutcome, WorkspaceError> {
        commit_workspace(&self.git, ws).await
    }

    /// Rebases the attempt's commit onto the feature branch's head and pushes it, fetching
    /// and trying again while other tasks get there first.
    pub async fn integrate(
        &self,
        ws: &AttemptWorkspace,
    ) -> Result<IntegrationOutcome, WorkspaceError> {
        let branch = ws.feature_branch.as_str();
        let url = self.settings.url.as_str();
        let tracking = format!("refs/remotes/origin/{branch}");
        let fetch_spec = format!("+refs/heads/{branch}:{tracking}");
        let push_spec = format!("HEAD:refs/heads/{branch}");
        for attempt in 1..=self.options.max_push_attempts {
            let fetched = self
                .git
                .ok(
                    &ws.dir,
                    &["fetch", "-q", "--no-tags", "--", url, &fetch_spec],
                    branch,
                    Net::Remote,
                )
                .await;
            match fetched {
                // A server swamped by parallel integrations drops connections: try again.
                Err(WorkspaceError::Unreachable { .. })
                    if attempt < self.options.max_push_attempts =>
                {
                    push_backoff(attempt).await;
                    continue;
                }
                other => other?,
            };
            let head = self.git.commit_at(&ws.dir, &tracking, branch).await?;
            if let Some(conflict) = rebase_onto(&self.git, ws, &head).await? {
                return Ok(conflict);
            }
            match push(&self.git, &ws.dir, &["--", url, &push_spec], branch, url).await {
                Ok(PushEnd::Pushed) => {
                    let commit = self.git.commit_at(&ws.dir, "HEAD", branch).await?;
                    return Ok(IntegrationOutcome::Integrated {
                        commit,
                        onto: head,
                        push_attempts: attempt,
                    });
                }
                Ok(PushEnd::Raced { .. }) | Err(WorkspaceError::Unreachable { .. }) => {
                    push_backoff(attempt).await;
                }
                Err(error) => return Err(error),
            }
        }
        Err(WorkspaceError::PushRetriesExhausted {
            url: url.to_owned(),
            branch: branch.to_owned(),
            attempts: self.options.max_push_attempts,
        })
    }

    /// Clones the last `depth` commits of `branch` alone into `dir`, making its parent.
    async fn clone_into(
        &self,
        dir: &Path,
        branch: &str,
        depth: &str,
    ) -> Result<(), WorkspaceError> {
        let parent = dir.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(WorkspaceError::io(parent))?;
        let dir_arg = dir.to_string_lossy().into_owned();
        let url = self.settings.url.as_str();
        self.git
            .ok(
                parent,
                &[
                    "clone",
                    "-q",
                    "--depth",
                    depth,
                    "--single-branch",
                    "--no-tags",
                    "--branch",
                    branch,
                    "--",
                    url,
                    &dir_arg,
                ],
                branch,
                Net::Remote,
            )
            .await?;
        Ok(())
    }

    /// Pushes the cloned baseRef as the new feature branch. Another attempt creating it at
    /// the same moment is fine: its branch is used.
    async fn create_feature_branch(&self, dir: &Path) -> Result<(), WorkspaceError> {
        let url = self.settings.url.as_str();
        let branch = self.feature_branch.as_str();
        let push_spec = format!("HEAD:refs/heads/{branch}");
        // Raced: another attempt created it at the same moment; its branch is used.
        push(&self.git, dir, &["--", url, &push_spec], branch, url).await?;
        let fetch_spec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
        self.git
            .ok(
                dir,
                &[
                    "fetch",
                    "-q",
                    "--depth",
                    "1",
                    "--no-tags",
                    "--",
                    url,
                    &fetch_spec,
                ],
                branch,
                Net::Remote,
            )
            .await?;
        Ok(())
    }

    async fn remote_refs(&self) -> Result<RemoteRefs, WorkspaceError> {
        let feature_ref = format!("refs/heads/{}", self.feature_branch);
        let base_ref = format!("refs/heads/{}", self.settings.base_ref);
        let base_tag = format!("refs/tags/{}", self.settings.base_ref);
        let cwd = std::env::temp_dir();
        let listing = self
            .git
            .ok(
                &cwd,
                &[
                    "ls-remote",
                    "--",
                    &self.settings.url,
                    &feature_ref,
                    &base_ref,
                    &base_tag,
                ],
                &self.feature_branch,
                Net::Remote,
            )
            .await?;
        let mut refs = RemoteRefs::default();
        for line in listing.lines() {
            let Some((commit, name)) = line.split_once('\t') else {
                continue;
            };
            if name == feature_ref {
                refs.feature = Some(commit.to_owned());
            } else if name == base_ref || name == base_tag {
                refs.base_exists = true;
            }
        }
        Ok(refs)
    }
}

#[derive(Debug, Default)]
struct RemoteRefs {
    feature: Option<String>,
    base_exists: bool,
}

/// Where an attempt's clone goes under `root`: `<root>/<task>-a<attempt>`.
pub fn attempt_dir(root: &Path, task: &str, attempt: u32) -> PathBuf {
    root.join(format!("{task}-a{attempt}"))
}
