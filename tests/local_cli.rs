//! `ralph status` and `ralph task list|show|reset|retry` on the state of a local run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, assert_mentions, describe, exit_code, failing_base_feature, stdout};
use ralph::engine::dag::TaskPhase;

/// A run where `base` fails (no retries), `on-top` is blocked and `side` is done.
fn failed_run() -> Project {
    let manifest = failing_base_feature("cli", "side");
    let script = "default:\n  - text: \"<task-done>{task}</task-done>\"\ntasks:\n  base:\n    \
                  - [ {text: \"<task-failed>{task}</task-failed>\"} ]\n    \
                  - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
    let project = Project::new(&manifest, script);
    project.run_exiting(&[], 1);
    project
}

#[test]
fn status_shows_the_outcome_and_counts_per_phase() {
    let text = stdout(&failed_run().ralph_ok(&["status"]));
    assert_mentions(
        &text,
        &[
            "feature cli: Failed",
            "3 total, 1 done, 0 running, 0 pending, 1 failed, 1 blocked",
        ],
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
    let output = failed_run().ralph(&["status", "--json"]);
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
    let text = stdout(&failed_run().ralph(&["task", "list"]));
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
    let text = stdout(&failed_run().ralph(&["task", "show", "base"]));
    assert_mentions(&text, &["phase: Failed", "base-a1 (gen 1): failed"]);
}

#[test]
fn task_show_of_an_unknown_task_names_it() {
    let stderr = failed_run().ralph_failing(&["task", "show", "nope"]);
    assert_mentions(&stderr, &["\"nope\""]);
}

#[test]
fn task_retry_sets_a_failed_task_pending_and_the_next_run_completes() {
    let project = failed_run();
    project.ralph_ok(&["task", "retry", "base"]);
    assert_eq!(project.task("base").phase, TaskPhase::Pending);
    project.run_to_success(&[]);
    assert_eq!(project.task("on-top").phase, TaskPhase::Done);
}

#[test]
fn task_retry_refuses_a_done_task() {
    let stderr = failed_run().ralph_failing(&["task", "retry", "side"]);
    assert_mentions(&stderr, &["is Done"]);
}

#[test]
fn task_reset_clears_the_retry_count_and_sets_pending() {
    let project = failed_run();
    project.ralph_ok(&["task", "reset", "side"]);
    let task = project.task("side");
    assert_eq!((task.phase, task.retry_count), (TaskPhase::Pending, 0));
}

#[test]
fn task_show_says_tokens_an_agent_did_not_report_are_unknown_not_zero() {
    let text = stdout(&failed_run().ralph_ok(&["task", "show", "base"]));
    assert_mentions(
        &text,
        &[
            "(1 attempt reported no tokens)",
            "base-a1 (gen 1): failed",
            "tokens unknown, cost unknown",
        ],
    );
    assert!(!text.contains(" 0 tokens ?"), "{text}");
}

#[test]
fn task_list_marks_tokens_an_agent_did_not_report() {
    let text = stdout(&failed_run().ralph_ok(&["task", "list"]));
    let base = text
        .lines()
        .find(|line| line.starts_with("base "))
        .unwrap_or_default();
    let columns: Vec<&str> = base.split_whitespace().collect();
    assert_eq!(columns.get(5..7), Some(&["?", "?"][..]), "{text}");
}
