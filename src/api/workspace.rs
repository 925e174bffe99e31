//! `spec.workspace`: where the agents' work goes (a git repository).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a git URL must look like (the controller checks the rest, see docs/git.md).
pub const GIT_URL_PATTERN: &str =
    r"^(https://|http://|ssh://|git://|file://|/|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)[^\s]+$";
/// What a branch name must look like at the schema level (no whitespace or `~^:?*[\`).
pub const BRANCH_PATTERN: &str = r"^[^\s~^:?*\[\\]+$";

/// The workspace of the Feature's attempts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// A git repository: each attempt clones `featureBranch`, works on its own branch, and
    /// done work is integrated into `featureBranch`. Unset: an empty directory per attempt,
    /// whose work is lost when the Pod goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitWorkspace>,
}

/// The Feature's git repository.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitWorkspace {
    /// The repository: `https://host/path`, `ssh://user@host/path`, `user@host:path`,
    /// `git://host/path`. No credentials in the URL: they go in `credentialsSecretRef`.
    #[schemars(pattern(GIT_URL_PATTERN), length(min = 1, max = 2048))]
    pub url: String,

    /// The branch (or tag) `featureBranch` is created from the first time.
    #[schemars(pattern(BRANCH_PATTERN), length(min = 1, max = 255))]
    pub base_ref: String,

    /// The branch that collects the tasks' work. Default: `ralph/<feature>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BRANCH_PATTERN), length(min = 1, max = 255))]
    pub feature_branch: Option<String>,

    /// A Secret in the Feature's namespace with the credentials: an HTTPS username and token
    /// (for http(s) URLs), or an SSH private key and known_hosts (for ssh URLs). Mounted only
    /// into the git steps of the agent Pod, never into the agent's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<GitCredentialsRef>,

    /// Name and email of the task commits. Default: `ralph <ralph@ralph.dev>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<GitAuthor>,

    /// Image of the git steps (it must contain `git` 2.30+). Default: the agent's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
}

/// Keys of the credentials Secret. The defaults follow the `kubernetes.io/basic-auth` and
/// `kubernetes.io/ssh-auth` Secret types.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitCredentialsRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key of the HTTPS username. Default: `username`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub username_key: Option<String>,

    /// Key of the HTTPS token (or password). Default: `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub token_key: Option<String>,

    /// Key of the SSH private key. Default: `ssh-privatekey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub ssh_private_key_key: Option<String>,

    /// Key of the SSH known hosts lines. Default: "known_hosts".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub known_hosts_key: Option<String>,
}

impl GitCredentialsRef {
    /// The key of the HTTPS username.
    pub fn username_key(&self) -> &str {
        self.username_key.as_deref().unwrap_or("username")
    }

    /// The key of the HTTPS token.
    pub fn token_key(&self) -> &str {
        self.token_key.as_deref().unwrap_or("password")
    }

    /// The key of the SSH private key.
    pub fn ssh_private_key_key(&self) -> &str {
        self.ssh_private_key_key
            .as_deref()
            .unwrap_or("ssh-privatekey")
    }

    /// The key of the SSH known_hosts lines.
    pub fn known_hosts_key(&self) -> &str {
        self.known_hosts_key.as_deref().unwrap_or("known_hosts")
    }
}

/// The person task commits are attributed to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitAuthor {
    /// The author's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The author's email.
    #[schemars(length(min = 3, max = 256))]
    pub email: String,
}

/// Where the Feature's branch stands (status).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureBranchStatus {
    /// The feature branch.
    pub branch: String,
    /// Its head after the last integration this controller saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Task commits integrated into it, over all attempts this controller recorded.
    #[serde(default)]
    pub integrated: u32,
}
