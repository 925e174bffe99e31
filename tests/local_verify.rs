//! Verification in `ralph run` with the scripted agent: a verification attempt is its own
//! read-only runner process in the same workspace; `verify.command` runs after a done
//! verdict. Attempt N of a task is step list N of its script, verification attempts included.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, assert_mentions, feature_yaml, task};

fn verified(verify: &str) -> String {
    feature_yaml(
        "verified",
        &format!("  verify:\n{verify}"),
        &[task("api", &[])],
    )
}

fn agent_verified() -> String {
    verified("    agent: true\n")
}

/// The attempts as "kind outcome", e.g. "Verify failed".
fn history(project: &Project) -> Vec<String> {
    project
        .attempts()
        .into_iter()
        .map(|a| format!("{:?} {}", a.kind, a.outcome.unwrap_or_default()))
        .collect()
}

/// A work attempt done, its verification failed, then both again and passed.
const REJECTED_THEN_PASSED: [&str; 4] = ["Work done", "Verify failed", "Work done", "Verify done"];

#[test]
fn a_passing_verifier_makes_the_task_done() {
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Built it. <journal>Added GET /greeting.</journal>\\n\\n<task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Tests pass.\\n\\n<verify-pass>{task}</verify-pass>\"} ]\n";
    let project = Project::run_ok(&agent_verified(), script);
    assert_eq!(history(&project), ["Work done", "Verify done"]);
    let prompt = project.prompt("api-a2");
    assert!(prompt.starts_with("# Verify: Title of api"), "{prompt}");
    assert_mentions(&prompt, &["Added GET /greeting."]);
}

#[test]
fn a_rejecting_verifier_sends_the_task_back_with_its_reason_then_a_pass_completes_it() {
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"GET /greeting answers 500.\\n\\n<verify-fail>{task}</verify-fail>\"} ]\n    \
        - [ {text: \"Fixed. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Now it works.\\n\\n<verify-pass>{task}</verify-pass>\"} ]\n";
    let project = Project::run_ok(&agent_verified(), script);
    assert_eq!(history(&project), REJECTED_THEN_PASSED);
    let retry = project.prompt("api-a3");
    assert!(retry.starts_with("# Task:"), "{retry}");
    assert!(
        retry.contains(
            "Previous attempt failed: the verifier rejected the work: GET /greeting answers 500."
        ),
        "{retry}"
    );
}

#[test]
fn a_crashing_verifier_counts_as_a_failed_verification() {
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {stderr: \"Error: socket hang up\"}, {exit: 1} ]\n    \
        - [ {text: \"Done again. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Fine.\\n\\n<verify-pass>{task}</verify-pass>\"} ]\n";
    let project = Project::run_ok(&agent_verified(), script);
    assert_eq!(history(&project), REJECTED_THEN_PASSED);
    assert!(
        project.prompt("api-a3").contains("the verifier crashed"),
        "{}",
        project.prompt("api-a3")
    );
}

#[test]
fn a_verifier_that_never_passes_fails_the_task_once_retries_are_spent() {
    let manifest = feature_yaml(
        "verified",
        "  verify:\n    agent: true\n",
        &[local_run::TaskDef {
            extra: "      maxRetries: 1\n",
            ..task("api", &[])
        }],
    );
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Broken.\\n\\n<verify-fail>{task}</verify-fail>\"} ]\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Still broken.\\n\\n<verify-fail>{task}</verify-fail>\"} ]\n";
    let project = Project::new(&manifest, script);
    project.run_exiting(&[], 1);
    assert_eq!(history(&project).len(), 4);
}

#[test]
fn the_verifiers_edit_is_refused_and_nothing_is_written() {
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {tool: {path: fixed.txt, write: \"patched\", ok_text: \"I edited it.\", fail_text: \"I may not edit.\"}}, \
             {text: \"Looks right.\\n\\n<verify-pass>{task}</verify-pass>\"} ]\n";
    let project = Project::run_ok(&agent_verified(), script);
    assert!(
        !project.path("fixed.txt").exists(),
        "the verifier wrote a file"
    );
    let log = project.runner_log("api-a2");
    assert_mentions(&log, &["read-only verification session"]);
}

#[test]
fn a_failing_verify_command_retries_with_its_output_then_a_passing_one_completes() {
    let manifest = verified("    command: \"echo checking; test -f built.txt\"\n");
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {tool: {path: built.txt, write: \"ok\", ok_text: \"Built. <task-done>{task}</task-done>\"}} ]\n";
    let project = Project::run_ok(&manifest, script);
    assert_eq!(history(&project), ["Work failed", "Work done"]);
    let retry = project.prompt("api-a2");
    assert_mentions(
        &retry,
        &[
            "verify.command `echo checking; test -f built.txt` exited with code 1",
            "checking",
        ],
    );
}

#[test]
fn task_show_names_the_verification_attempts() {
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Fine.\\n\\n<verify-pass>{task}</verify-pass>\"} ]\n";
    let project = Project::run_ok(&agent_verified(), script);
    let shown = project.ralph(&["task", "show", "api"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert_mentions(
        &text,
        &["api-a1 (gen 1): done", "api-a2 (gen 1): verification done"],
    );
}

#[test]
fn a_failing_verify_command_shows_the_end_of_its_output_in_task_show() {
    let manifest =
        verified("    command: \"echo compiling; echo 'error: 2 tests failed'; exit 1\"\n");
    let script = "tasks:\n  api:\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n    \
        - [ {text: \"Done. <task-done>{task}</task-done>\"} ]\n";
    let project = Project::new(&manifest, script);
    project.run(&["--limit", "1"]);
    let shown = project.ralph_ok(&["task", "show", "api"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    let attempt = text
        .lines()
        .find(|line| line.trim_start().starts_with("api-a1"))
        .unwrap_or_default();
    assert_mentions(
        attempt,
        &["the end of its output: … error: 2 tests failed; retry 1 of"],
    );
}
