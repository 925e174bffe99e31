//! `ralph git prepare` and `ralph git finish`: the git steps of an agent Pod. They hold the
//! repository's credentials; the agent's container never does. Each writes a
//! [`WorkspaceReport`] (JSON) to its report file, the container's termination message,
//! which the controller reads on ingest beside the runner's result.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::engine::attempt::AttemptResult;
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport, finish_commits};
use crate::workspace::{
    AttemptRef, AttemptWorkspace, CloneFrom, CommitAuthor, CommitOutcome, Credentials, GitOptions,
    RemoteRepo, RepoSettings, WorkspaceError, credential_file, report,
};

/// The git steps.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Clone the feature branch into the workspace and make the task's work branch
    /// (agent Pod init container).
    Prepare(PrepareArgs),
    /// After the runner's result: commit the workspace and integrate it into the feature
    /// branch when the verdict is done (agent Pod finishing container).
    Finish(FinishArgs),
}

/// The repository and the attempt, shared by both steps.
#[derive(Debug, clap::Args)]
pub struct RepoArgs {
    /// The repository URL (no credentials in it).
    #[arg(long)]
    pub url: String,
    /// The branch the feature branch is created from the first time.
    #[arg(long)]
    pub base_ref: String,
    /// The feature branch [default: ralph/<feature>].
    #[arg(long)]
    pub feature_branch: Option<String>,
    /// The feature.
    #[arg(long)]
    pub feature: String,
    /// The task.
    #[arg(long)]
    pub task: String,
    /// The attempt number.
    #[arg(long)]
    pub attempt: u32,
    /// The attempt's workspace directory.
    #[arg(long)]
    pub workspace: PathBuf,
    /// Directory with the credentials: `username` and `token`, or `ssh-privatekey` and
    /// `known_hosts`.
    #[arg(long)]
    pub credentials_dir: Option<PathBuf>,
    /// The Secret the credentials come from, named in error messages.
    #[arg(long)]
    pub credentials_secret: Option<String>,
    /// Name of the commits' author.
    #[arg(long)]
    pub author_name: Option<String>,
    /// Email of the commits' author.
    #[arg(long)]
    pub author_email: Option<String>,
    /// What prepare recorded about the workspace (start commit, branches); kept outside the
    /// workspace so the agent cannot change it.
    #[arg(long)]
    pub state_file: PathBuf,
    /// Where to write the report [default: stdout].
    #[arg(long)]
    pub report_file: Option<PathBuf>,
    /// File touched while a git step works, so the claim stays renewed.
    #[arg(long)]
    pub heartbeat_file: Option<PathBuf>,
    /// Longest time one git command may take.
    #[arg(long, default_value = "10m", value_parser = crate::clock::parse_duration)]
    pub git_timeout: Duration,
}

/// Options of `ralph git prepare`.
#[derive(Debug, clap::Args)]
pub struct PrepareArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Start from the task's pushed work branch (a verifier of that work) instead of the
    /// feature branch.
    #[arg(long)]
    pub from_work_branch: bool,
}

/// What the finishing step does with done work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FinishMode {
    /// Commit and integrate into the feature branch.
    Integrate,
    /// Commit and push the task's work branch only (a verifier integrates it).
    PushWorkBranch,
}

/// Options of `ralph git finish`.
#[derive(Debug, clap::Args)]
pub struct FinishArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The runner's result document (its copy in the shared run directory).
    #[arg(long)]
    pub result_file: PathBuf,
    /// Give up waiting for the result once the runner's heartbeat is this old (the agent's
    /// container ended without a result): nothing is committed.
    #[arg(long, default_value = "360s", value_parser = crate::clock::parse_duration)]
    pub heartbeat_max_age: Duration,
    /// The runner's heartbeat file.
    #[arg(long)]
    pub runner_heartbeat_file: Option<PathBuf>,
    /// File written once the step is done, its report written (the claim-keeper's sign
    /// that the claim is spent).
    #[arg(long)]
    pub ended_file: Option<PathBuf>,
    /// What to do with done work.
    #[arg(long, value_enum, default_value_t = FinishMode::Integrate)]
    pub mode: FinishMode,
    /// The attempt is a verifier's: its pass (`verify-pass`), not a done verdict, lets the
    /// work in.
    #[arg(long)]
    pub verifier: bool,
}

/// What prepare hands to finish.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreparedState {
    work_branch: String,
    feature_branch: String,
    start_commit: String,
}

/// Runs a git step; the exit status is 0 when the report says all went well.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    let (report, repo, ended_file) = match command {
        Command::Prepare(args) => (prepare(&args).await, args.repo, None),
        Command::Finish(args) => (finish(&args).await, args.repo, args.ended_file),
    };
    let written = write_report(report, &repo);
    if let Some(path) = ended_file
        && let Err(error) = std::fs::write(&path, b"")
    {
        tracing::warn!(path = %path.display(), %error, "cannot write the ended file");
    }
    written
}

/// Writes the report (its file, or stdout); the exit status is 0 when it says all went well.
fn write_report(report: WorkspaceReport, repo: &RepoArgs) -> anyhow::Result<ExitCode> {
    let ok = matches!(
        report.outcome,
        WorkspaceOutcome::Integrated
            | WorkspaceOutcome::Unchanged
            | WorkspaceOutcome::PushedWorkBranch
            | WorkspaceOutcome::NotCommitted
    );
    let json = serde_json::to_string(&report.bounded()).context("cannot encode the report")?;
    match &repo.report_file {
        Some(path) => std::fs::write(path, &json)
            .with_context(|| format!("cannot write the report to {}", path.display()))?,
        None => println!("{json}"),
    }
    if !ok {
        eprintln!("{json}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn prepare(args: &PrepareArgs) -> WorkspaceReport {
    let repo = &args.repo;
    // A clone of a large repository may outlast the sidecar's heartbeat limit.
    let heartbeat = keep_heartbeat(repo.heartbeat_file.clone());
    let result = async {
        let remote = remote_repo(repo)?;
        let from = if args.from_work_branch {
            CloneFrom::PushedWork
        } else {
            CloneFrom::FeatureBranch
        };
        remote
            .prepare(&repo.workspace, &repo.task, repo.attempt, from)
            .await
    }
    .await;
    heartbeat.abort();
    let ws = match result {
        Ok(ws) => ws,
        Err(error) => return failure(repo, &error),
    };
    let state = PreparedState {
        work_branch: ws.work_branch.clone(),
        feature_branch: ws.feature_branch.clone(),
        start_commit: ws.start_commit.clone(),
    };
    let written = serde_json::to_string(&state)
        .map_err(|e| e.to_string())
        .and_then(|json| std::fs::write(&repo.state_file, json).map_err(|e| e.to_string()));
    if let Err(error) = written {
        return WorkspaceReport {
            message: Some(format!(
                "cannot write {}: {error}",
                repo.state_file.display()
            )),
            ..WorkspaceReport::new(WorkspaceOutcome::Failed)
        };
    }
    WorkspaceReport {
        work_branch: Some(ws.work_branch),
        feature_head: Some(ws.start_commit),
        message: Some(format!(
            "cloned {} into {}",
            ws.feature_branch,
            repo.workspace.display()
        )),
        ..WorkspaceReport::new(WorkspaceOutcome::NotCommitted)
    }
}

async fn finish(args: &FinishArgs) -> WorkspaceReport {
    let repo = &args.repo;
    let result = match wait_for_result(args).await {
        Ok(result) => result,
        Err(reason) => {
            return WorkspaceReport {
                message: Some(format!("{reason}: nothing committed")),
                ..WorkspaceReport::new(WorkspaceOutcome::NotCommitted)
            };
        }
    };
    let kind = if args.verifier {
        AttemptKind::Verify
    } else {
        AttemptKind::Work
    };
    if !finish_commits(kind, &result) {
        return WorkspaceReport {
            message: Some(
                "no done verdict: nothing committed (the next attempt starts from a fresh clone)"
                    .to_owned(),
            ),
            ..WorkspaceReport::new(WorkspaceOutcome::NotCommitted)
        };
    }
    let heartbeat = keep_heartbeat(repo.heartbeat_file.clone());
    let report = commit_and_integrate(repo, args.mode, kind).await;
    heartbeat.abort();
    report
}

/// Commits the attempt's work (a verifier's: restores the worker's pushed commit, its own
/// leftovers dropped) and pushes it as `mode` says.
async fn commit_and_integrate(
    repo: &RepoArgs,
    mode: FinishMode,
    kind: AttemptKind,
) -> WorkspaceReport {
    let outcome = async {
        let state: PreparedState = read_state(&repo.state_file)?;
        let remote = remote_repo(repo)?;
        let ws = AttemptWorkspace {
            dir: repo.workspace.clone(),
            attempt: AttemptRef::new(&repo.feature, &repo.task, repo.attempt),
            work_branch: state.work_branch,
            feature_branch: state.feature_branch,
            start_commit: state.start_commit,
        };
        let committed = match kind {
            AttemptKind::Work => remote.commit(&ws).await?,
            AttemptKind::Verify => remote.restore_pushed_work(&ws).await?,
        };
        let commit = match committed {
            CommitOutcome::Unchanged if mode == FinishMode::PushWorkBranch => {
                let commit = remote.commit_no_change(&ws).await?;
                let branch = remote.push_work_branch(&ws).await?;
                return Ok(WorkspaceReport {
                    commit: Some(commit),
                    work_branch: Some(branch.clone()),
                    message: Some(format!(
                        "done, and the agent left the workspace unchanged: pushed an empty \
                         commit to {branch} for verification"
                    )),
                    ..WorkspaceReport::new(WorkspaceOutcome::PushedWorkBranch)
                });
            }
            CommitOutcome::Unchanged => {
                return Ok(WorkspaceReport {
                    work_branch: Some(ws.work_branch.clone()),
                    feature_head: Some(ws.start_commit.clone()),
                    message: Some(
                        match kind {
                            AttemptKind::Work => {
                                "done, and the agent left the workspace unchanged: nothing to commit"
                            }
                            AttemptKind::Verify => {
                                "verified, and the work changed nothing: nothing to integrate"
                            }
                        }
                        .to_owned(),
                    ),
                    ..WorkspaceReport::new(WorkspaceOutcome::Unchanged)
                });
            }
            CommitOutcome::Committed { commit } => commit,
        };
        if mode == FinishMode::PushWorkBranch {
            let branch = remote.push_work_branch(&ws).await?;
            return Ok(WorkspaceReport {
                commit: Some(commit),
                work_branch: Some(branch.clone()),
                message: Some(format!("pushed the work to {branch} for verification")),
                ..WorkspaceReport::new(WorkspaceOutcome::PushedWorkBranch)
            });
        }
        let outcome = remote.integrate(&ws).await?;
        Ok(report::integration(&ws, Some(commit), outcome))
    }
    .await;
    outcome.unwrap_or_else(|error| failure(repo, &error))
}

/// Waits for the runner's result; gives up when the runner's heartbeat goes stale.
async fn wait_for_result(args: &FinishArgs) -> Result<AttemptResult, String> {
    let started = SystemTime::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&args.result_file)
            && !text.trim().is_empty()
        {
            return serde_json::from_str(text.trim())
                .map_err(|error| format!("the runner's result is unreadable: {error}"));
        }
        let last_beat = args
            .runner_heartbeat_file
            .as_deref()
            .and_then(|path| std::fs::metadata(path).ok())
            .and_then(|meta| meta.modified().ok())
            .unwrap_or(started)
            .max(started);
        let age = SystemTime::now()
            .duration_since(last_beat)
            .unwrap_or_default();
        if age > args.heartbeat_max_age {
            return Err(format!(
                "the agent ended without a result (no heartbeat for {}s)",
                age.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn read_state(path: &Path) -> Result<PreparedState, WorkspaceError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkspaceError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|error| WorkspaceError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
    })
}

fn remote_repo(repo: &RepoArgs) -> Result<RemoteRepo, WorkspaceError> {
    let mut settings = RepoSettings::new(&repo.url, &repo.base_ref);
    settings.feature_branch = repo.feature_branch.clone();
    if let (Some(name), Some(email)) = (&repo.author_name, &repo.author_email) {
        settings.author = CommitAuthor {
            name: name.clone(),
            email: email.clone(),
        };
    }
    settings.credentials = match &repo.credentials_dir {
        Some(dir) => read_credentials(dir)?,
        None => None,
    };
    let options = GitOptions {
        command_timeout: repo.git_timeout,
        ..GitOptions::default()
    };
    RemoteRepo::new(settings, &repo.feature, options)
}

/// The credentials in `dir`: a username and token, or an SSH key and known_hosts.
pub(crate) fn read_credentials(dir: &Path) -> Result<Option<Credentials>, WorkspaceError> {
    let read = |name: &str| -> Result<Option<String>, WorkspaceError> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(WorkspaceError::Io { path, source }),
        }
    };
    if let Some(token) = read(credential_file::TOKEN)? {
        let username = read(credential_file::USERNAME)?.unwrap_or_default();
        return Ok(Some(Credentials::Https { username, token }));
    }
    if let Some(private_key) = read(credential_file::SSH_KEY)? {
        let known_hosts = read(credential_file::KNOWN_HOSTS)?.unwrap_or_default();
        return Ok(Some(Credentials::Ssh {
            private_key,
            known_hosts,
        }));
    }
    Ok(None)
}

/// The report of a failed git step: misconfigured when only the user can fix it.
fn failure(repo: &RepoArgs, error: &WorkspaceError) -> WorkspaceReport {
    let message = match (&repo.credentials_secret, error) {
        (Some(secret), WorkspaceError::AuthenticationFailed { .. }) => {
            format!("credentials Secret `{secret}`: {error}")
        }
        _ => error.to_string(),
    };
    report::failure(error, message)
}

fn touch(path: Option<&Path>) {
    if let Some(path) = path {
        let _ = std::fs::write(path, b"");
    }
}

/// Touches the heartbeat every 5 s while a git step works.
fn keep_heartbeat(path: Option<PathBuf>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            touch(path.as_deref());
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    })
}
