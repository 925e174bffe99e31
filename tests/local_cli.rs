//! `ralph status` and `ralph task list|show|reset|retry` on the state of a local run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/local_run.rs"]
mod local_run;

use local_run::{Project, describe, exit_code, feature_yaml, stdout, task};
use ralph::engine::dag::TaskPhase;

/// A run where `base` fails (no retries), `on-top` is blocked and `side` is done.
fn failed_run() -> Project {
    let manifest = feature_yaml(
        "cli",
        "",
        &[
            task("base", &[]).with_extra("      maxRetries: 0\n"),
            task("on-top", &["base"]),
            task("side", &[]),
        ],
    );
    let script = "default:\n  - text: \"<task-done>{task}</task-done>\"\ntasks:\n  base:\n    \
                  - [ {text: \"<task-failed>{task}</task-failed>\"} ]\n    \
                  - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
    let project = Project::new(&manifest, script);
    project.run_exiting(&[], 1);
    project
}

#[test]
fn status_shows_the_outcome_and_counts_per_phase() {
    let project = failed_run();
    let output = project.ralph_ok(&["status"]);
    let text = stdout(&output);
    assert!(text.contains("feature cli: Failed"), "{text}");
    assert!(
        text.contains("3 total, 1 done, 0 running, 0 pending, 1 failed, 1 blocked"),
        "{text}"
    );
}

#[test]
fn status_finds_the_state_next_to_the_manifest() {
    let project = failed_run();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("status")
        .arg(project.path("feature.yaml"))
        .output()
        .expect("ralph status");
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert!(stdout(&output).contains("feature cli"));
}

#[test]
fn status_json_is_machine_readable() {
    let project = failed_run();
    let output = project.ralph(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(status["counts"]["failed"], 1);
    assert_eq!(status["tasks"][0]["task"], "base");
}

#[test]
fn status_without_state_says_so_and_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["status", "--state"])
        .arg(dir.path().join("nothing"))
        .output()
        .expect("ralph status");
    assert_ne!(exit_code(&output), 0);
    assert!(String::from_utf8_lossy(&output.stderr).contains("no local run state"));
}

#[test]
fn task_list_shows_every_task_with_its_phase() {
    let project = failed_run();
    let text = stdout(&project.ralph(&["task", "list"]));
    let phases: Vec<(&str, &str)> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .collect();
    assert_eq!(
        phases,
        [("base", "Failed"), ("on-top", "Blocked"), ("side", "Done")]
    );
}

#[test]
fn task_show_lists_every_attempt_with_its_outcome() {
    let project = failed_run();
    let output = project.ralph(&["task", "show", "base"]);
    let text = stdout(&output);
    assert!(text.contains("phase: Failed"), "{text}");
    assert!(text.contains("base-a1 (gen 1): failed"), "{text}");
}

#[test]
fn task_show_of_an_unknown_task_names_it() {
    let project = failed_run();
    let stderr = project.ralph_failing(&["task", "show", "nope"]);
    assert!(stderr.contains("\"nope\""), "{stderr}");
}

#[test]
fn task_retry_sets_a_failed_task_pending_and_the_next_run_completes() {
    let project = failed_run();
    project.ralph_ok(&["task", "retry", "base"]);
    assert_eq!(
        project.store().task("base").expect("base").phase,
        TaskPhase::Pending
    );
    project.run_to_success(&[]);
    let store = project.store();
    assert_eq!(store.task("on-top").expect("on-top").phase, TaskPhase::Done);
}

#[test]
fn task_retry_refuses_a_done_task() {
    let project = failed_run();
    let stderr = project.ralph_failing(&["task", "retry", "side"]);
    assert!(stderr.contains("is Done"), "{stderr}");
}

#[test]
fn task_reset_clears_the_retry_count_and_sets_pending() {
    let project = failed_run();
    project.ralph_ok(&["task", "reset", "side"]);
    let task = project.store().task("side").expect("side");
    assert_eq!((task.phase, task.retry_count), (TaskPhase::Pending, 0));
}
