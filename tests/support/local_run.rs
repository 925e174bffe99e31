//! Helpers for `ralph run` tests: a project directory with a feature manifest and a script
//! for the scripted agent, the real `ralph` binary, and the run's store.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use ralph::local::store::{AttemptRow, NewEvent, Store, TaskRow};

use super::mentions;
#[allow(unused_imports)]
pub use mentions::assert_mentions;

/// A temporary project: `feature.yaml`, `script.yaml`, and the state in `.ralph/<feature>/`.
pub struct Project {
    pub dir: tempfile::TempDir,
}

/// One task of a test feature: name, dependencies, extra YAML fields (indented 6 spaces).
pub struct TaskDef<'a> {
    pub name: &'a str,
    pub depends_on: &'a [&'a str],
    pub extra: &'a str,
}

/// A task with dependencies.
pub fn task<'a>(name: &'a str, depends_on: &'a [&'a str]) -> TaskDef<'a> {
    TaskDef {
        name,
        depends_on,
        extra: "",
    }
}

/// A Feature manifest named `name` with `spec_extra` (YAML lines indented 2 spaces under
impl<'a> TaskDef<'a> {
    /// The task with extra YAML fields (indented 6 spaces).
    pub fn with_extra(self, extra: &'a str) -> Self {
        Self { extra, ..self }
    }
}

/// `spec:`) and the tasks. Retries back off for one second at most.
pub fn feature_yaml(name: &str, spec_extra: &str, tasks: &[TaskDef<'_>]) -> String {
    let mut yaml = format!(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: {name}\nspec:\n  \
         agent:\n    command: [\"unused-agent\"]\n  retry:\n    backoffBaseSeconds: 1\n    \
         backoffMaxSeconds: 1\n{spec_extra}  tasks:\n"
    );
    for task in tasks {
        yaml.push_str(&format!(
            "    - name: {}\n      title: Title of {}\n      description: Do {}.\n",
            task.name, task.name, task.name
        ));
        if !task.depends_on.is_empty() {
            yaml.push_str(&format!(
                "      dependsOn: [{}]\n",
                task.depends_on.join(", ")
            ));
        }
        yaml.push_str(task.extra);
    }
    yaml
}

/// Tasks of these names, none depending on another.
pub fn independent<'a>(names: &[&'a str]) -> Vec<TaskDef<'a>> {
    names.iter().map(|name| task(name, &[])).collect()
}

/// A Feature named `name` whose task `base` fails for good (no retries) when its agent
/// says so: `on-top` depends on it, `other` does not.
pub fn failing_base_feature(name: &str, other: &str) -> String {
    feature_yaml(
        name,
        "",
        &[
            task("base", &[]).with_extra("      maxRetries: 0\n"),
            task("on-top", &["base"]),
            task(other, &[]),
        ],
    )
}

/// A Feature manifest named `name` with `spec_extra` and one task, `task`, of no dependencies.
pub fn one_task_feature(name: &str, spec_extra: &str, task_name: &str) -> String {
    feature_yaml(name, spec_extra, &[task(task_name, &[])])
}

impl Project {
    /// A project with this manifest and agent script.
    pub fn new(manifest: &str, script: &str) -> Project {
        let dir = tempfile::tempdir().expect("temporary directory");
        let project = Project { dir };
        project.write_manifest(manifest);
        std::fs::write(project.path("script.yaml"), script).expect("write script");
        project
    }

    /// A project with this manifest and agent script, after a `ralph run` that succeeded.
    pub fn run_ok(manifest: &str, script: &str) -> Project {
        let project = Project::new(manifest, script);
        project.run_to_success(&[]);
        project
    }

    /// Replaces the manifest.
    pub fn write_manifest(&self, manifest: &str) {
        std::fs::write(self.path("feature.yaml"), manifest).expect("write manifest");
    }

    /// A path inside the project.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The state directory: `.ralph/<feature>/` of the manifest's only Feature (`.ralph/`
    /// for a manifest without a readable one).
    pub fn state(&self) -> PathBuf {
        let options = ralph::manifest::LoadOptions {
            agent_from_command_line: true,
            local: true,
        };
        let plan = ralph::manifest::load_plan_with(&[self.path("feature.yaml")], &options);
        match plan.ok().as_ref().and_then(|plan| plan.features.first()) {
            Some(feature) => self.path(".ralph").join(feature.name()),
            None => self.path(".ralph"),
        }
    }

    /// `ralph run feature.yaml --agent "ralph agent script script.yaml" --json ARGS`.
    pub fn command(&self, args: &[&str]) -> Command {
        let agent = format!("ralph agent script {}", self.path("script.yaml").display());
        let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
        command
            .arg("run")
            .arg(self.path("feature.yaml"))
            .args(["--agent", &agent, "--json"])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Runs `ralph run` to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("ralph run starts")
    }

    /// Runs `ralph run` to the end and asserts that it succeeded; returns its output.
    pub fn run_to_success(&self, args: &[&str]) -> Output {
        self.run_exiting(args, 0)
    }

    /// Runs `ralph run` to the end and asserts its exit code; returns its output.
    pub fn run_exiting(&self, args: &[&str], code: i32) -> Output {
        let output = self.run(args);
        assert_eq!(exit_code(&output), code, "{}", describe(&output));
        output
    }

    /// Runs another `ralph` subcommand on this project's state.
    pub fn ralph(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ralph"))
            .args(args)
            .arg("--state")
            .arg(self.state())
            .output()
            .expect("ralph starts")
    }

    /// Runs another `ralph` subcommand and asserts that it succeeded; returns its output.
    pub fn ralph_ok(&self, args: &[&str]) -> Output {
        let output = self.ralph(args);
        assert_eq!(exit_code(&output), 0, "{}", describe(&output));
        output
    }

    /// Runs another `ralph` subcommand and asserts that it failed; returns its stderr.
    pub fn ralph_failing(&self, args: &[&str]) -> String {
        let output = self.ralph(args);
        assert_ne!(exit_code(&output), 0, "{}", describe(&output));
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    /// The run's store.
    pub fn store(&self) -> Store {
        Store::open_existing(&self.state()).expect("state exists")
    }

    /// Every event in log order.
    pub fn events(&self) -> Vec<NewEvent> {
        let rows = self.store().events(0).expect("events");
        rows.into_iter().map(|row| row.event).collect()
    }

    /// Tasks in the order their attempts started (from the event log).
    pub fn started_order(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| e.kind == "started")
            .filter_map(|e| e.task)
            .collect()
    }

    /// Every attempt.
    pub fn attempts(&self) -> Vec<AttemptRow> {
        self.store().attempts(None).expect("attempts")
    }

    /// The outcome of every attempt, in order ("" for one not concluded).
    pub fn attempt_outcomes(&self) -> Vec<String> {
        self.attempts()
            .into_iter()
            .map(|a| a.outcome.unwrap_or_default())
            .collect()
    }

    /// The stored row of the task `name`.
    pub fn task(&self, name: &str) -> TaskRow {
        self.store()
            .task(name)
            .unwrap_or_else(|error| panic!("task {name}: {error}"))
    }

    /// The prompt file of an attempt.
    pub fn prompt(&self, attempt: &str) -> String {
        self.attempt_file(attempt, "prompt.md")
    }

    /// The runner's log of an attempt (JSON lines).
    pub fn runner_log(&self, attempt: &str) -> String {
        self.attempt_file(attempt, "runner.jsonl")
    }

    /// A file the run keeps for an attempt in the state directory.
    fn attempt_file(&self, attempt: &str, file: &str) -> String {
        let path = self.state().join("attempts").join(attempt).join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{} kept for the attempt: {error}", path.display()))
    }
}

/// The exit code, with the output shown when it is not the expected one.
pub fn exit_code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Asserts that `ralph run` exited with `code`; shows its output and `traffic` (the model
/// requests) when not.
pub fn assert_run_exit(output: &Output, code: i32, traffic: &str) {
    assert_eq!(exit_code(output), code, "{}\n{traffic}", describe(output));
}

/// What the command printed on stdout.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Asserts that the command printed `part` on stdout.
pub fn assert_printed(output: &Output, part: &str) {
    assert!(stdout(output).contains(part), "{}", describe(output));
}

/// stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The JSON events printed by `ralph run --json`.
pub fn json_events(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The most attempts that were running at the same moment (from start and end times).
pub fn max_concurrent(attempts: &[AttemptRow]) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for attempt in attempts {
        edges.push((attempt.started_at_ms, 1));
        edges.push((attempt.ended_at_ms.expect("attempt ended"), -1));
    }
    // Ends before starts at the same millisecond: a slot freed and reused is not overlap.
    edges.sort();
    let (mut running, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        running += delta;
        most = most.max(running);
    }
    usize::try_from(most).unwrap_or(0)
}
