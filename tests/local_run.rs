//! `ralph run` end to end: the real binary, the real runner and the scripted ACP agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{
    Project, assert_mentions, assert_printed, describe, exit_code, failing_base_feature,
    feature_yaml, independent, max_concurrent, one_task_feature, task,
};
use ralph::engine::dag::TaskPhase;

const DONE: &str = "default:\n  - text: \"Did {task}. <task-done>{task}</task-done>\"\n";

fn diamond() -> String {
    feature_yaml(
        "diamond",
        "  parallelism: 1\n",
        &[
            task("design", &[]),
            task("frontend", &["design"]).with_extra("      priority: 5\n"),
            task("backend", &["design"]).with_extra("      priority: 1\n"),
            task("integrate", &["frontend", "backend"]),
        ],
    )
}

#[test]
fn a_diamond_runs_in_dependency_then_priority_order() {
    let project = Project::run_ok(&diamond(), DONE);
    assert_eq!(
        project.started_order(),
        ["design", "backend", "frontend", "integrate"]
    );
}

#[test]
fn every_task_of_a_complete_run_is_done_once() {
    let project = Project::run_ok(&diamond(), DONE);
    let tasks = project.store().tasks().expect("tasks");
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    let outcomes = project.attempt_outcomes();
    assert_eq!(outcomes, ["done"; 4]);
}

#[test]
fn no_more_attempts_run_at_once_than_parallel_allows() {
    let tasks = independent(&["t1", "t2", "t3", "t4", "t5", "t6"]);
    let script = "default:\n  - delay: 300ms\n  - text: \"<task-done>{task}</task-done>\"\n";
    let project = Project::new(&feature_yaml("wide", "", &tasks), script);
    project.run_to_success(&["--parallel", "2"]);
    assert_eq!(max_concurrent(&project.attempts()), 2);
}

#[test]
fn a_failed_task_blocks_its_dependents_and_the_feature_fails_with_exit_1() {
    let manifest = failing_base_feature("failing", "independent");
    let script = format!(
        "{DONE}tasks:\n  base:\n    - text: \"Cannot do it. <task-failed>{{task}}</task-failed>\"\n"
    );
    let project = Project::new(&manifest, &script);
    project.run_exiting(&[], 1);
    let phase = |name: &str| project.task(name).phase;
    assert_eq!(
        (phase("base"), phase("on-top"), phase("independent")),
        (TaskPhase::Failed, TaskPhase::Blocked, TaskPhase::Done)
    );
    assert!(!project.started_order().contains(&"on-top".to_string()));
}

#[test]
fn a_failed_task_is_retried_while_retries_remain() {
    let manifest = one_task_feature("retrying", "", "flaky");
    let script = "tasks:\n  flaky:\n    - [ {text: \"No. <task-failed>{task}</task-failed>\"} ]\n    \
                  - [ {text: \"Yes. <task-done>{task}</task-done>\"} ]\n";
    let project = Project::run_ok(&manifest, script);
    let outcomes = project.attempt_outcomes();
    assert_eq!(outcomes, ["failed", "done"]);
}

#[test]
fn a_crash_is_retried_and_the_next_prompt_says_why() {
    let manifest = one_task_feature("crashy", "", "fragile");
    let script = "tasks:\n  fragile:\n    - [ {stderr: \"Error: socket hang up\"}, {exit: 1} ]\n    \
                  - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
    let project = Project::run_ok(&manifest, script);
    let outcomes = project.attempt_outcomes();
    assert_eq!(outcomes, ["crashed", "done"]);
    let prompt = project.prompt("fragile-a2");
    assert_mentions(&prompt, &["Previous attempt crashed"]);
    assert!(!project.prompt("fragile-a1").contains("Previous attempt"));
}

#[test]
fn a_failure_promise_stops_the_feature_with_exit_1() {
    let manifest = feature_yaml(
        "doomed",
        "",
        &[task("first", &[]), task("second", &["first"])],
    );
    let script = "tasks:\n  first:\n    - text: \"The repo is gone. <promise>FAILURE</promise>\"\n";
    let project = Project::new(&manifest, script);
    project.run_exiting(&[], 1);
    assert_eq!(project.started_order(), ["first"]);
    assert_printed(&project.ralph(&["status"]), "stopped by an agent");
}

#[test]
fn the_limit_stops_after_that_many_attempts_with_exit_5() {
    let project = Project::new(&diamond(), DONE);
    let output = project.run_exiting(&["--limit", "1"], 5);
    assert_eq!(project.started_order(), ["design"]);
    assert_printed(&output, "LimitReached");
}

#[test]
fn a_feature_without_tasks_exits_6() {
    let manifest = feature_yaml("empty", "", &[]).replace("  tasks:\n", "  tasks: []\n");
    let project = Project::new(&manifest, DONE);
    project.run_exiting(&[], 6);
}

#[test]
fn an_invalid_manifest_exits_3_naming_the_problem() {
    let manifest = feature_yaml("cyclic", "", &[task("a", &["b"]), task("b", &["a"])]);
    let project = Project::new(&manifest, DONE);
    let output = project.run_exiting(&[], 3);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_mentions(&stderr, &["feature.yaml", "cycle"]);
}

#[test]
fn a_second_run_starts_nothing_that_is_done() {
    let project = Project::new(&diamond(), DONE);
    assert_eq!(exit_code(&project.run(&[])), 0);
    project.run_to_success(&[]);
    assert_eq!(project.attempts().len(), 4);
}

#[test]
fn manifest_changes_add_new_tasks_drop_removed_ones_and_bump_edited_generations() {
    let project = Project::new(
        &feature_yaml("evolving", "", &[task("keep", &[]), task("drop", &[])]),
        DONE,
    );
    assert_eq!(exit_code(&project.run(&[])), 0);
    let edited = feature_yaml("evolving", "", &[task("keep", &[]), task("new", &["keep"])])
        .replace("Do keep.", "Do keep, differently.");
    project.write_manifest(&edited);
    project.run_to_success(&[]);
    let store = project.store();
    let names: Vec<_> = store
        .tasks()
        .expect("tasks")
        .into_iter()
        .map(|t| (t.spec.name, t.generation, t.phase))
        .collect();
    assert_eq!(
        names,
        [
            ("keep".to_string(), 2, TaskPhase::Done),
            ("new".to_string(), 1, TaskPhase::Done)
        ]
    );
    assert_eq!(project.started_order(), ["keep", "drop", "new"]);
}

#[test]
fn json_mode_prints_one_event_per_line_ending_with_the_summary() {
    let project = Project::new(&diamond(), DONE);
    let output = project.run(&[]);
    let events = local_run::json_events(&output);
    let kinds: Vec<_> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"plan"));
    assert_eq!(kinds.last(), Some(&"summary"));
    assert_eq!(kinds.iter().filter(|k| **k == "started").count(), 4);
    let summary = events.last().expect("summary");
    assert_eq!(summary["outcome"], "Complete");
    assert_eq!(summary["tasks"].as_array().map(Vec::len), Some(4));
}

#[test]
fn spec_agent_may_be_left_out_when_agent_is_given() {
    let manifest = one_task_feature("no-agent", "", "only")
        .replace("  agent:\n    command: [\"unused-agent\"]\n", "");
    Project::run_ok(&manifest, DONE);
}

#[test]
fn spec_verify_as_a_bool_is_refused_naming_the_field() {
    let manifest = one_task_feature("verified", "  verify: true\n", "only");
    let project = Project::new(&manifest, DONE);
    let output = project.run_exiting(&[], 3);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_mentions(&stderr, &["spec.verify"]);
    assert!(!project.state().exists(), "no run state is created");
}

#[test]
fn a_task_that_keeps_ending_without_a_verdict_fails_and_says_so() {
    let silent = "default:\n  - text: \"I looked at {task}.\"\n";
    let manifest = one_task_feature("silent", "", "quiet");
    let project = Project::new(&manifest, silent);
    let output = project.run_exiting(&[], 1);
    assert_eq!(project.attempts().len(), 5);
    assert_printed(&output, "without a verdict");
}

#[test]
fn a_retry_backoff_is_announced_while_nothing_runs() {
    let script = "default:\n  - text: \"<task-done>{task}</task-done>\"\ntasks:\n  only:\n    \
                  - [ {text: \"<task-failed>{task}</task-failed>\"} ]\n    \
                  - [ {text: \"<task-done>{task}</task-done>\"} ]\n";
    let project = Project::new(&one_task_feature("wait", "", "only"), script);
    let output = project.run_to_success(&[]);
    let waits: Vec<serde_json::Value> = local_run::json_events(&output)
        .into_iter()
        .filter(|e| e["event"] == "waiting")
        .collect();
    assert_eq!(waits.len(), 1, "{}", describe(&output));
    assert!(waits[0]["waitMs"].as_i64().is_some_and(|ms| ms > 0));
}

/// A manifest whose agent, a shell that starts the scripted agent only when `GREETING` is
/// `hello`, gets `GREETING=hello` from `spec.agent.env` and more from a Secret (`envFrom`)
/// a local run cannot read.
fn feature_with_agent_env(project: &Project) -> String {
    let check = format!(
        "test \"$GREETING\" = hello || {{ echo \"GREETING is [$GREETING]\" >&2; exit 1; }}; \
         exec {} agent script {}",
        env!("CARGO_BIN_EXE_ralph"),
        project.path("script.yaml").display()
    );
    let command = serde_json::to_string(&["sh", "-c", &check]).expect("JSON");
    one_task_feature("env", "", "only").replace(
        "    command: [\"unused-agent\"]\n",
        &format!(
            "    command: {command}\n    env:\n      - name: GREETING\n        value: hello\n    \
             envFrom:\n      - secretRef:\n          name: agent-keys\n"
        ),
    )
}

/// `ralph run` of [`feature_with_agent_env`], its agent the manifest's.
fn run_with_agent_env() -> std::process::Output {
    let project = Project::new("", DONE);
    project.write_manifest(&feature_with_agent_env(&project));
    std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("run")
        .arg(project.path("feature.yaml"))
        .arg("--json")
        .output()
        .expect("ralph run")
}

#[test]
fn spec_agent_env_reaches_the_agent() {
    let output = run_with_agent_env();
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
}

#[test]
fn an_agent_env_from_a_secret_is_said_to_be_unset() {
    let output = run_with_agent_env();
    assert_mentions(
        &String::from_utf8_lossy(&output.stdout),
        &["spec.agent.envFrom", "a local run cannot do"],
    );
}

/// `ralph run config/samples/hello.yaml` with its scripted agent, in this repository, with
/// the state in `state` and `args` added.
fn hello_sample_run(state: &std::path::Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["run", "config/samples/hello.yaml", "--json", "--state"])
        .arg(state)
        .args([
            "--agent",
            "ralph agent script config/agent-scripts/hello.script.yaml",
        ])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("ralph run")
}

#[test]
fn the_hello_dry_run_leaves_the_programs_its_tasks_ask_for() {
    let workspace = tempfile::tempdir().expect("workspace");
    let state = tempfile::tempdir().expect("state");
    let output = hello_sample_run(
        state.path(),
        &["--workspace".as_ref(), workspace.path().as_os_str()],
    );
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let test = std::process::Command::new("sh")
        .arg("test.sh")
        .current_dir(workspace.path())
        .output()
        .expect("sh test.sh");
    assert_eq!(
        (
            exit_code(&test),
            String::from_utf8_lossy(&test.stdout).trim()
        ),
        (0, "ok"),
        "{}",
        describe(&test)
    );
}

/// `ralph run feature.yaml --agent AGENT` without `--json` (plain lines: not a terminal).
fn plain_run(project: &Project, agent: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("run")
        .arg(project.path("feature.yaml"))
        .args(["--agent", agent])
        .output()
        .expect("ralph run")
}

#[test]
fn the_plan_line_counts_one_task_in_the_singular() {
    let project = Project::new(&one_task_feature("single", "", "only"), DONE);
    let agent = format!(
        "ralph agent script {}",
        project.path("script.yaml").display()
    );
    let output = plain_run(&project, &agent);
    assert_mentions(
        &String::from_utf8_lossy(&output.stdout),
        &["feature single: 1 task, 0 done"],
    );
}

#[test]
fn a_run_stopped_by_a_misconfigured_agent_ends_halted_as_status_says() {
    let project = Project::new(&one_task_feature("halts", "", "only"), DONE);
    let output = plain_run(&project, "sh -c 'echo Hello there; sleep 60'");
    assert_eq!(exit_code(&output), 7, "{}", describe(&output));
    let summary = String::from_utf8_lossy(&output.stdout);
    assert_mentions(&summary, &["feature halts: Halted"]);
    assert!(!summary.contains("interrupted"), "{summary}");
    assert_printed(&project.ralph(&["status"]), "Halted");
}

#[test]
fn a_workspace_that_is_a_file_is_invalid_input_naming_it() {
    let project = Project::new(&one_task_feature("filed", "", "only"), DONE);
    let file = project.path("script.yaml").display().to_string();
    let output = project.run_exiting(&["--workspace", &file], 3);
    assert_mentions(
        &String::from_utf8_lossy(&output.stderr),
        &[&file, "is a file, not a directory"],
    );
}

#[test]
fn a_run_of_a_finished_feature_warns_of_nothing() {
    let spec = "  parallelism: 2\n  budget:\n    maxCostUSD: \"5\"\n";
    let manifest = feature_yaml("finished", spec, &independent(&["a", "b"]));
    let project = Project::run_ok(&manifest, DONE);
    let again = project.run_to_success(&[]);
    let warnings: Vec<serde_json::Value> = local_run::json_events(&again)
        .into_iter()
        .filter(|event| event["event"] == "warning")
        .collect();
    assert_eq!(warnings, Vec::<serde_json::Value>::new());
}

#[test]
fn a_sample_run_inside_ralphs_own_sources_is_refused_naming_workspace() {
    let state = tempfile::tempdir().expect("state");
    let output = hello_sample_run(state.path(), &[]);
    assert_eq!(exit_code(&output), 3, "{}", describe(&output));
    assert_mentions(
        &String::from_utf8_lossy(&output.stderr),
        &["ralph's own source tree", "--workspace"],
    );
    assert!(local_run::json_events(&output).is_empty(), "nothing ran");
}

#[test]
fn cat_as_the_agent_stops_the_run_misconfigured_without_charging_a_retry() {
    let project = Project::new(&one_task_feature("echoed", "", "only"), DONE);
    let output = plain_run(&project, "cat");
    assert_eq!(exit_code(&output), 7, "{}", describe(&output));
    assert_mentions(
        &String::from_utf8_lossy(&output.stdout),
        &["`cat` is not an ACP agent"],
    );
    let task = project.task("only");
    assert_eq!((task.phase, task.retry_count), (TaskPhase::Pending, 0));
    assert_eq!(project.attempt_outcomes(), ["misconfigured"]);
}
