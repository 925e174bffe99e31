//! Running `ralph runner` on the scripted agent (`ralph agent script`) in a scratch
//! directory, and reading what it reported.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};

use ralph::engine::attempt::{AttemptResult, Misconfiguration, OutcomeClass};

/// The `ralph` binary under test.
pub fn ralph() -> &'static str {
    env!("CARGO_BIN_EXE_ralph")
}

/// A scratch directory with a workspace, a prompt and a script.
pub struct Scenario {
    pub dir: tempfile::TempDir,
    pub task: String,
    pub attempt: String,
    pub args: Vec<String>,
    /// The agent command; the scripted agent playing `script.yaml` when `None`.
    pub agent: Option<Vec<String>>,
    /// The workspace given to the runner, when not the scratch workspace.
    pub workspace_override: Option<PathBuf>,
    /// Environment variables set for the runner (and so the agent).
    pub env: Vec<(String, std::ffi::OsString)>,
}

/// What one runner invocation produced.
pub struct Run {
    pub status: ExitStatus,
    pub result: AttemptResult,
    pub result_json: String,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the attempt's outcome (the failure shows the result document).
    pub fn assert_outcome(&self, outcome: OutcomeClass) {
        assert_eq!(self.result.outcome, outcome, "{}", self.result_json);
    }

    /// Asserts the whole crash summary (the failure shows the result document).
    pub fn assert_crash(&self, crash: &str) {
        assert_eq!(
            self.result.crash.as_deref(),
            Some(crash),
            "{}",
            self.result_json
        );
    }

    /// Asserts that the crash summary begins with `start`.
    pub fn assert_crash_starts_with(&self, start: &str) {
        assert!(self.crash().starts_with(start), "{}", self.result_json);
    }

    /// Asserts that the crash summary mentions `part`.
    pub fn assert_crash_mentions(&self, part: &str) {
        assert!(self.crash().contains(part), "{}", self.result_json);
    }

    /// The misconfiguration reported; asserts that the attempt ended misconfigured.
    pub fn misconfiguration(&self) -> Misconfiguration {
        self.assert_outcome(OutcomeClass::Misconfigured);
        self.result
            .misconfiguration
            .clone()
            .unwrap_or_else(|| panic!("no misconfiguration in {}", self.result_json))
    }

    /// The crash summary ("" when there is none).
    pub fn crash(&self) -> &str {
        self.result.crash.as_deref().unwrap_or_default()
    }
}

impl Scenario {
    /// A scenario for `task`, attempt 1, playing `script` (YAML).
    pub fn new(task: &str, script: &str) -> Self {
        let dir = tempfile::tempdir().expect("scratch directory");
        std::fs::create_dir(dir.path().join("workspace")).expect("workspace");
        std::fs::write(
            dir.path().join("prompt.md"),
            "Work on the task; end with a sigil.",
        )
        .expect("prompt");
        std::fs::write(dir.path().join("script.yaml"), script).expect("script");
        Self {
            dir,
            task: task.to_string(),
            attempt: format!("{task}-a1"),
            args: Vec::new(),
            agent: None,
            workspace_override: None,
            env: Vec::new(),
        }
    }

    /// Runs this agent command instead of the scripted agent.
    pub fn agent(mut self, command: &[&str]) -> Self {
        self.agent = Some(command.iter().map(|word| word.to_string()).collect());
        self
    }

    /// Sets an environment variable of the runner (and so of the agent).
    pub fn env(mut self, name: &str, value: impl Into<std::ffi::OsString>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    /// The workspace directory given to the runner.
    pub fn workspace_dir(mut self, dir: &str) -> Self {
        self.workspace_override = Some(PathBuf::from(dir));
        self
    }

    /// Sets the attempt id.
    pub fn attempt(mut self, attempt: &str) -> Self {
        self.attempt = attempt.to_string();
        self
    }

    /// Adds runner flags.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
        self
    }

    /// The workspace directory.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    /// A path in the scratch directory (outside the workspace).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The runner's arguments (after the `ralph` binary).
    pub fn runner_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["runner".into()];
        for arg in ["--task", &self.task, "--attempt", &self.attempt] {
            args.push(arg.into());
        }
        args.push("--prompt-file".into());
        args.push(self.path("prompt.md").into());
        args.push("--workspace".into());
        args.push(
            self.workspace_override
                .clone()
                .unwrap_or_else(|| self.workspace())
                .into(),
        );
        args.push("--result-file".into());
        args.push(self.path("result.json").into());
        args.extend(self.args.iter().map(Into::into));
        args.push("--".into());
        match &self.agent {
            Some(command) => args.extend(command.iter().map(Into::into)),
            None => {
                args.push(ralph().into());
                args.push("agent".into());
                args.push("script".into());
                args.push(self.path("script.yaml").into());
            }
        }
        args
    }

    fn command(&self) -> Command {
        let mut command = Command::new(ralph());
        command
            .args(self.runner_args())
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Reads the result file the runner wrote.
    pub fn read_result(&self) -> Option<AttemptResult> {
        let json = std::fs::read_to_string(self.path("result.json")).ok()?;
        serde_json::from_str(&json).ok()
    }

    /// Runs the runner to its end.
    pub fn run(&self) -> Run {
        let output = self.command().output().expect("run `ralph runner`");
        self.finish(
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Starts the runner; returns it once an event line containing `marker` was logged.
    pub fn start_until(&self, marker: &str) -> (Child, Vec<String>) {
        let mut child = self.command().spawn().expect("start `ralph runner`");
        let stdout = child.stdout.take().expect("runner stdout");
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            let read = reader.read_line(&mut line).expect("read runner stdout");
            assert!(read > 0, "runner ended before logging {marker}: {lines:?}");
            let found = line.contains(marker);
            lines.push(line);
            if found {
                break;
            }
        }
        // Keep draining stdout so the runner never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        (child, lines)
    }

    /// Waits for a started runner and reads its result.
    pub fn wait(&self, mut child: Child, stdout: Vec<String>) -> Run {
        let status = child.wait().expect("wait for `ralph runner`");
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        self.finish(status, stdout.concat(), stderr)
    }

    fn finish(&self, status: ExitStatus, stdout: String, stderr: String) -> Run {
        let result_json = std::fs::read_to_string(self.path("result.json")).unwrap_or_else(|error| {
            panic!("no result file ({error}); status {status}\nstdout:\n{stdout}\nstderr:\n{stderr}")
        });
        let result = serde_json::from_str(&result_json).unwrap_or_else(|error| {
            panic!("result is not an AttemptResult ({error}): {result_json}")
        });
        Run {
            status,
            result,
            result_json,
            stdout,
            stderr,
        }
    }
}
