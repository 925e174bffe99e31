//! Errors of the git layer: each names the repository (never with credentials), the ref
//! and the fix.

use std::path::PathBuf;
use std::time::Duration;

use super::settings::SettingsError;

/// Everything that can go wrong preparing, committing or integrating a workspace.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Settings(#[from] SettingsError),

    #[error("cannot run `git`: {source} (install git 2.30 or newer and put it on PATH)")]
    GitMissing {
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot reach {url}: {detail} (check the URL, DNS and that the git server is up and reachable from here)"
    )]
    Unreachable { url: String, detail: String },

    #[error(
        "{url} refused the {credentials}: {detail} (check the credentials Secret: user, token or key, and that it may read and push to this repository)"
    )]
    AuthenticationFailed {
        url: String,
        credentials: String,
        detail: String,
    },

    #[error(
        "{url} is not a git repository or does not exist: {detail} (check the path in workspace.git.url)"
    )]
    RepositoryNotFound { url: String, detail: String },

    #[error(
        "baseRef `{base_ref}` does not exist in {url} and featureBranch `{feature_branch}` does not exist either: create `{base_ref}` or set workspace.git.baseRef to an existing branch"
    )]
    BaseRefMissing {
        url: String,
        base_ref: String,
        feature_branch: String,
    },

    #[error(
        "{url} rejected the push to `{branch}`: {reason} (the branch is protected or a server hook declined it; allow the ralph user to push to `{branch}` or choose another workspace.git.featureBranch)"
    )]
    PushRejected {
        url: String,
        branch: String,
        reason: String,
    },

    #[error(
        "gave up integrating into `{branch}` of {url} after {attempts} pushes rejected because other tasks pushed first (raise the push attempts or run fewer tasks in parallel)"
    )]
    PushRetriesExhausted {
        url: String,
        branch: String,
        attempts: u32,
    },

    #[error(
        "`git {operation}` on {url} (ref `{git_ref}`) did not finish within {after:?} (the repository may be too large for the time limit: raise the git timeout or make the repository smaller)"
    )]
    Timeout {
        url: String,
        git_ref: String,
        operation: String,
        after: Duration,
    },

    #[error("`git {operation}` on {url} (ref `{git_ref}`) failed: {detail}")]
    Git {
        url: String,
        git_ref: String,
        operation: String,
        detail: String,
    },

    #[error(
        "workspace directory {path} is not empty: an attempt starts in a fresh directory (remove it, or give each attempt its own directory)"
    )]
    DirectoryNotEmpty { path: PathBuf },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceError {
    /// True when only the user can fix it (credentials, URL, baseRef, branch protection,
    /// a missing git): retrying the attempt would fail the same way.
    pub fn needs_user_fix(&self) -> bool {
        matches!(
            self,
            Self::Settings(_)
                | Self::GitMissing { .. }
                | Self::AuthenticationFailed { .. }
                | Self::RepositoryNotFound { .. }
                | Self::BaseRefMissing { .. }
                | Self::PushRejected { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
