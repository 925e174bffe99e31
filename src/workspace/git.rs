//! Running the `git` CLI: a timeout on every command, a controlled environment, and
//! credentials handed only to the git processes that talk to the server.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;

use super::error::WorkspaceError;
use super::settings::{CommitAuthor, Credentials};

/// Config given on every git command line (it outranks the repository's own config, which
/// an agent can edit): no hooks, no fsmonitor command, and any owner of the directory.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "safe.directory=*",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
];

/// Credentials written to a private directory (mode 0700, files 0600) that only git
/// processes of this module read. The directory is deleted when this value is dropped.
#[derive(Debug)]
pub struct CredentialFiles {
    dir: PathBuf,
    description: String,
    kind: CredentialKind,
}

#[derive(Debug, Clone, Copy)]
enum CredentialKind {
    Https,
    Ssh,
}

impl CredentialFiles {
    /// Writes `credentials` into a new private directory under `parent`.
    pub fn write(parent: &Path, credentials: &Credentials) -> Result<Self, WorkspaceError> {
        let dir = parent.join(format!("ralph-git-{:016x}", rand::random::<u64>()));
        std::fs::DirBuilder::new()
            .recursive(false)
            .mode(0o700)
            .create(&dir)
            .map_err(WorkspaceError::io(&dir))?;
        let files = Self {
            dir,
            description: credentials.describe(),
            kind: match credentials {
                Credentials::Https { .. } => CredentialKind::Https,
                Credentials::Ssh { .. } => CredentialKind::Ssh,
            },
        };
        match credentials {
            Credentials::Https { username, token } => {
                files.write_private("username", username.trim())?;
                files.write_private("token", token.trim())?;
            }
            Credentials::Ssh {
                private_key,
                known_hosts,
            } => {
                let mut key = private_key.trim_end().to_owned();
                key.push('\n');
                files.write_private("key", &key)?;
                files.write_private("known_hosts", known_hosts)?;
            }
        }
        Ok(files)
    }

    /// The private directory; it holds nothing but these credentials.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write_private(&self, name: &str, contents: &str) -> Result<(), WorkspaceError> {
        let path = self.dir.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(WorkspaceError::io(&path))?;
        file.write_all(contents.as_bytes())
            .map_err(WorkspaceError::io(&path))
    }

    /// Adds what lets `command` authenticate: a credential helper reading the files (HTTPS)
    /// or an ssh command using the key and known hosts (SSH). Only paths, never secrets,
    /// appear in the arguments and environment.
    fn apply(&self, command: &mut Command) {
        let dir = self.dir.display();
        match self.kind {
            CredentialKind::Https => {
                let helper = format!(
                    "credential.helper=!f() {{ test \"$1\" = get || exit 0; printf 'username=%s\\npassword=%s\\n' \"$(cat '{dir}/username')\" \"$(cat '{dir}/token')\"; }}; f"
                );
                command.args(["-c", "credential.helper=", "-c", &helper]);
            }
            CredentialKind::Ssh => {
                command.env(
                    "GIT_SSH_COMMAND",
                    format!(
                        "ssh -i '{dir}/key' -o IdentitiesOnly=yes -o UserKnownHostsFile='{dir}/known_hosts' -o StrictHostKeyChecking=yes -o BatchMode=yes"
                    ),
                );
                command.env("GIT_SSH_VARIANT", "ssh");
            }
        }
    }
}

impl Drop for CredentialFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a command talks to the server (gets credentials; failures are classified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Net {
    Remote,
    Local,
}

/// What a finished git command printed.
#[derive(Debug)]
pub(crate) struct GitOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs git for one repository.
#[derive(Debug, Clone)]
pub(crate) struct Git {
    /// The repository's URL (or path), for messages; never holds credentials.
    pub url: String,
    pub timeout: Duration,
    pub author: CommitAuthor,
    pub credentials: Option<Arc<CredentialFiles>>,
}

impl Git {
    /// Runs `git args` in `cwd`; `git_ref` names the ref in errors.
    pub(super) async fn run(
        &self,
        cwd: &Path,
        args: &[&str],
        git_ref: &str,
        net: Net,
    ) -> Result<GitOutput, WorkspaceError> {
        let mut command = Command::new("git");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                command.env_remove(key);
            }
        }
        for setting in SAFE_CONFIG {
            command.args(["-c", setting]);
        }
        if net == Net::Remote
            && let Some(credentials) = &self.credentials
        {
            credentials.apply(&mut command);
        }
        command
            .args(args)
            .current_dir(cwd)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "")
            .env("SSH_ASKPASS", "")
            .env("LC_ALL", "C")
            .env("GIT_AUTHOR_NAME", &self.author.name)
            .env("GIT_AUTHOR_EMAIL", &self.author.email)
            .env("GIT_COMMITTER_NAME", &self.author.name)
            .env("GIT_COMMITTER_EMAIL", &self.author.email)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|source| WorkspaceError::GitMissing { source })?;
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| WorkspaceError::Timeout {
                url: self.url.clone(),
                git_ref: git_ref.to_owned(),
                operation: operation_name(args),
                after: self.timeout,
            })?
            .map_err(WorkspaceError::io(cwd))?;
        Ok(GitOutput {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Runs a command that must succeed and returns its trimmed stdout.
    pub(super) async fn ok(
        &self,
        cwd: &Path,
        args: &[&str],
        git_ref: &str,
        net: Net,
    ) -> Result<String, WorkspaceError> {
        let output = self.run(cwd, args, git_ref, net).await?;
        if output.success {
            Ok(output.stdout.trim().to_owned())
        } else {
            Err(self.failure(args, git_ref, net, &output.stderr))
        }
    }

    /// The commit `rev` names in the repository at `cwd` (`HEAD`, `HEAD^`, a ref).
    pub(super) async fn commit_at(
        &self,
        cwd: &Path,
        rev: &str,
        git_ref: &str,
    ) -> Result<String, WorkspaceError> {
        self.ok(cwd, &["rev-parse", rev], git_ref, Net::Local).await
    }

    /// Runs local commands in `cwd` one after the other; each must succeed.
    pub(super) async fn ok_each(
        &self,
        cwd: &Path,
        commands: &[&[&str]],
        git_ref: &str,
    ) -> Result<(), WorkspaceError> {
        for args in commands {
            self.ok(cwd, args, git_ref, Net::Local).await?;
        }
        Ok(())
    }

    /// The error for a failed command: network failures are told apart by what git printed.
    pub(super) fn failure(
        &self,
        args: &[&str],
        git_ref: &str,
        net: Net,
        stderr: &str,
    ) -> WorkspaceError {
        let detail = last_lines(stderr);
        if net == Net::Remote {
            let lower = stderr.to_lowercase();
            let has = |patterns: &[&str]| patterns.iter().any(|p| lower.contains(p));
            if has(&[
                "repository not found",
                "not exported",
                "does not appear to be a git repository",
                "returned error: 404",
            ]) {
                return WorkspaceError::RepositoryNotFound {
                    url: self.url.clone(),
                    detail,
                };
            }
            if has(&[
                "authentication failed",
                "could not read username",
                "could not read password",
                "permission denied (publickey",
                "returned error: 401",
                "returned error: 403",
                "invalid username or password",
                "host key verification failed",
                "access denied",
            ]) {
                return WorkspaceError::AuthenticationFailed {
                    url: self.url.clone(),
                    credentials: self
                        .credentials
                        .as_ref()
                        .map(|c| c.description.clone())
                        .unwrap_or_else(|| "request without credentials".to_owned()),
                    detail,
                };
            }
            if has(&[
                "could not resolve host",
                "connection refused",
                "unable to connect",
                "failed to connect",
                "couldn't connect",
                "connection timed out",
                "network is unreachable",
                "no route to host",
                "unable to look up",
                "could not read from remote repository",
                "connection reset",
            ]) {
                return WorkspaceError::Unreachable {
                    url: self.url.clone(),
                    detail,
                };
            }
        }
        WorkspaceError::Git {
            url: self.url.clone(),
            git_ref: git_ref.to_owned(),
            operation: operation_name(args),
            detail,
        }
    }
}

fn operation_name(args: &[&str]) -> String {
    match args {
        ["worktree", sub, ..] => format!("worktree {sub}"),
        [first, ..] => (*first).to_owned(),
        [] => String::new(),
    }
}

/// The last few meaningful lines of git's stderr, without `fatal: ` prefixes.
fn last_lines(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("hint:"))
        .collect();
    let start = lines.len().saturating_sub(3);
    let text = lines[start..]
        .iter()
        .map(|line| {
            line.trim_start_matches("fatal: ")
                .trim_start_matches("error: ")
        })
        .collect::<Vec<_>>()
        .join("; ");
    if text.is_empty() {
        "git printed nothing".to_owned()
    } else {
        text
    }
}
