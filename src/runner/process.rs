//! The agent process: spawned in its own process group so the whole tree can be killed.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::error::RunnerError;

/// A running agent and its process group.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    child: Child,
    group: Option<Pid>,
    exit: Option<ExitStatus>,
}

/// The agent's standard streams, taken once after spawning.
pub(crate) struct AgentPipes {
    /// The agent's stdin (ACP requests).
    pub stdin: ChildStdin,
    /// The agent's stdout (ACP responses and notifications).
    pub stdout: ChildStdout,
    /// The agent's stderr (diagnostics, scanned for crash patterns).
    pub stderr: ChildStderr,
}

/// Starts `command` as the leader of a new process group, killed when dropped; the child
/// and its group.
pub(crate) fn spawn_group_leader(command: &mut Command) -> std::io::Result<(Child, Option<Pid>)> {
    let child = command.process_group(0).kill_on_drop(true).spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    Ok((child, group))
}

/// Kills a whole process group at once; ESRCH (the group is gone already, as after a clean
/// exit) is no error.
pub(crate) fn kill_group(group: Option<Pid>) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

impl AgentProcess {
    /// Starts `command` in `cwd` with the variables `removed` taken out of its environment
    /// and `env` added, in a new process group.
    pub(crate) fn spawn(
        command: &[String],
        cwd: &std::path::Path,
        env: &[(&str, &str)],
        removed: &[String],
    ) -> Result<(Self, AgentPipes), RunnerError> {
        let (program, args) = command.split_first().ok_or(RunnerError::NoAgentCommand)?;
        let mut agent = Command::new(program);
        for variable in removed {
            agent.env_remove(variable);
        }
        let (mut child, group) = spawn_group_leader(
            agent
                .args(args)
                .current_dir(cwd)
                .envs(env.iter().copied())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .map_err(|source| RunnerError::Spawn {
            command: program.clone(),
            source,
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(RunnerError::Spawn {
                command: program.clone(),
                source: std::io::Error::other("the agent's standard streams are missing"),
            });
        };
        Ok((
            Self {
                child,
                group,
                exit: None,
            },
            AgentPipes {
                stdin,
                stdout,
                stderr,
            },
        ))
    }

    /// The agent's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.group.map(|pid| pid.as_raw().unsigned_abs())
    }

    /// Kills the agent's whole process group at once.
    pub(crate) fn kill_group(&self) {
        kill_group(self.group);
    }

    /// Waits for the agent to exit (cancel-safe; remembers the status).
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.exit = Some(status);
        Ok(status)
    }

    /// Whether [`wait`](Self::wait) has seen the agent exit.
    pub(crate) fn has_exited(&self) -> bool {
        self.exit.is_some()
    }

    /// Gives the agent `grace` to exit by itself (its stdin is closed by now), kills its
    /// process group if it does not, and makes sure no process of the group is left.
    pub(crate) async fn shut_down(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exit.is_none() && tokio::time::timeout(grace, self.wait()).await.is_err() {
            self.kill_group();
        }
        let status = self.wait().await.ok();
        self.kill_group();
        status
    }
}

/// Makes this process the reaper of its orphaned descendants (Linux), so a daemon the agent
/// forks out of its process group is re-parented here and [`kill_adopted`] finds it.
#[cfg(target_os = "linux")]
pub(crate) fn adopt_orphans() -> nix::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Kills this process's remaining children (daemons the agent left, adopted through
/// [`adopt_orphans`]) and theirs, until none is left; their pids. Only for a process whose
/// every child is the agent's: `ralph runner`, once the attempt ended.
pub(crate) fn kill_adopted() -> Vec<u32> {
    let mut killed = Vec::new();
    for _ in 0..ADOPTED_SWEEPS {
        let children: Vec<u32> = children_of(std::process::id())
            .into_iter()
            .filter(|pid| !killed.contains(pid))
            .collect();
        if children.is_empty() {
            break;
        }
        for pid in &children {
            if let Ok(pid) = i32::try_from(*pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        killed.extend(children);
        std::thread::sleep(Duration::from_millis(20));
    }
    killed
}

/// Sweeps of [`kill_adopted`]: a killed daemon's own children are adopted next.
const ADOPTED_SWEEPS: usize = 10;

/// The live (not zombie) processes whose parent is `parent`, from /proc.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = fields.next();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            state != Some("Z") && ppid == Some(parent)
        })
        .collect()
}

/// An exit status as event-log fields.
pub(crate) fn exit_fields(status: ExitStatus) -> serde_json::Value {
    serde_json::json!({"code": status.code(), "signal": status.signal()})
}
