//! `ralph run` interrupted: killed with SIGKILL and run again, or stopped with Ctrl+C.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;

use local_run::{Project, describe, feature_yaml, independent, one_task_feature};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ralph::engine::dag::TaskPhase;

/// `a` and `b` (started first) take a minute on their first attempt, so a run killed while
/// they work has done nothing; every other attempt finishes at once.
const SLOW_FIRST: &str = "default:\n  - text: \"Did {task}. <task-done>{task}</task-done>\"\n\
tasks:\n  a:\n    - [ {delay: 60s} ]\n    - [ {text: \"<task-done>{task}</task-done>\"} ]\n  \
b:\n    - [ {delay: 60s} ]\n    - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
const HANGS: &str = "default:\n  - delay: 60s\n";

fn four_tasks() -> String {
    feature_yaml("resumable", "", &independent(&["a", "b", "c", "d"]))
}

/// Starts `ralph run` and returns once `count` attempts have sent their prompts.
fn start_until_running(
    project: &Project,
    args: &[&str],
    count: usize,
) -> (Child, mpsc::Receiver<String>) {
    // The prompt went out: the runner is well past its start-up (signal handlers set).
    start_until_activity(project, args, count, "prompt_sent")
}

/// Starts `ralph run` and returns once `count` attempts reported activity starting with
/// `activity`.
fn start_until_activity(
    project: &Project,
    args: &[&str],
    count: usize,
    activity: &str,
) -> (Child, mpsc::Receiver<String>) {
    let mut child = project
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ralph run starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut active = std::collections::HashSet::new();
    while active.len() < count {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("attempts start");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let seen = event["text"]
            .as_str()
            .is_some_and(|text| text.starts_with(activity));
        if event["event"] == "activity" && seen {
            active.insert(event["attempt"].as_str().unwrap_or_default().to_string());
        }
    }
    (child, lines)
}

/// Four tasks run two at a time, killed with SIGKILL while `a` and `b` work on their first
/// attempt, then run again to the end.
fn killed_while_a_and_b_work_then_resumed() -> Project {
    let project = Project::new(&four_tasks(), SLOW_FIRST);
    let (mut child, _lines) = start_until_running(&project, &["--parallel", "2"], 2);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    project.run_to_success(&["--parallel", "2"]);
    project
}

fn signal(child: &Child, signal: Signal) {
    let pid = i32::try_from(child.id()).expect("pid fits");
    kill(Pid::from_raw(pid), signal).expect("signal sent");
}

#[test]
fn a_run_killed_with_sigkill_resumes_and_does_every_task_exactly_once() {
    let project = killed_while_a_and_b_work_then_resumed();

    let attempts = project.attempts();
    for name in ["a", "b", "c", "d"] {
        let done = attempts
            .iter()
            .filter(|a| a.task == name && a.outcome.as_deref() == Some("done"))
            .count();
        assert_eq!(done, 1, "task {name}: {attempts:#?}");
    }
    assert!(project.store().claims().expect("claims").is_empty());
}

#[test]
fn attempts_cut_off_by_sigkill_are_not_counted_as_done() {
    let project = killed_while_a_and_b_work_then_resumed();

    let first_two: Vec<_> = project
        .attempts()
        .into_iter()
        .filter(|a| a.number == 1 && ["a", "b"].contains(&a.task.as_str()))
        .map(|a| a.outcome.unwrap_or_default())
        .collect();
    assert_eq!(first_two.len(), 2);
    assert!(
        first_two.iter().all(|o| o != "done"),
        "the killed run's attempts: {first_two:?}"
    );
}

#[test]
fn ctrl_c_cancels_running_attempts_records_them_interrupted_and_exits_130() {
    let project = Project::new(&four_tasks(), HANGS);
    let (mut child, _lines) = start_until_running(&project, &["--parallel", "2"], 2);
    signal(&child, Signal::SIGINT);
    let status = child.wait().expect("ralph run exits");
    assert_eq!(status.code(), Some(130));
    let outcomes = project.attempt_outcomes();
    assert_eq!(outcomes, ["interrupted", "interrupted"]);
    let store = project.store();
    assert!(store.claims().expect("claims").is_empty());
    let tasks = store.tasks().expect("tasks");
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Pending),
        "{tasks:?}"
    );
}

#[test]
fn a_second_ctrl_c_kills_attempts_that_ignore_the_cancel() {
    let script = "default:\n  - hang: true\n";
    let project = Project::new(&four_tasks(), script);
    let (mut child, _lines) =
        start_until_running(&project, &["--parallel", "1", "--grace", "60s"], 1);
    signal(&child, Signal::SIGINT);
    std::thread::sleep(std::time::Duration::from_millis(200));
    signal(&child, Signal::SIGINT);
    let status = child.wait().expect("ralph run exits");
    assert_eq!(status.code(), Some(130));
    let outcomes = project.attempt_outcomes();
    assert_eq!(outcomes, ["interrupted"]);
}

#[test]
fn a_runner_outliving_its_killed_run_is_waited_for_not_started_twice() {
    // Attempt 1 ignores the cancel, so its runner lives on through its grace period after
    // `ralph run` is killed; attempt 2 completes.
    let script = "tasks:\n  a:\n    - [ {text: working}, {hang: true} ]\n    \
                  - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
    let manifest = one_task_feature("orphaned", "", "a");
    let project = Project::new(&manifest, script);
    let (mut child, _lines) = start_until_activity(
        &project,
        &["--grace", "6s"],
        1,
        "agent_message_chunk: working",
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let output = project.run_to_success(&["--grace", "6s"]);
    let waited = project
        .events()
        .into_iter()
        .any(|e| e.kind == "waiting" && e.attempt.as_deref() == Some("a-a1"));
    assert!(
        waited,
        "the second run did not wait: {:#?}\n{}",
        project.events(),
        describe(&output)
    );
    let attempts = project.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let first_end = attempts[0].ended_at_ms.expect("a-a1 ended");
    assert!(attempts[1].started_at_ms >= first_end, "{attempts:#?}");
    assert_eq!(attempts[1].outcome.as_deref(), Some("done"));
}
