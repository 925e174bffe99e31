//! git: clone, branch, commit, integrate — used by the Pod's git steps and by local mode.
//!
//! - [`RemoteRepo`]: a Feature's repository on a git server. [`RemoteRepo::prepare`] clones
//!   the feature branch shallowly into a fresh directory and makes the work branch;
//!   [`RemoteRepo::commit`] and [`RemoteRepo::integrate`] run after a done verdict.
//! - [`LocalRepo`]: a repository on disk (`ralph run`): one `git worktree` per attempt,
//!   integrated by a compare-and-swap of the feature branch (and a push when a remote is set).
//!
//! Credentials reach only the git processes this module runs (see `docs/git.md`).

mod attempt;
mod error;
mod git;
mod local;
mod remote;
pub(crate) mod report;
mod settings;

pub use attempt::{AttemptRef, AttemptWorkspace, CommitOutcome, GitOptions, IntegrationOutcome};
pub use error::WorkspaceError;
pub use git::CredentialFiles;
pub use local::{LocalRepo, local_work_branch};
pub use remote::{CloneFrom, RemoteRepo, attempt_dir, clone_work_branch, pushed_work_branch};
pub use settings::{
    CommitAuthor, Credentials, RepoSettings, SettingsError, Transport, default_feature_branch,
    validate_branch_name, validate_url,
};

/// File names in a credentials directory handed to the git steps (a credentials Secret's
/// keys are mapped onto them): `username` and `token`, or `ssh-privatekey` and `known_hosts`.
pub(crate) mod credential_file {
    /// The HTTPS username.
    pub(crate) const USERNAME: &str = "username";
    /// The HTTPS token or password.
    pub(crate) const TOKEN: &str = "token";
    /// The SSH private key.
    pub(crate) const SSH_KEY: &str = "ssh-privatekey";
    /// The SSH known_hosts lines.
    pub(crate) const KNOWN_HOSTS: &str = "known_hosts";
}
