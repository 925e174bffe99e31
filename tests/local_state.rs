//! The state of local runs never breaks: tasks may leave the manifest and come back, each
//! Feature keeps its own state, a store of an older ralph is migrated (a newer one's is
//! refused), and a run can be started over or a failed task retried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use local_run::{
    Project, assert_mentions, describe, exit_code, failing_base_feature, feature_yaml, independent,
    one_task_feature, stdout,
};
use ralph::engine::dag::TaskPhase;

const DONE: &str = "default:\n  - text: \"<task-done>{task}</task-done>\"\n";

/// The schema of the previous release's store (version 2).
const STORE_V2: &str = include_str!("support/store_v2.sql");

/// `ralph ARGS` run in `dir`, with no `--state`.
fn ralph_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("ralph starts")
}

/// A project whose `feature.yaml` (Feature `one`, task `a`) ran to the end, and which holds
/// a second manifest `two.yaml` (Feature `two`, task `x`) in the same directory.
fn two_manifests_side_by_side() -> Project {
    let project = Project::run_ok(&one_task_feature("one", "", "a"), DONE);
    std::fs::write(project.path("two.yaml"), one_task_feature("two", "", "x")).expect("write");
    project
}

/// `ralph run FILE` of the project with its scripted agent, run in the project.
fn run_file(project: &Project, file: &str, extra: &[&str]) -> Output {
    let agent = format!(
        "ralph agent script {}",
        project.path("script.yaml").display()
    );
    let mut args = vec!["run", file, "--agent", agent.as_str(), "--json"];
    args.extend_from_slice(extra);
    ralph_in(project.dir.path(), &args)
}

/// A store at `dir` made with the previous release's schema, holding Feature `old`'s task
/// `a`, done by attempt `a-a1`.
fn store_of_the_previous_release(project: &Project, dir: &Path) {
    let options = ralph::manifest::LoadOptions {
        agent_from_command_line: true,
        local: true,
    };
    let plan = ralph::manifest::load_plan_with(&[project.path("feature.yaml")], &options)
        .expect("valid manifest");
    let feature = ralph::local::plan::feature_spec(&plan.features[0]).expect("local feature");
    std::fs::create_dir_all(dir).expect("state directory");
    let conn = rusqlite::Connection::open(dir.join("ralph.db")).expect("create the store");
    conn.execute_batch(STORE_V2).expect("schema version 2");
    let spec = serde_json::to_string(&feature).expect("feature JSON");
    let task = serde_json::to_string(&feature.tasks[0]).expect("task JSON");
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('feature', ?1)",
        [&spec],
    )
    .expect("feature");
    conn.execute(
        "INSERT INTO tasks (name, spec, ord, generation, phase, attempt_count)
         VALUES ('a', ?1, 0, 1, 'Done', 1)",
        [&task],
    )
    .expect("task");
    conn.execute(
        "INSERT INTO attempts (id, task, number, generation, started_at_ms, ended_at_ms,
             outcome, kind)
         VALUES ('a-a1', 'a', 1, 1, 1000, 2000, 'done', 'work')",
        [],
    )
    .expect("attempt");
}

fn user_version(dir: &Path) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("ralph.db")).expect("open the store");
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_task_dropped_from_the_manifest_and_put_back_runs_again() {
    let both = feature_yaml("comeback", "", &independent(&["a", "b"]));
    let project = Project::run_ok(&both, DONE);
    project.write_manifest(&feature_yaml("comeback", "", &independent(&["a"])));
    project.run_to_success(&[]);
    project.write_manifest(&both);
    project.run_to_success(&[]);
    let ids: Vec<String> = project.attempts().into_iter().map(|a| a.id).collect();
    assert_eq!(ids, ["a-a1", "b-a1", "b-a2"]);
    assert_eq!(project.task("b").phase, TaskPhase::Done);
}

#[test]
fn each_feature_beside_another_keeps_its_own_state() {
    let project = two_manifests_side_by_side();
    let output = run_file(&project, "two.yaml", &[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let one = ralph_in(project.dir.path(), &["task", "list", "feature.yaml"]);
    let two = ralph_in(project.dir.path(), &["task", "list", "two.yaml"]);
    assert_eq!(first_words(&stdout(&one)), ["a"], "{}", describe(&one));
    assert_eq!(first_words(&stdout(&two)), ["x"], "{}", describe(&two));
}

/// The first word of every line after the header.
fn first_words(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn running_another_feature_beside_it_leaves_a_done_feature_complete() {
    let project = two_manifests_side_by_side();
    run_file(&project, "two.yaml", &[]);
    let again = run_file(&project, "feature.yaml", &[]);
    assert_eq!(exit_code(&again), 0, "{}", describe(&again));
    assert_eq!(project.attempts().len(), 1, "nothing of `one` ran again");
    let status = ralph_in(project.dir.path(), &["status", "feature.yaml"]);
    assert_mentions(&stdout(&status), &["feature one: Complete"]);
}

#[test]
fn status_of_a_manifest_that_never_ran_says_so() {
    let project = two_manifests_side_by_side();
    let output = ralph_in(project.dir.path(), &["status", "two.yaml"]);
    assert_ne!(exit_code(&output), 0, "{}", describe(&output));
    assert!(
        !stdout(&output).contains("feature one"),
        "{}",
        describe(&output)
    );
    assert_mentions(
        &stderr(&output),
        &["feature two", "has not run yet", "ralph run"],
    );
}

#[test]
fn status_without_a_file_finds_the_run_started_here() {
    let project = Project::run_ok(&one_task_feature("here", "", "a"), DONE);
    let output = ralph_in(project.dir.path(), &["status"]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(&stdout(&output), &["feature here: Complete"]);
}

#[test]
fn status_without_a_file_finds_a_run_whose_manifest_is_below_here() {
    let outer = tempfile::tempdir().expect("tempdir");
    let inner = outer.path().join("project");
    std::fs::create_dir(&inner).expect("project directory");
    std::fs::write(
        inner.join("feature.yaml"),
        one_task_feature("below", "", "a"),
    )
    .expect("write");
    std::fs::write(inner.join("script.yaml"), DONE).expect("write");
    let ran = ralph_in(
        &inner,
        &[
            "run",
            "feature.yaml",
            "--agent",
            "ralph agent script script.yaml",
        ],
    );
    assert_eq!(exit_code(&ran), 0, "{}", describe(&ran));
    let output = ralph_in(outer.path(), &["status"]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(&stdout(&output), &["feature below: Complete"]);
}

#[test]
fn status_without_a_file_lists_every_run_here() {
    let project = two_manifests_side_by_side();
    run_file(&project, "two.yaml", &[]);
    let output = ralph_in(project.dir.path(), &["status"]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &[
            "2 runs here",
            "feature one: Complete",
            "feature two: Complete",
        ],
    );
}

#[test]
fn task_list_without_a_file_names_the_runs_to_choose_from() {
    let project = two_manifests_side_by_side();
    run_file(&project, "two.yaml", &[]);
    let output = ralph_in(project.dir.path(), &["task", "list"]);
    assert_ne!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(
        &stderr(&output),
        &["several runs here", ".ralph/one", ".ralph/two"],
    );
}

#[test]
fn a_state_directory_of_another_feature_is_refused() {
    let project = two_manifests_side_by_side();
    let shared = project.state().display().to_string();
    let output = run_file(&project, "two.yaml", &["--state", &shared]);
    assert_eq!(exit_code(&output), 2, "{}", describe(&output));
    assert_mentions(
        &stderr(&output),
        &["belongs to feature \"one\"", "not \"two\""],
    );
    let names: Vec<String> = project
        .store()
        .tasks()
        .expect("tasks")
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, ["a"]);
}

#[test]
fn a_store_of_the_previous_release_is_migrated_and_read() {
    let project = Project::new(&one_task_feature("old", "", "a"), DONE);
    let state = project.state();
    store_of_the_previous_release(&project, &state);
    project.run_to_success(&[]);
    assert_eq!(user_version(&state), 3);
    let ids: Vec<String> = project.attempts().into_iter().map(|a| a.id).collect();
    assert_eq!(ids, ["a-a1"], "the done task is not run again");
    let status = project.ralph_ok(&["status"]);
    assert_mentions(&stdout(&status), &["feature old: Complete"]);
}

#[test]
fn a_store_of_the_previous_release_is_refused_to_another_feature() {
    let project = Project::new(&one_task_feature("old", "", "a"), DONE);
    let shared = project.path("shared");
    store_of_the_previous_release(&project, &shared);
    std::fs::write(project.path("two.yaml"), one_task_feature("two", "", "x")).expect("write");
    let state = shared.display().to_string();
    let output = run_file(&project, "two.yaml", &["--state", &state]);
    assert_ne!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(&stderr(&output), &["belongs to feature \"old\""]);
}

#[test]
fn a_store_written_by_a_newer_ralph_is_refused_with_a_message() {
    let project = Project::new(&one_task_feature("new", "", "a"), DONE);
    let state = project.state();
    std::fs::create_dir_all(&state).expect("state directory");
    let conn = rusqlite::Connection::open(state.join("ralph.db")).expect("create the store");
    conn.pragma_update(None, "user_version", 99)
        .expect("user_version");
    drop(conn);
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 70, "{}", describe(&output));
    assert_mentions(
        &stderr(&output),
        &["newer ralph", "schema version 99", "ralph reset"],
    );
    assert_eq!(user_version(&state), 99, "the store is left as it was");
}

#[test]
fn reset_removes_the_state_and_the_next_run_starts_over() {
    let project = Project::run_ok(&one_task_feature("again", "", "a"), DONE);
    let output = ralph_in(project.dir.path(), &["reset", "feature.yaml"]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert!(!project.state().exists(), "{}", describe(&output));
    project.run_to_success(&[]);
    let ids: Vec<String> = project.attempts().into_iter().map(|a| a.id).collect();
    assert_eq!(ids, ["a-a1"]);
}

#[test]
fn reset_of_one_feature_leaves_the_other_alone() {
    let project = two_manifests_side_by_side();
    run_file(&project, "two.yaml", &[]);
    ralph_in(project.dir.path(), &["reset", "two.yaml"]);
    assert!(project.state().join("ralph.db").is_file());
    assert!(!project.path(".ralph/two").exists());
}

#[test]
fn a_failed_run_names_task_retry() {
    let script = "default:\n  - text: \"<task-done>{task}</task-done>\"\ntasks:\n  base:\n    \
                  - [ {text: \"<task-failed>{task}</task-failed>\"} ]\n";
    let project = Project::new(&failing_base_feature("hint", "side"), script);
    let output = project.run_exiting(&[], 1);
    assert_mentions(&stdout(&output), &["ralph task retry base"]);
}

#[test]
fn task_retry_gives_the_task_its_retries_back() {
    let crash = "- [ {stderr: \"boom\"}, {exit: 1} ]";
    let script = format!(
        "default:\n  - text: \"<task-done>{{task}}</task-done>\"\ntasks:\n  flaky:\n    \
         {crash}\n    {crash}\n    {crash}\n    - [ {{text: \"<task-done>{{task}}</task-done>\"}} ]\n"
    );
    let manifest = one_task_feature("retried", "", "flaky").replace(
        "      description: Do flaky.\n",
        "      description: Do flaky.\n      maxRetries: 1\n",
    );
    let project = Project::new(&manifest, &script);
    project.run_exiting(&[], 1);
    project.ralph_ok(&["task", "retry", "flaky"]);
    project.run_to_success(&[]);
    assert_eq!(project.task("flaky").phase, TaskPhase::Done);
}
