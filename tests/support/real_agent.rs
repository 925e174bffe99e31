//! Running `ralph runner` on a real third-party agent (installed by `scripts/install-agents`)
//! in a throwaway directory, and reading how it ended. Shared by the real-agent test crates.
//!
//! ```ignore
//! let attempt = Attempt::new("t-1");
//! let launch = fake.codex_acp(&attempt.home(), CodexApproval::Never)?;
//! let ended = attempt.run(&launch);
//! ended.assert_outcome(OutcomeClass::Finished);
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ralph::engine::attempt::{AttemptResult, OutcomeClass, StopReason};
use tempfile::TempDir;

/// Longest a runner may take before the test gives up on it (a safety net, not a measurement).
pub const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// Longest a test waits for the model request to start hanging.
pub const HANG_DEADLINE: Duration = Duration::from_secs(60);

/// The idle timeout of the idle-hang tests. It counts from spawn, and with 7 builds on 2 cores
/// (load average 18) gemini-cli took more than 10 s to answer `initialize`.
pub const SHORT_IDLE_TIMEOUT: &str = "20s";

/// `ralph runner` exit codes (docs/runner.md).
pub const EXIT_FINISHED: i32 = 0;
pub const EXIT_CRASHED: i32 = 3;
pub const EXIT_EXHAUSTED: i32 = 4;
pub const EXIT_CANCELLED: i32 = 5;
pub const EXIT_MISCONFIGURED: i32 = 6;

/// How to start one agent: program, arguments and environment (on top of the test's, minus
/// variables with the removed prefixes, so a developer's real credentials never reach it).
#[derive(Clone, Debug, Default)]
pub struct AgentLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub env_removed_prefixes: Vec<String>,
}

impl AgentLaunch {
    /// Sets the agent's environment on `command` (which passes it on to the agent).
    pub fn configure(&self, command: &mut Command) {
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if self
                .env_removed_prefixes
                .iter()
                .any(|prefix| name.starts_with(prefix.as_str()))
            {
                command.env_remove(name.as_ref());
            }
        }
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
    }
}

impl AgentLaunch {
    /// The agent command as one string for `ralph run --agent` (split like a shell would).
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.to_string_lossy().into_owned())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Runs `ralph run MANIFEST --agent AGENT --json` to its end (one-minute idle timeout).
pub fn ralph_run(manifest: &Path, agent: &AgentLaunch) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
    command
        .arg("run")
        .arg(manifest)
        .arg("--agent")
        .arg(agent.command_line())
        .args(["--json", "--idle-timeout", "60s", "--total-timeout", "180s"])
        .stdin(Stdio::null());
    agent.configure(&mut command);
    command.output().expect("start `ralph run`")
}

/// The executable `name` under tests/agents/node_modules/.bin, or an error saying to run
/// `scripts/install-agents`.
pub fn installed_agent_bin(name: &str) -> Result<PathBuf, String> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agents/node_modules/.bin")
        .join(name);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{name} is not installed ({} is missing): run scripts/install-agents",
            bin.display()
        ))
    }
}

/// The prompt ralph gives an agent for task `task` (short, with the sigil rule).
pub fn task_prompt(task: &str) -> String {
    format!(
        "You are working on one task of a feature.\n\
         Your task ID is: {task}\n\
         End your final answer with <task-done>{task}</task-done> when the task is done, \
         or <task-failed>{task}</task-failed> when you cannot do it, as its very last line.\n"
    )
}

/// One attempt's files: workspace, throwaway home, prompt, result and logs.
pub struct Attempt {
    task: String,
    dir: TempDir,
    runner_args: Vec<String>,
    idle_timeout: String,
    grace: String,
}

impl Attempt {
    /// A fresh directory with `workspace/`, `home/` and the prompt for `task`.
    pub fn new(task: &str) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        for sub in ["workspace", "home"] {
            std::fs::create_dir(dir.path().join(sub)).expect("create attempt directories");
        }
        std::fs::write(dir.path().join("prompt.md"), task_prompt(task))
            .expect("write the prompt file");
        Self {
            task: task.to_owned(),
            dir,
            runner_args: Vec::new(),
            idle_timeout: "60s".to_owned(),
            grace: "5s".to_owned(),
        }
    }

    /// Adds options to the runner's command line.
    pub fn with_runner_args(mut self, args: &[&str]) -> Self {
        self.runner_args
            .extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// Sets the runner's idle timeout and the grace between `session/cancel` and the kill.
    pub fn with_idle_timeout(mut self, idle_timeout: &str, grace: &str) -> Self {
        idle_timeout.clone_into(&mut self.idle_timeout);
        grace.clone_into(&mut self.grace);
        self
    }

    /// The task the attempt is for.
    pub fn task(&self) -> &str {
        &self.task
    }

    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn prompt(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prompt.md")).expect("read the prompt file")
    }

    /// Starts `ralph runner` on `agent`.
    pub fn spawn(&self, agent: &AgentLaunch) -> Child {
        let path = |name: &str| self.dir.path().join(name);
        let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
        command
            .arg("runner")
            .args(["--task", &self.task])
            .args(["--attempt", &format!("{}-a1", self.task)])
            .arg("--prompt-file")
            .arg(path("prompt.md"))
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--result-file")
            .arg(path("result.json"))
            .args(["--idle-timeout", &self.idle_timeout])
            .args(["--total-timeout", "120s"])
            .args(["--grace", &self.grace])
            .args(&self.runner_args)
            .arg("--");
        if let Ok(tracer) = std::env::var("RALPH_TEST_AGENT_TRACER") {
            command.arg(tracer);
        }
        command
            .arg(&agent.program)
            .args(&agent.args)
            .current_dir(self.workspace())
            .stdin(Stdio::null())
            .stdout(log_file(&path("runner.stdout")))
            .stderr(log_file(&path("runner.stderr")));
        agent.configure(&mut command);
        command.spawn().expect("start `ralph runner`")
    }

    /// Runs the runner to its end.
    pub fn run(&self, agent: &AgentLaunch) -> Ended {
        let child = self.spawn(agent);
        self.wait(child)
    }

    /// Waits for the runner (killing it past [`RUN_DEADLINE`]) and reads its result file.
    pub fn wait(&self, mut child: Child) -> Ended {
        let deadline = Instant::now() + RUN_DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll `ralph runner`") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`ralph runner` still running after {RUN_DEADLINE:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text =
            std::fs::read_to_string(self.dir.path().join("result.json")).unwrap_or_else(|error| {
                panic!("no result file ({error}); runner {status}\n{}", self.logs())
            });
        let result = serde_json::from_str(&text).unwrap_or_else(|error| {
            panic!(
                "result file is not an AttemptResult ({error}):\n{text}\n{}",
                self.logs()
            )
        });
        let events = std::fs::read_to_string(self.dir.path().join("runner.stdout"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        Ended {
            status,
            result,
            document: text,
            events,
            logs: self.logs(),
        }
    }

    pub fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- runner stdout ---\n{}\n--- runner stderr ---\n{}",
            read("runner.stdout"),
            read("runner.stderr")
        )
    }
}

fn log_file(path: &Path) -> File {
    File::create(path).expect("create a log file")
}

/// Sends SIGKILL to every child of the runner `child` (the agent); returns how many.
pub fn kill_agent_of(child: &Child) -> usize {
    let agents = ralph::runner::children_of(child.id());
    for pid in &agents {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(*pid).expect("pid fits i32"));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    agents.len()
}

/// How a runner ended.
pub struct Ended {
    pub status: ExitStatus,
    pub result: AttemptResult,
    /// The result file as written.
    pub document: String,
    /// The runner's event lines (`{"event": …}`) from its stdout.
    pub events: Vec<serde_json::Value>,
    pub logs: String,
}

impl Ended {
    pub fn assert_exit(&self, code: i32) {
        assert_eq!(
            self.status.code(),
            Some(code),
            "runner exit status; result: {}\n{}",
            self.document,
            self.logs
        );
    }

    pub fn assert_outcome(&self, outcome: OutcomeClass) {
        assert_eq!(
            self.result.outcome, outcome,
            "outcome; result: {}\n{}",
            self.document, self.logs
        );
    }

    pub fn assert_stop_reason(&self, stop_reason: Option<StopReason>) {
        assert_eq!(
            self.result.stop_reason, stop_reason,
            "stop reason; result: {}\n{}",
            self.document, self.logs
        );
    }

    /// Asserts a finished attempt (exit status and outcome) that stopped for `stop_reason`
    /// with the sigils `done` and `failed`.
    pub fn assert_finished(
        &self,
        stop_reason: StopReason,
        done: Option<&str>,
        failed: Option<&str>,
    ) {
        self.assert_exit(EXIT_FINISHED);
        self.assert_outcome(OutcomeClass::Finished);
        self.assert_stop_reason(Some(stop_reason));
        self.assert_sigils(done, failed);
    }

    /// Asserts a crashed attempt: outcome and exit status.
    pub fn assert_crashed(&self) {
        self.assert_outcome(OutcomeClass::Crashed);
        self.assert_exit(EXIT_CRASHED);
    }

    /// Asserts the sigils: the task-done and task-failed IDs found.
    pub fn assert_sigils(&self, done: Option<&str>, failed: Option<&str>) {
        assert_eq!(
            (
                self.result.sigils.task_done.as_deref(),
                self.result.sigils.task_failed.as_deref()
            ),
            (done, failed),
            "sigils (done, failed); result: {}\n{}",
            self.document,
            self.logs
        );
    }

    /// What the result says is misconfigured (`""` when nothing is).
    pub fn misconfiguration_problem(&self) -> String {
        self.result
            .misconfiguration
            .as_ref()
            .map(|m| m.problem.clone())
            .unwrap_or_default()
    }

    /// Asserts that the agent reported tokens both ways.
    pub fn assert_usage_reported(&self) {
        assert!(
            self.result.usage.tokens.input > 0 && self.result.usage.tokens.output > 0,
            "usage tokens; result: {}\n{}",
            self.document,
            self.logs
        );
    }

    /// The runner's events named `name` (e.g. `permission`).
    pub fn events_named(&self, name: &str) -> Vec<&serde_json::Value> {
        self.events
            .iter()
            .filter(|event| event.get("event").and_then(serde_json::Value::as_str) == Some(name))
            .collect()
    }

    /// The `allowed` flags of the permission requests the runner answered, in order.
    pub fn permission_decisions(&self) -> Vec<bool> {
        self.events_named("permission")
            .iter()
            .filter_map(|event| event.get("allowed").and_then(serde_json::Value::as_bool))
            .collect()
    }

    /// Fails with the result, the runner's logs and `extra` (e.g. the model traffic).
    pub fn explain(&self, extra: &str) -> String {
        format!("result: {}\n{}\n{extra}", self.document, self.logs)
    }
}
