//! `verify.command`: a deterministic check the runner runs in the workspace after the agent
//! reported the task done (`--verify-command`). It runs with `sh -c` in its own process
//! group, stdout and stderr merged, under a time limit; only the end of its output is kept.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use serde_json::json;

use super::config::RunnerConfig;
use super::process::{kill_group, spawn_group_leader};
use crate::engine::attempt::{AttemptResult, OutcomeClass, StopReason};
use crate::engine::verification::CheckReport;

/// How often the heartbeat file is written while the check runs.
const CHECK_HEARTBEAT: Duration = Duration::from_secs(5);

/// The command to run and its limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckCommand {
    /// Shell text, run with `sh -c` in the workspace.
    pub command: String,
    /// Killed (with its process group) after this long.
    pub timeout: Duration,
    /// Bytes of the end of its output kept in the report.
    pub tail_bytes: usize,
}

/// Runs the configured check when the agent's turn ended with a done verdict for its task,
/// and records it in `result` (`check`) and the event log.
pub(crate) async fn after_done_verdict(config: &RunnerConfig, result: &mut AttemptResult) {
    let Some(check) = &config.check else {
        return;
    };
    let task = Some(config.task.as_str());
    let done = result.outcome == OutcomeClass::Finished
        && result.stop_reason == Some(StopReason::EndTurn)
        && result.sigils.task_done.as_deref() == task
        && result.sigils.task_failed.as_deref() != task;
    if !done {
        return;
    }
    config
        .events
        .emit("check_started", json!({"command": check.command}));
    let workspace = config.workspace.display().to_string();
    let mut env = vec![
        ("RALPH_TASK", config.task.as_str()),
        ("RALPH_WORKSPACE", workspace.as_str()),
    ];
    if let Some(attempt) = &config.attempt {
        env.push(("RALPH_ATTEMPT", attempt.as_str()));
    }
    // The claim sidecar renews while the heartbeat is fresh: the check keeps it beating.
    let activity = super::activity::Activity::new(config.heartbeat_file.clone());
    let checking = run_check(check, &config.workspace, &env);
    tokio::pin!(checking);
    let mut beat = tokio::time::interval(CHECK_HEARTBEAT);
    let report = loop {
        tokio::select! {
            report = &mut checking => break report,
            _ = beat.tick() => activity.touch(),
        }
    };
    config.events.emit(
        "check",
        json!({"command": report.command, "exitCode": report.exit_code, "timedOut": report.timed_out, "error": report.error, "passed": report.passed()}),
    );
    result.check = Some(report);
}

/// Runs `check` in `workspace` with `env` added, and reports how it ended.
pub(crate) async fn run_check(
    check: &CheckCommand,
    workspace: &Path,
    env: &[(&str, &str)],
) -> CheckReport {
    let mut report = CheckReport {
        command: check.command.clone(),
        ..CheckReport::default()
    };
    // `exec 2>&1` merges stderr into stdout inside the shell, so the tail is in order.
    let script = format!("exec 2>&1\n{}", check.command);
    let spawned = spawn_group_leader(
        Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(workspace)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let (mut child, group) = match spawned {
        Ok(spawned) => spawned,
        Err(error) => {
            report.error = Some(format!("cannot start `sh -c`: {error}"));
            return report;
        }
    };
    let mut tail = Tail::new(check.tail_bytes);
    let stdout = child.stdout.take();
    let ran = tokio::time::timeout(check.timeout, async {
        if let Some(mut stdout) = stdout {
            let mut buffer = vec![0_u8; 16 * 1024];
            loop {
                match stdout.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => tail.push(&buffer[..n]),
                }
            }
        }
        child.wait().await
    })
    .await;
    match ran {
        Ok(Ok(status)) => {
            report.exit_code = status.code();
            if let (None, Some(signal)) = (status.code(), status.signal()) {
                report.error = Some(format!("killed by signal {signal}"));
            }
        }
        Ok(Err(error)) => report.error = Some(format!("cannot wait for the command: {error}")),
        Err(_) => {
            report.timed_out = true;
            kill_group(group);
            let _ = child.wait().await;
        }
    }
    report.output_tail = tail.into_text();
    report
}

/// The last `max` bytes of a stream.
struct Tail {
    max: usize,
    bytes: Vec<u8>,
    cut: bool,
}

impl Tail {
    fn new(max: usize) -> Self {
        Self {
            max,
            bytes: Vec::new(),
            cut: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.max.saturating_mul(2).max(4096) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.bytes.len() > self.max {
            let excess = self.bytes.len() - self.max;
            self.bytes.drain(..excess);
            self.cut = true;
        }
    }

    /// The kept bytes as text (a multi-byte character cut at the start is dropped).
    fn into_text(mut self) -> String {
        self.trim();
        let text = String::from_utf8_lossy(&self.bytes);
        let text = if self.cut {
            text.trim_start_matches('\u{fffd}')
        } else {
            &text
        };
        let mut text = text.to_owned();
        while text.len() > self.max {
            // Lossy replacement characters can make the text longer than the bytes.
            let mut cut = text.len() - self.max;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            text.drain(..cut);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str) -> CheckCommand {
        CheckCommand {
            command: command.to_owned(),
            timeout: Duration::from_secs(30),
            tail_bytes: 64,
        }
    }

    async fn run(command: CheckCommand) -> CheckReport {
        let dir = tempfile::tempdir().expect("temp dir");
        run_check(&command, dir.path(), &[]).await
    }

    #[tokio::test]
    async fn a_command_that_exits_zero_passes() {
        let report = run(check("true")).await;
        assert!(report.passed(), "{report:?}");
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_exit_code_and_output() {
        let report = run(check("echo out; echo err >&2; exit 3")).await;
        assert_eq!(report.exit_code, Some(3));
        assert_eq!(report.output_tail, "out\nerr\n");
        assert!(!report.passed());
    }

    #[tokio::test]
    async fn only_the_end_of_a_long_output_is_kept() {
        let report = run(check("seq 1 10000")).await;
        assert!(report.output_tail.len() <= 64);
        assert!(
            report.output_tail.ends_with("9999\n10000\n"),
            "{}",
            report.output_tail
        );
    }

    #[tokio::test]
    async fn a_command_past_its_time_limit_is_killed_with_its_children() {
        let report = run(CheckCommand {
            timeout: Duration::from_millis(300),
            ..check("echo started; sleep 30 & wait")
        })
        .await;
        assert!(report.timed_out);
        assert!(!report.passed());
        assert_eq!(report.output_tail, "started\n");
    }

    #[tokio::test]
    async fn the_command_runs_in_the_workspace() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("marker"), "here").expect("write marker");
        let report = run_check(&check("cat marker"), dir.path(), &[]).await;
        assert_eq!(report.output_tail, "here");
    }
}
