//! Planning in `ralph run` (docs/planning.md), end to end: the real binary, the real runner
//! and the scripted agent playing the planner (it writes the answer file the prompt names)
//! and the workers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, assert_mentions, describe, exit_code, stdout};
use ralph::engine::dag::TaskPhase;

/// A Feature with a spec, `spec.planning` (with `planning` lines indented 4 spaces) and
/// the hand-written `tasks` lines (indented 4 spaces), if any.
fn planning_feature(planning: &str, tasks: &str) -> String {
    let tasks = if tasks.is_empty() {
        String::new()
    } else {
        format!("  tasks:\n{tasks}")
    };
    format!(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: planned\nspec:\n  \
         context:\n    spec:\n      inline: Build a word counter with a test and a README.\n  \
         planning:\n    maxTasks: 10\n{planning}  agent:\n    command: [\"unused-agent\"]\n  \
         retry:\n    backoffBaseSeconds: 1\n    backoffMaxSeconds: 1\n{tasks}"
    )
}

/// The steps of a planning attempt that writes `tasks` (and `document`, when given) to the
/// answer directory, as a YAML list item of the script (indented 6 spaces).
fn planner_writes(tasks: &str, document: Option<&str>) -> String {
    let quote = |text: &str| serde_json::to_string(text).unwrap();
    let mut steps = String::new();
    if let Some(document) = document {
        steps.push_str(&format!(
            "      - tool: {{path: .ralph-planning/plan.md, write: {}}}\n",
            quote(document)
        ));
    }
    steps.push_str(&format!(
        "      - tool: {{path: .ralph-planning/tasks.yaml, write: {}}}\n",
        quote(tasks)
    ));
    steps.push_str("      - text: \"The plan is written.\"\n");
    steps
}

/// A script whose planning attempts do `attempts` in turn (the last repeats) and whose
/// other tasks are done at once.
fn script(attempts: &[String]) -> String {
    let mut yaml = String::from(
        "default:\n  - text: \"Did {task}. <task-done>{task}</task-done>\"\ntasks:\n  planning:\n",
    );
    for steps in attempts {
        yaml.push_str("    -\n");
        yaml.push_str(steps);
    }
    yaml
}

const DIAMOND: &str = "tasks:
  - {name: count, title: Write count.sh, acceptance: [counts words]}
  - {name: test, dependsOn: [count], verify: {command: sh test.sh}}
  - {name: readme, dependsOn: [count], acceptance: [names both scripts]}
  - {name: review, dependsOn: [test, readme], acceptance: [REVIEW.md written]}
";

fn planned_diamond() -> Project {
    let project = Project::new(
        &planning_feature("", ""),
        &script(&[planner_writes(DIAMOND, Some("# Plan\nCount first."))]),
    );
    project.run_to_success(&["--parallel", "1"]);
    project
}

#[test]
fn a_spec_without_tasks_is_planned_then_built_to_complete() {
    let project = planned_diamond();
    assert_eq!(
        project.started_order(),
        ["planning", "count", "test", "readme", "review"]
    );
    let tasks = project.store().tasks().unwrap();
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Done),
        "{tasks:?}"
    );
}

#[test]
fn planned_tasks_carry_their_checks_and_the_plan_document_into_the_prompts() {
    let project = planned_diamond();
    let prompt = project.prompt("test-a1");
    assert_mentions(&prompt, &["Check it with `sh test.sh`", "Count first."]);
}

#[test]
fn the_planning_prompt_names_the_answer_file_and_the_check_command() {
    let project = planned_diamond();
    let prompt = project.prompt("planning-a1");
    assert_mentions(
        &prompt,
        &[
            ".ralph-planning/tasks.yaml",
            "plan check --manifest",
            "Build a word counter",
        ],
    );
}

#[test]
fn a_second_run_keeps_the_plan_and_plans_nothing_again() {
    let project = planned_diamond();
    let before = project.attempts().len();
    project.run_to_success(&[]);
    assert_eq!(project.attempts().len(), before);
    assert!(!project.path(".ralph-planning").exists());
}

#[test]
fn planned_tasks_are_listed_like_any_task_and_the_plan_is_shown_with_its_hash() {
    let project = planned_diamond();
    let list = stdout(&project.ralph_ok(&["task", "list"]));
    assert_mentions(&list, &["count", "readme", "review"]);
    let show = stdout(&project.ralph_ok(&["plan", "show"]));
    assert_mentions(
        &show,
        &["plan ", "(4 tasks)", "level 3:", "review", "approved"],
    );
}

#[test]
fn planned_tasks_may_depend_on_hand_written_ones_which_the_planner_sees() {
    let hand_written = "    - name: setup\n      title: Set the project up\n";
    let answer = "tasks:\n  - {name: build, dependsOn: [setup], acceptance: [it builds]}\n";
    let project = Project::new(
        &planning_feature("", hand_written),
        &script(&[planner_writes(answer, None)]),
    );
    project.run_to_success(&[]);
    assert_eq!(project.started_order(), ["planning", "setup", "build"]);
    assert_mentions(
        &project.prompt("planning-a1"),
        &["Hand-written tasks", "setup: Set the project up"],
    );
}

#[test]
fn an_invalid_plan_goes_back_to_the_planner_with_its_problems_and_is_corrected() {
    let cycle = "tasks:
  - {name: a, dependsOn: [b], acceptance: [x]}
  - {name: b, dependsOn: [a], acceptance: [x]}
";
    let fixed =
        "tasks:\n  - {name: a, acceptance: [x]}\n  - {name: b, dependsOn: [a], acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("", ""),
        &script(&[planner_writes(cycle, None), planner_writes(fixed, None)]),
    );
    project.run_to_success(&[]);
    assert_eq!(project.started_order(), ["planning", "planning", "a", "b"]);
    assert_mentions(
        &project.prompt("planning-a2"),
        &["Your previous answer was refused", "cycle"],
    );
    assert_eq!(&project.attempt_outcomes()[..2], ["invalid", "planned"]);
}

#[test]
fn a_planner_answering_prose_is_told_to_write_the_file() {
    let prose = "      - text: \"First write the parser, then its tests.\"\n".to_owned();
    let fixed = "tasks:\n  - {name: a, acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("", ""),
        &script(&[prose, planner_writes(fixed, None)]),
    );
    project.run_to_success(&[]);
    assert_mentions(
        &project.prompt("planning-a2"),
        &["no answer: the task list was not written to"],
    );
}

#[test]
fn planning_stops_after_too_many_invalid_answers_and_creates_no_task() {
    let unknown = "tasks:\n  - {name: a, dependsOn: [ghost], acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("    maxInvalidAnswers: 1\n", ""),
        &script(&[planner_writes(unknown, None)]),
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 1, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &["planning failed", "ghost", "maxInvalidAnswers is 1"],
    );
    assert_eq!(project.attempt_outcomes(), ["invalid", "invalid"]);
    assert!(project.store().tasks().unwrap().is_empty());
}

#[test]
fn a_name_clash_with_a_hand_written_task_is_refused() {
    let clash = "tasks:\n  - {name: setup, acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("    maxInvalidAnswers: 0\n", "    - name: setup\n"),
        &script(&[planner_writes(clash, None)]),
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 1, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &["task setup: a hand-written task has this name"],
    );
}

#[test]
fn more_tasks_than_max_tasks_are_refused_and_nothing_is_created() {
    let project = Project::new(
        &planning_feature("    maxInvalidAnswers: 0\n", "").replace("maxTasks: 10", "maxTasks: 3"),
        &script(&[planner_writes(DIAMOND, None)]),
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 1, "{}", describe(&output));
    assert_mentions(&stdout(&output), &["4 tasks, more than maxTasks (3)"]);
    assert!(project.store().tasks().unwrap().is_empty());
}

fn manual() -> Project {
    let project = Project::new(
        &planning_feature("    approval: Manual\n", ""),
        &script(&[planner_writes(DIAMOND, None)]),
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 8, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &[
            "waiting for approval",
            "ralph plan approve",
            "ralph plan reject",
        ],
    );
    project
}

/// The current plan's hash, as `ralph plan show --json` prints it.
fn plan_hash(project: &Project) -> String {
    let json: serde_json::Value =
        serde_json::from_slice(&project.ralph_ok(&["plan", "show", "--json"]).stdout).unwrap();
    json["status"]["dagHash"].as_str().unwrap().to_owned()
}

#[test]
fn a_manual_plan_waits_for_approval_and_creates_no_task_until_then() {
    let project = manual();
    assert!(project.store().tasks().unwrap().is_empty());
    let again = project.run(&[]);
    assert_eq!(exit_code(&again), 8, "{}", describe(&again));
    assert_eq!(project.attempt_outcomes(), ["planned"]);
}

#[test]
fn an_approved_plan_runs_on_the_next_run() {
    let project = manual();
    let hash = plan_hash(&project);
    project.ralph_ok(&["plan", "approve", "--hash", &hash[..8]]);
    project.run_to_success(&[]);
    assert_eq!(project.started_order().len(), 5);
}

/// Runs `ralph plan approve` on `project`'s state on a terminal (util-linux `script` gives
/// it one), typing `typed`; returns what the terminal showed and the exit code.
fn approve_on_a_terminal(project: &Project, typed: &str) -> (String, i32) {
    use std::io::Write as _;
    let command = format!(
        "{} plan approve --state {}",
        env!("CARGO_BIN_EXE_ralph"),
        project.state().display()
    );
    let mut child = std::process::Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script runs");
    // Kept open until ralph is over: at its end, `script` would hang up the terminal.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(typed.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    (stdout(&output), exit_code(&output))
}

#[test]
fn approve_on_a_terminal_shows_the_plan_and_asks_first() {
    let project = manual();
    let hash = plan_hash(&project);

    let (terminal, code) = approve_on_a_terminal(&project, "y\n");

    assert_eq!(code, 0, "{terminal}");
    assert_mentions(
        &terminal,
        &[
            "level 3:",
            &format!("Approve plan {hash}? [y/N]"),
            "approved plan",
        ],
    );
    project.run_to_success(&[]);
}

#[test]
fn approve_on_a_terminal_answered_no_changes_nothing() {
    let project = manual();

    let (terminal, code) = approve_on_a_terminal(&project, "n\n");

    assert_eq!(code, 1, "{terminal}");
    assert_mentions(&terminal, &["nothing approved"]);
    let again = project.run(&[]);
    assert_eq!(exit_code(&again), 8, "{}", describe(&again));
}

#[test]
fn approving_a_stale_hash_changes_nothing_and_says_so() {
    let project = manual();
    let error = project.ralph_failing(&["plan", "approve", "--hash", "0123456789abcdef"]);
    assert_mentions(&error, &["is not the current plan", "nothing approved"]);
    let again = project.run(&[]);
    assert_eq!(exit_code(&again), 8, "{}", describe(&again));
}

#[test]
fn a_rejected_plan_is_planned_again_with_the_comment() {
    let project = manual();
    project.ralph_ok(&["plan", "reject", "--comment", "split the review in two"]);
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 8, "{}", describe(&output));
    assert_mentions(
        &project.prompt("planning-a2"),
        &["Your previous plan was rejected", "split the review in two"],
    );
}

#[test]
fn plan_check_prints_every_problem_of_an_answer() {
    let project = Project::new(&planning_feature("", "    - name: setup\n"), "");
    std::fs::write(
        project.path("answer.yaml"),
        "tasks:\n  - {name: setup, acceptance: [x]}\n  - {name: b, dependsOn: [ghost]}\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["plan", "check"])
        .arg(project.path("answer.yaml"))
        .arg("--manifest")
        .arg(project.path("feature.yaml"))
        .output()
        .unwrap();
    assert_eq!(exit_code(&output), 3, "{}", describe(&output));
    assert_mentions(
        &String::from_utf8_lossy(&output.stderr),
        &[
            "3 problems",
            "hand-written task has this name",
            "names no check",
        ],
    );
}

#[test]
fn the_from_spec_sample_plans_four_tasks_and_builds_them() {
    let workspace = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["run", "config/samples/from-spec.yaml", "--json", "--state"])
        .arg(state.path())
        .arg("--workspace")
        .arg(workspace.path())
        .args([
            "--agent",
            "ralph agent script config/agent-scripts/from-spec.script.yaml",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let test = std::process::Command::new("sh")
        .arg("test.sh")
        .current_dir(workspace.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&test.stdout).trim(), "ok");
}

#[test]
fn a_planned_task_that_fails_for_good_is_replanned_and_the_feature_completes() {
    let first = "tasks:
  - {name: setup, acceptance: [x]}
  - {name: fragile, dependsOn: [setup], maxRetries: 0, acceptance: [x]}
  - {name: finish, dependsOn: [fragile], acceptance: [x]}
";
    let revised = "tasks:
  - {name: sturdy, acceptance: [x]}
  - {name: finish, dependsOn: [sturdy, setup], acceptance: [x]}
";
    let mut script = script(&[planner_writes(first, None), planner_writes(revised, None)]);
    script.push_str(
        "  fragile:\n    - text: \"It cannot work this way. <task-failed>fragile</task-failed>\"\n",
    );
    let project = Project::new(
        &planning_feature("    replan: OnFailure\n    maxReplans: 1\n", ""),
        &script,
    );
    project.run_to_success(&[]);
    assert_eq!(
        project.started_order(),
        [
            "planning", "setup", "fragile", "planning", "sturdy", "finish"
        ]
    );
    assert_mentions(
        &project.prompt("planning-a2"),
        &[
            "Revise the plan: a task failed for good",
            "The task `fragile` failed",
            "Done, kept as they are (you may depend on them): setup",
            "name: finish",
        ],
    );
    let names: Vec<String> = project
        .store()
        .tasks()
        .unwrap()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, ["setup", "sturdy", "finish"]);
}

#[test]
fn without_replan_a_failed_planned_task_fails_the_feature() {
    let first = "tasks:\n  - {name: fragile, maxRetries: 0, acceptance: [x]}\n";
    let mut script = script(&[planner_writes(first, None)]);
    script.push_str("  fragile:\n    - text: \"No. <task-failed>fragile</task-failed>\"\n");
    let project = Project::new(&planning_feature("", ""), &script);
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 1, "{}", describe(&output));
    assert_eq!(project.started_order(), ["planning", "fragile"]);
}

/// A script whose planner plans `build` alone, and whose `build` proposes `proposal`
/// (YAML) before its verdict.
fn proposing(proposal: &str) -> String {
    let mut script = script(&[planner_writes(
        "tasks:\n  - {name: build, acceptance: [x]}\n",
        None,
    )]);
    let text = format!(
        "Built.\n<ralph:propose-tasks>\n{proposal}</ralph:propose-tasks>\n<task-done>build</task-done>"
    );
    script.push_str(&format!(
        "  build:\n    - text: {}\n",
        serde_json::to_string(&text).unwrap()
    ));
    script
}

const DOCS: &str = "tasks:\n  - {name: docs, dependsOn: [build], acceptance: [README.md]}\n";

#[test]
fn a_proposed_follow_up_task_joins_the_plan_and_runs() {
    let project = Project::new(&planning_feature("", ""), &proposing(DOCS));
    project.run_to_success(&[]);
    assert_eq!(project.started_order(), ["planning", "build", "docs"]);
    assert_mentions(
        &project.prompt("build-a1"),
        &["<ralph:propose-tasks>", "Follow-up tasks"],
    );
}

#[test]
fn task_list_says_whether_a_task_is_hand_written_planned_or_proposed() {
    let hand_written = "    - name: setup\n      title: Set the project up\n";
    let project = Project::new(&planning_feature("", hand_written), &proposing(DOCS));
    project.run_to_success(&[]);

    let listed: serde_json::Value =
        serde_json::from_slice(&project.ralph_ok(&["task", "list", "--json"]).stdout).unwrap();
    let origins: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|line| {
            (
                line["task"].as_str().unwrap(),
                line["origin"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        origins,
        [
            ("setup", "hand-written"),
            ("build", "planned"),
            ("docs", "proposed")
        ]
    );
    assert_mentions(
        &stdout(&project.ralph_ok(&["task", "list"])),
        &["FROM", "hand-written", "planned", "proposed"],
    );
}

#[test]
fn a_proposed_task_waits_for_approval_when_approval_is_manual() {
    let project = Project::new(
        &planning_feature("    approval: Manual\n", ""),
        &proposing(DOCS),
    );
    let hash = {
        let output = project.run(&[]);
        assert_eq!(exit_code(&output), 8, "{}", describe(&output));
        plan_hash(&project)
    };
    project.ralph_ok(&["plan", "approve", "--hash", &hash]);
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 8, "{}", describe(&output));
    assert_mentions(&stdout(&output), &["(2 tasks)", "waiting for approval"]);
    project.ralph_ok(&["plan", "approve"]);
    project.run_to_success(&[]);
    assert_eq!(project.started_order(), ["planning", "build", "docs"]);
}

#[test]
fn a_proposal_beyond_max_tasks_is_refused_and_said() {
    let project = Project::new(
        &planning_feature("", "").replace("maxTasks: 10", "maxTasks: 1"),
        &proposing(DOCS),
    );
    let output = project.run_to_success(&[]);
    assert_mentions(
        &stdout(&output),
        &[
            "its proposed follow-up tasks were refused",
            "more than maxTasks (0)",
        ],
    );
    assert_eq!(project.started_order(), ["planning", "build"]);
}

#[test]
fn status_and_the_summary_show_the_planning() {
    let project = planned_diamond();
    let status = stdout(&project.ralph_ok(&["status"]));
    assert_mentions(
        &status,
        &[
            "planning: plan ",
            "(4 tasks), approved",
            "1 planning attempts",
        ],
    );
    let output = project.run_to_success(&["--limit", "0"]);
    let summary = stdout(&output);
    assert_mentions(
        &summary,
        &["\"task\":\"planning\"", "\"lastOutcome\":\"planned\""],
    );
}

#[test]
fn validate_says_a_feature_without_tasks_will_be_planned_not_that_it_has_no_plan() {
    let project = Project::new(&planning_feature("", ""), "");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("validate")
        .arg(project.path("feature.yaml"))
        .output()
        .unwrap();
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let printed = stdout(&output);
    assert_mentions(&printed, &["plans up to 10 more tasks"]);
    assert!(!printed.contains("NoPlan"), "{printed}");
}

#[test]
fn a_planner_that_crashes_is_retried_like_any_attempt() {
    let crash = "      - stderr: \"Error: connection reset\"\n      - exit: 1\n".to_owned();
    let answer = "tasks:\n  - {name: a, acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("", ""),
        &script(&[crash, planner_writes(answer, None)]),
    );
    project.run_to_success(&[]);
    assert_eq!(&project.attempt_outcomes()[..2], ["crashed", "planned"]);
}

#[test]
fn planning_attempts_count_against_max_iterations() {
    let unknown = "tasks:\n  - {name: a, dependsOn: [ghost], acceptance: [x]}\n";
    let project = Project::new(
        &planning_feature("", "").replace("  retry:", "  maxIterations: 2\n  retry:"),
        &script(&[planner_writes(unknown, None)]),
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 5, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &["limit reached: 2 attempts started (maxIterations)"],
    );
    assert_eq!(project.attempts().len(), 2);
}

/// Runs git in `dir`; fails the test on an error. Returns stdout.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        describe(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn in_a_git_repository_the_planner_sees_its_files_and_commits_nothing() {
    let answer = "tasks:\n  - {name: a, acceptance: [x]}\n";
    let script = format!(
        "{}  a:\n    - tool: {{path: a.txt, write: \"a\\n\"}}\n    - text: \"<task-done>a</task-done>\"\n",
        script(&[planner_writes(answer, None)])
    );
    let project = Project::new(&planning_feature("", ""), &script);
    let dir = project.dir.path();
    std::fs::create_dir(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "// the code\n").unwrap();
    std::fs::write(dir.join(".gitignore"), ".ralph/\n").unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
    project.run_to_success(&[]);
    assert_mentions(
        &project.prompt("planning-a1"),
        &["## The repository", "src/lib.rs"],
    );
    let files = git(dir, &["ls-tree", "-r", "--name-only", "ralph/planned"]);
    assert!(files.contains("a.txt"), "{files}");
    assert!(!files.contains(".ralph-planning"), "{files}");
    assert!(git(dir, &["status", "--porcelain"]).trim().is_empty());
}

#[test]
fn the_planner_asks_its_agent_for_the_planning_model() {
    let answer = "tasks:\n  - {name: a, acceptance: [x]}\n";
    let script = format!(
        "models: [small, big]\n{}",
        script(&[planner_writes(answer, None)])
    );
    let project = Project::new(&planning_feature("    model: big\n", ""), &script);
    project.run_to_success(&[]);
    let log = project.runner_log("planning-a1");
    assert!(
        log.contains("\"event\":\"model_chosen\",\"model\":\"big\""),
        "{log}"
    );
}

#[test]
fn removing_spec_planning_drops_the_planned_tasks() {
    let project = planned_diamond();
    let manifest = std::fs::read_to_string(project.path("feature.yaml")).unwrap();
    let without = manifest.replace("  planning:\n    maxTasks: 10\n", "");
    project.write_manifest(&format!("{without}  tasks:\n    - name: only\n"));
    project.run_to_success(&[]);
    let names: Vec<String> = project
        .store()
        .tasks()
        .unwrap()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, ["only"]);
}
