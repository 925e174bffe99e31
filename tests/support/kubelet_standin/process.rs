//! Starting and stopping a prepared container's process.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::container::Prepared;

/// How much of the log stands in for a missing message under `FallbackToLogsOnError`.
const LOG_TAIL_BYTES: usize = 2048;

/// Starts the process in its own process group, stdout and stderr into its log file.
pub fn spawn(prepared: &Prepared, extra_env: &[(String, String)]) -> std::io::Result<Child> {
    let log = std::fs::File::create(&prepared.log)?;
    let stderr = log.try_clone()?;
    let (program, args) = prepared.argv.split_first().ok_or_else(|| {
        std::io::Error::other(format!("container {:?} has no command", prepared.name))
    })?;
    Command::new(program)
        .args(args)
        .envs(prepared.env.iter().cloned())
        .envs(extra_env.iter().cloned())
        .current_dir(&prepared.cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

fn pid_of(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}

/// Stops the process as a kubelet does: SIGTERM, then after `grace` SIGKILL to its group.
pub async fn stop(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    if let Some(pid) = pid_of(child) {
        // The process may have exited on its own meanwhile: nothing to signal then.
        let _ = kill(pid, Signal::SIGTERM);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            kill_group(child);
            child.wait().await
        }
    }
}

/// SIGKILLs the process's group at once.
pub fn kill_group(child: &Child) {
    if let Some(pid) = pid_of(child) {
        // Already gone is fine.
        let _ = killpg(pid, Signal::SIGKILL);
    }
}

/// The exit code a container runtime reports: the code, or 128 + the signal number.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(Signal::SIGKILL as i32))
}

/// The termination message: the termination-log file, or under `FallbackToLogsOnError`
/// and a failure with an empty file, the tail of the log.
pub fn termination_message(prepared: &Prepared, exit_code: i32) -> Option<String> {
    let written = std::fs::read_to_string(&prepared.termination_log).unwrap_or_default();
    if !written.trim().is_empty() {
        return Some(written);
    }
    if !(prepared.fallback_to_logs && exit_code != 0) {
        return None;
    }
    let log = std::fs::read(&prepared.log).unwrap_or_default();
    let tail = &log[log.len().saturating_sub(LOG_TAIL_BYTES)..];
    Some(String::from_utf8_lossy(tail).into_owned()).filter(|t| !t.trim().is_empty())
}
