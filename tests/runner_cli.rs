//! `ralph runner` command-line contract: usage errors exit 2 with a clear message, and
//! without a result file the result is the last stdout line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{mentions, scripted};

use std::process::Command;

use mentions::assert_mentions;
use ralph::engine::attempt::{AttemptResult, OutcomeClass};
use scripted::{Scenario, ralph};

/// Runs `command` and asserts that it exits with `code`; returns its stderr.
fn stderr_of_exit(command: &mut Command, code: i32) -> String {
    let output = command.output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    stderr
}

/// `ralph runner --task t` with `scenario`'s prompt file and workspace; the rest to add.
fn runner(scenario: &Scenario) -> Command {
    let mut command = Command::new(ralph());
    command
        .args(["runner", "--task", "t", "--prompt-file"])
        .arg(scenario.path("prompt.md"))
        .arg("--workspace")
        .arg(scenario.workspace());
    command
}

#[test]
fn an_unreadable_prompt_file_exits_2_naming_it() {
    let stderr = stderr_of_exit(
        Command::new(ralph()).args([
            "runner",
            "--task",
            "t",
            "--prompt-file",
            "/nonexistent/prompt.md",
            "--",
            "true",
        ]),
        2,
    );
    assert_mentions(
        &stderr,
        &["cannot read the prompt file /nonexistent/prompt.md"],
    );
}

#[test]
fn a_missing_agent_command_is_a_usage_error() {
    stderr_of_exit(
        Command::new(ralph()).args(["runner", "--task", "t", "--prompt-file", "p.md"]),
        2,
    );
}

#[test]
fn an_invalid_crash_pattern_exits_2_naming_it() {
    let scenario = Scenario::new("t", "default: [{text: hi}]\n");
    let stderr = stderr_of_exit(
        runner(&scenario).args(["--crash-pattern", "(unclosed", "--", "true"]),
        2,
    );
    assert_mentions(&stderr, &["invalid crash pattern `(unclosed`"]);
}

#[test]
fn without_a_result_file_the_result_is_the_last_stdout_line() {
    let scenario = Scenario::new("t", "default: [{text: \"<task-done>t</task-done>\"}]\n");
    let output = runner(&scenario)
        .arg("--")
        .arg(ralph())
        .args(["agent", "script"])
        .arg(scenario.path("script.yaml"))
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().expect("output");
    let result: AttemptResult = serde_json::from_str(last).expect("the result document");
    assert_eq!(result.outcome, OutcomeClass::Finished);
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn a_script_error_names_the_file_and_step() {
    let scenario = Scenario::new("t", "default: [{txt: hi}]\n");
    let stderr = stderr_of_exit(
        Command::new(ralph())
            .args(["agent", "script"])
            .arg(scenario.path("script.yaml"))
            .env("RALPH_TASK", "t"),
        2,
    );
    assert_mentions(
        &stderr,
        &["script.yaml: default step 1: unknown step `txt`"],
    );
}

#[test]
fn an_agent_command_that_does_not_exist_is_misconfigured_exit_6() {
    let scenario = Scenario::new("t", "default: []\n");
    let output = runner(&scenario)
        .arg("--result-file")
        .arg(scenario.path("result.json"))
        .args(["--", "/nonexistent/agent-cli"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(6));
    let result = scenario.read_result().expect("result");
    assert_eq!(result.outcome, OutcomeClass::Misconfigured);
    let problem = result.misconfiguration.expect("misconfiguration");
    assert!(
        problem
            .problem
            .starts_with("the agent command `/nonexistent/agent-cli` was not found"),
        "{problem:?}"
    );
    assert!(problem.fix.contains("install the agent"), "{problem:?}");
}

/// Runs the hello sample script for one task and attempt.
fn hello_sample(task: &str, attempt: &str) -> (Scenario, AttemptResult) {
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/agent-scripts/hello.script.yaml"
    );
    let script = std::fs::read_to_string(sample).expect("the hello sample script");
    let scenario = Scenario::new(task, &script).attempt(attempt);
    let result = scenario.run().result;
    (scenario, result)
}

#[test]
fn the_hello_sample_writes_each_file_and_completes_each_task() {
    for (task, file) in [
        ("write-greeting", "hello.sh"),
        ("write-readme", "README.md"),
    ] {
        let (scenario, result) = hello_sample(task, &format!("{task}-a1"));
        assert_eq!(result.outcome, OutcomeClass::Finished, "{task}");
        assert_eq!(result.sigils.task_done.as_deref(), Some(task));
        assert!(
            scenario.workspace().join(file).exists(),
            "{task} wrote no {file}"
        );
    }
}

#[test]
fn the_hello_sample_write_test_crashes_once_then_succeeds() {
    let (_, first) = hello_sample("write-test", "write-test-a1");
    assert_eq!(first.outcome, OutcomeClass::Crashed);
    assert_eq!(first.exit_code, Some(1));
    let (scenario, second) = hello_sample("write-test", "write-test-a2");
    assert_eq!(second.outcome, OutcomeClass::Finished);
    assert_eq!(second.sigils.task_done.as_deref(), Some("write-test"));
    assert!(scenario.workspace().join("test.sh").exists());
}

#[test]
fn log_lines_on_a_pipe_carry_no_colour_codes() {
    let run = Scenario::new("t", "default: [{text: \"<task-done>t</task-done>\"}]\n")
        .args(&["--heartbeat-file", "/proc/no-such-process/heartbeat"])
        .run();
    assert_mentions(&run.stderr, &["cannot write the heartbeat file"]);
    assert!(!run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
}
