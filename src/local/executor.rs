//! Runs one attempt as a child `ralph runner` process: spawns it with the attempt's files,
//! relays its stdout JSON lines as activity, and reports how it ended with its result file.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::attempt::AttemptResult;
use crate::engine::workspace::WorkspaceReport;
use crate::local::activity;
use crate::local::process::ProcessId;
use crate::local::worktree::AttemptWorktree;

/// Errors starting an attempt.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecutorError {
    /// The attempt directory or prompt file could not be written.
    #[error("cannot prepare {path} for attempt {attempt}: {source}")]
    Prepare {
        /// The attempt.
        attempt: String,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The runner process could not be started.
    #[error("cannot start the runner {program} for attempt {attempt}: {source}")]
    Spawn {
        /// The attempt.
        attempt: String,
        /// The program.
        program: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// How every attempt's runner is invoked.
#[derive(Clone, Debug)]
pub struct RunnerCommand {
    /// The `ralph` executable providing `ralph runner`.
    pub program: PathBuf,
    /// The agent command (program and arguments).
    pub agent: Vec<String>,
    /// The agent's working directory.
    pub workspace: PathBuf,
    /// Extra `ralph runner` options (timeouts, patterns), passed through verbatim.
    pub runner_args: Vec<String>,
    /// Variables set for the runner, which its agent inherits (the agent's `env`).
    pub env: Vec<(String, String)>,
}

/// The files kept for one attempt under the state directory.
#[derive(Clone, Debug)]
pub(crate) struct AttemptFiles {
    /// The attempt's directory.
    pub dir: PathBuf,
    /// The prompt given to the agent.
    pub prompt: PathBuf,
    /// The runner's result document.
    pub result: PathBuf,
    /// Touched by the runner on ACP traffic.
    pub heartbeat: PathBuf,
    /// The runner's stdout (one JSON line per session update).
    pub log: PathBuf,
    /// The runner's stderr (agent stderr relayed).
    pub stderr: PathBuf,
}

impl AttemptFiles {
    /// The files of an attempt kept in `dir`.
    pub(crate) fn in_dir(dir: PathBuf) -> AttemptFiles {
        AttemptFiles {
            prompt: dir.join("prompt.md"),
            result: dir.join("result.json"),
            heartbeat: dir.join("heartbeat"),
            log: dir.join("runner.jsonl"),
            stderr: dir.join("runner.stderr"),
            dir,
        }
    }
}

/// What an attempt's watcher reports to the run loop.
#[derive(Clone, Debug)]
pub enum Report {
    /// The runner process started.
    Spawned(ProcessId),
    /// The agent did something (a short description of a runner stdout line).
    Activity(String),
    /// The runner exited.
    Ended(Box<Ended>),
}

/// How a runner process ended.
#[derive(Clone, Debug)]
pub struct Ended {
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The runner's result document, or why there is none.
    pub result: Result<AttemptResult, String>,
    /// What the git steps did with the attempt's worktree (a run in a git repository).
    pub workspace: Option<WorkspaceReport>,
}

/// A report tagged with the attempt it concerns.
#[derive(Clone, Debug)]
pub struct AttemptReport {
    /// The task.
    pub task: String,
    /// The attempt ID.
    pub attempt: String,
    /// What happened.
    pub report: Report,
}

fn prepare(attempt: &str, files: &AttemptFiles, prompt: &str) -> Result<(), ExecutorError> {
    let fail = |path: &Path| {
        let attempt = attempt.to_string();
        let path = path.to_path_buf();
        move |source| ExecutorError::Prepare {
            attempt,
            path,
            source,
        }
    };
    std::fs::create_dir_all(&files.dir).map_err(fail(&files.dir))?;
    // A stale result from an earlier run of the same attempt ID must not be ingested.
    match std::fs::remove_file(&files.result) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(fail(&files.result)(error));
        }
        _ => {}
    }
    std::fs::write(&files.prompt, prompt).map_err(fail(&files.prompt))
}

/// The `ralph runner` argument list for one attempt.
pub(crate) fn runner_args(
    command: &RunnerCommand,
    task: &str,
    attempt: &str,
    files: &AttemptFiles,
) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        "runner".to_string(),
        "--task".to_string(),
        task.to_string(),
        "--attempt".to_string(),
        attempt.to_string(),
        "--prompt-file".to_string(),
        path(&files.prompt),
        "--workspace".to_string(),
        path(&command.workspace),
        "--result-file".to_string(),
        path(&files.result),
        "--heartbeat-file".to_string(),
        path(&files.heartbeat),
        "--die-with-parent".to_string(),
    ];
    args.extend(command.runner_args.iter().cloned());
    args.push("--".to_string());
    args.extend(command.agent.iter().cloned());
    args
}

/// One attempt to start: whose it is, where its files go, what the agent is told and
/// where its reports are sent.
pub(crate) struct Launch<'a> {
    /// The task.
    pub task: &'a str,
    /// The attempt ID.
    pub attempt: &'a str,
    /// The attempt's files.
    pub files: AttemptFiles,
    /// The prompt given to the agent.
    pub prompt: &'a str,
    /// Where the attempt's [`Report`]s go.
    pub reports: UnboundedSender<AttemptReport>,
}

/// Writes the prompt, starts the runner and watches it on a background task that sends
/// [`Report`]s to `launch.reports` (the last one is always [`Report::Ended`]).
///
/// Without a `worktree` the runner starts in the command's workspace before this returns,
/// and its pid is returned. With one, the background task first prepares the attempt's own
/// git worktree and starts the runner in it, and after the runner's end commits and
/// integrates a done verdict's work; the [`Report::Ended`] carries what git did, and the
/// runner's pid comes only in [`Report::Spawned`].
pub(crate) fn start(
    command: &RunnerCommand,
    launch: Launch<'_>,
    worktree: Option<AttemptWorktree>,
) -> Result<Option<u32>, ExecutorError> {
    let Launch {
        task,
        attempt,
        files,
        prompt,
        reports,
    } = launch;
    prepare(attempt, &files, prompt)?;
    let send = sender(task, attempt, reports);
    let Some(worktree) = worktree else {
        let mut child = spawn(command, &command.workspace, task, attempt, &files)?;
        let pid = announce(&mut child, &send);
        tokio::spawn(async move {
            let (exit_code, result) = watch(child, &files, &send).await;
            send(ended(exit_code, result, None));
        });
        return Ok(Some(pid));
    };
    let (command, task, attempt) = (command.clone(), task.to_string(), attempt.to_string());
    tokio::spawn(async move {
        let ws = match worktree.prepare().await {
            Ok(ws) => ws,
            Err(error) => return send(ended(None, Err(error), None)),
        };
        let mut child = match spawn(&command, &ws.dir, &task, &attempt, &files) {
            Ok(child) => child,
            Err(error) => return send(ended(None, Err(error.to_string()), None)),
        };
        announce(&mut child, &send);
        let (exit_code, result) = watch(child, &files, &send).await;
        let workspace = worktree.finish(&ws, &result).await;
        send(ended(exit_code, result, Some(workspace)));
    });
    Ok(None)
}

/// Reports a started runner's pid and start time; its pid.
fn announce(child: &mut Child, send: &impl Fn(Report)) -> u32 {
    let process = ProcessId::of(child.id().unwrap_or_default());
    send(Report::Spawned(process));
    process.pid
}

fn ended(
    exit_code: Option<i32>,
    result: Result<AttemptResult, String>,
    workspace: Option<WorkspaceReport>,
) -> Report {
    Report::Ended(Box::new(Ended {
        exit_code,
        result,
        workspace,
    }))
}

/// Starts the runner of `attempt` with `workspace` as the agent's directory.
fn spawn(
    command: &RunnerCommand,
    workspace: &Path,
    task: &str,
    attempt: &str,
    files: &AttemptFiles,
) -> Result<Child, ExecutorError> {
    let stderr = std::fs::File::create(&files.stderr).map_err(|source| ExecutorError::Prepare {
        attempt: attempt.to_string(),
        path: files.stderr.clone(),
        source,
    })?;
    let command = RunnerCommand {
        workspace: workspace.to_path_buf(),
        ..command.clone()
    };
    Command::new(&command.program)
        .args(runner_args(&command, task, attempt, files))
        .current_dir(workspace)
        .envs(command.env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Its own process group: a terminal Ctrl+C reaches `ralph run` only, which then
        // cancels each attempt itself.
        .process_group(0)
        .spawn()
        .map_err(|source| ExecutorError::Spawn {
            attempt: attempt.to_string(),
            program: command.program.clone(),
            source,
        })
}

/// Sends an attempt's reports to the run loop.
fn sender(
    task: &str,
    attempt: &str,
    reports: UnboundedSender<AttemptReport>,
) -> impl Fn(Report) + Send + 'static {
    let task = task.to_string();
    let attempt = attempt.to_string();
    move |report: Report| {
        // The loop may have stopped listening (kill now); nothing left to tell then.
        let _ = reports.send(AttemptReport {
            task: task.clone(),
            attempt: attempt.clone(),
            report,
        });
    }
}

/// Relays the runner's activity until it exits; its exit code and result.
async fn watch(
    mut child: Child,
    files: &AttemptFiles,
    send: &impl Fn(Report),
) -> (Option<i32>, Result<AttemptResult, String>) {
    if let Some(stdout) = child.stdout.take() {
        relay(stdout, &files.log, send).await;
    }
    let exit_code = match child.wait().await {
        Ok(status) => status.code(),
        Err(_) => None,
    };
    let result = read_result(&files.result, exit_code, &files.stderr);
    (exit_code, result)
}

/// Copies the runner's stdout to the attempt's log line by line, each line flushed as it
/// arrives (a `ralph run` killed with SIGKILL loses nothing already relayed), and reports
/// what the agent does.
async fn relay(stdout: tokio::process::ChildStdout, log: &Path, send: &impl Fn(Report)) {
    let mut log = tokio::fs::File::create(log).await.ok();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(file) = log.as_mut() {
            let mut entry = line.clone().into_bytes();
            entry.push(b'\n');
            if file.write_all(&entry).await.is_err() || file.flush().await.is_err() {
                log = None;
            }
        }
        if let Some(text) = activity::describe(&line) {
            send(Report::Activity(text));
        }
    }
}

/// Reads the runner's result document; without one, says why (exit code, last stderr line).
pub(crate) fn read_result(
    path: &Path,
    exit_code: Option<i32>,
    stderr: &Path,
) -> Result<AttemptResult, String> {
    let exit = match exit_code {
        Some(code) => format!("runner exited with code {code}"),
        None => "runner ended without an exit code (killed by a signal, or left by an earlier run)"
            .to_string(),
    };
    let last_stderr = || {
        std::fs::read_to_string(stderr)
            .ok()
            .and_then(|text| {
                text.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_string)
            })
            .map(|line| format!(": {}", activity::truncate(&line, 200)))
            .unwrap_or_default()
    };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
            format!(
                "{exit}; its result file {} is invalid: {error}",
                path.display()
            )
        }),
        Err(_) => Err(format!("{exit} without a result{}", last_stderr())),
    }
}
