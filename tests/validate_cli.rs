//! `ralph validate` on the samples in config/samples, run as the real binary.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::mentions;

use std::process::{Command, Output};

use mentions::assert_mentions;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn validate(files: &[&str]) -> Run {
    let output: Output = match Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("validate")
        .args(files)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RALPH_LOG")
        .output()
    {
        Ok(output) => output,
        Err(error) => panic!("cannot run ralph: {error}"),
    };
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn valid(files: &[&str]) -> Vec<String> {
    let run = validate(files);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    run.stdout.lines().map(str::to_owned).collect()
}

fn invalid(file: &str) -> String {
    let run = validate(&[file]);
    assert_eq!(
        run.code,
        Some(3),
        "stdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stdout.is_empty(),
        "nothing is printed on stdout: {}",
        run.stdout
    );
    run.stderr
}

/// Asserts that validating `file` fails, reporting each of `problems` on stderr.
fn assert_reports(file: &str, problems: &[&str]) {
    let stderr = invalid(file);
    for problem in problems {
        assert!(stderr.contains(problem), "{problem:?} in:\n{stderr}");
    }
}

/// Asserts that validating the manifest `yaml` fails, reporting each of `problems`.
fn assert_text_reports(yaml: &str, problems: &[&str]) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("feature.yaml");
    std::fs::write(&path, yaml).expect("write the manifest");
    assert_reports(&path.display().to_string(), problems);
}

/// The task names of the tree lines (after the header), with their indentation.
fn tree(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .skip(1)
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            let name = line.split_whitespace().next().unwrap_or_default();
            format!("{}{}", " ".repeat(indent), name)
        })
        .collect()
}

fn line_of<'a>(lines: &'a [String], task: &str) -> &'a str {
    lines
        .iter()
        .find(|line| line.split_whitespace().next() == Some(task))
        .map_or("", String::as_str)
}

#[test]
fn hello_is_valid_and_prints_its_tasks_with_the_ready_one_first() {
    let lines = valid(&["config/samples/hello.yaml"]);
    assert_eq!(
        lines[0],
        "Feature hello (config/samples/hello.yaml): 4 tasks, 1 ready now"
    );
    assert_eq!(
        tree(&lines),
        [
            "  write-greeting",
            "  write-test",
            "  write-readme",
            "  review"
        ]
    );
}

#[test]
fn hello_marks_only_write_greeting_ready() {
    let lines = valid(&["config/samples/hello.yaml"]);
    assert!(line_of(&lines, "write-greeting").contains("<- ready #1"));
    for task in ["write-test", "write-readme", "review"] {
        assert!(
            !line_of(&lines, task).contains("ready #"),
            "{task} is not ready"
        );
    }
}

#[test]
fn hello_shows_each_task_priority_and_dependencies() {
    let lines = valid(&["config/samples/hello.yaml"]);
    let review = line_of(&lines, "review");
    assert_mentions(
        review,
        &["priority 0", "dependsOn: write-test, write-readme"],
    );
}

#[test]
fn diamond_starts_with_design_alone() {
    let lines = valid(&["config/samples/diamond.yaml"]);
    assert!(lines[0].ends_with("4 tasks, 1 ready now"));
    assert_eq!(tree(&lines)[0], "  design");
    assert!(line_of(&lines, "design").contains("<- ready #1"));
    assert!(line_of(&lines, "backend").contains("priority 1"));
}

#[test]
fn parent_children_indents_subtasks_and_orders_ready_ones_by_priority() {
    let lines = valid(&["config/samples/parent-children.yaml"]);
    assert_eq!(
        tree(&lines),
        [
            "  docs",
            "    install-guide",
            "    user-guide",
            "    api-reference",
            "  release"
        ]
    );
    assert!(line_of(&lines, "install-guide").contains("<- ready #1"));
    assert!(line_of(&lines, "user-guide").contains("<- ready #2"));
    assert!(
        !line_of(&lines, "docs").contains("ready #"),
        "a parent never runs itself"
    );
}

#[test]
fn standalone_task_joins_its_feature_with_its_dependency_mapped() {
    let lines = valid(&["config/samples/standalone-task.yaml"]);
    assert_eq!(tree(&lines), ["  write-code", "  calc-benchmark"]);
    let benchmark = line_of(&lines, "calc-benchmark");
    assert_mentions(
        benchmark,
        &["dependsOn: write-code", "(Task calc-benchmark)"],
    );
}

#[test]
fn several_files_print_every_feature_in_order() {
    let run = validate(&["config/samples/hello.yaml", "config/samples/diamond.yaml"]);
    assert_eq!(run.code, Some(0));
    let headers: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| line.starts_with("Feature "))
        .collect();
    assert_eq!(headers.len(), 2);
    assert!(headers[0].starts_with("Feature hello "));
    assert!(headers[1].starts_with("Feature diamond "));
}

#[test]
fn a_cycle_is_reported_with_its_path_and_file() {
    assert_reports(
        "config/samples/invalid/cycle.yaml",
        &[
            "error: config/samples/invalid/cycle.yaml:10 (document 1): Feature cycle: dependency cycle: plan -> test -> build -> plan",
        ],
    );
}

#[test]
fn an_unknown_dependency_names_the_task_and_the_missing_name() {
    assert_reports(
        "config/samples/invalid/unknown-dependency.yaml",
        &[
            "unknown-dependency.yaml:11 (document 1): Feature unknown-dependency: task \"deploy\" depends on unknown task \"package\"",
        ],
    );
}

#[test]
fn a_duplicate_name_is_reported() {
    assert_reports(
        "config/samples/invalid/duplicate-name.yaml",
        &["Feature duplicate-name: duplicate task name \"build\""],
    );
}

#[test]
fn a_typo_field_names_the_field_the_task_and_its_line() {
    assert_reports(
        "config/samples/invalid/typo-field.yaml",
        &[
            "error: config/samples/invalid/typo-field.yaml:12 (document 1): Feature typo-field: spec.tasks[test].dependOn: unknown field \"dependOn\" (did you mean \"dependsOn\"?)",
        ],
    );
}

#[test]
fn a_bad_task_name_is_reported_for_the_task_and_its_dependent() {
    assert_reports(
        "config/samples/invalid/bad-name.yaml",
        &[
            "spec.tasks[Write_Code].name: \"Write_Code\" is not a valid name",
            "spec.tasks[test].dependsOn[0]",
            "2 problems found",
        ],
    );
}

#[test]
fn problems_in_several_files_are_all_listed() {
    let run = validate(&[
        "config/samples/invalid/cycle.yaml",
        "config/samples/hello.yaml",
        "config/samples/invalid/duplicate-name.yaml",
    ]);
    assert_eq!(run.code, Some(3));
    assert!(run.stderr.contains("cycle.yaml"));
    assert!(run.stderr.contains("duplicate-name.yaml"));
    assert!(run.stderr.contains("2 problems found"), "{}", run.stderr);
}

#[test]
fn a_missing_file_is_a_problem_not_a_usage_error() {
    assert_reports(
        "config/samples/does-not-exist.yaml",
        &["config/samples/does-not-exist.yaml: cannot read the file"],
    );
}

#[test]
fn no_file_is_a_usage_error() {
    let run = validate(&[]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("<FILE>"), "{}", run.stderr);
}

const FEATURE_HEAD: &str = "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: f\nspec:\n  agent:\n    command: [agent]\n";

#[test]
fn a_tab_in_the_indentation_is_named_with_its_line() {
    let yaml = format!("{FEATURE_HEAD}  tasks:\n\t- name: a\n");
    assert_text_reports(&yaml, &["feature.yaml:9", "tab"]);
}

#[test]
fn a_cycle_is_reported_alongside_a_field_problem() {
    let yaml = format!(
        "{FEATURE_HEAD}  tasks:\n    - name: a\n      dependsOn: [b]\n      dependOn: [x]\n    - name: b\n      dependsOn: [a]\n"
    );
    assert_text_reports(&yaml, &["dependOn", "cycle"]);
}

#[test]
fn an_unknown_dependency_is_reported_alongside_a_field_problem() {
    let yaml = format!(
        "{FEATURE_HEAD}  parallelism: many\n  tasks:\n    - name: a\n      dependsOn: [ghost]\n"
    );
    assert_text_reports(&yaml, &["parallelism", "ghost"]);
}

#[test]
fn crds_into_a_closed_pipe_prints_no_error() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("crds")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ralph crds");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("first line");
    // The reader is gone now, as after `ralph crds | head -1`.
    let output = child.wait_with_output().expect("ralph crds ends");
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned()
        ),
        (Some(0), String::new())
    );
    assert!(!first.is_empty());
}

#[test]
fn validate_and_run_exit_alike_for_an_invalid_file() {
    let run = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["run", "config/samples/invalid/cycle.yaml", "--state"])
        .arg(tempfile::tempdir().expect("temporary directory").path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run ralph run");
    assert_eq!(
        run.status.code(),
        validate(&["config/samples/invalid/cycle.yaml"]).code
    );
}

/// What `ralph run --help` prints.
fn run_help() -> String {
    let help = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["run", "--help"])
        .output()
        .expect("run ralph run --help");
    String::from_utf8_lossy(&help.stdout).into_owned()
}

#[test]
fn run_help_lists_the_exit_codes() {
    assert_mentions(&run_help(), &["Exit codes:", "130"]);
}

#[test]
fn run_help_says_the_limit_exits_5() {
    let text = run_help();
    let limit = text
        .lines()
        .skip_while(|line| !line.contains("--limit"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert_mentions(&limit, &["exit 5"]);
    assert!(!limit.contains("exit 0"), "{limit}");
}

#[test]
fn validate_with_agent_accepts_a_feature_without_spec_agent_as_run_does() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("no-agent.yaml");
    std::fs::write(
        &file,
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: no-agent\nspec:\n  \
         tasks:\n    - name: only\n      title: Only\n      description: Do it.\n",
    )
    .expect("write manifest");
    let file = file.display().to_string();
    assert_eq!(validate(&[&file]).code, Some(3), "without --agent");
    valid(&["--agent", "claude-agent-acp", &file]);
}

#[test]
fn the_controller_without_a_kubeconfig_says_so_once_with_the_fix() {
    let home = tempfile::tempdir().expect("temporary home");
    let output = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["controller", "--ralph-image", "ralph:test"])
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("run ralph controller");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert_mentions(&stderr, &["KUBECONFIG"]);
}

#[test]
fn a_cycle_beside_another_problem_is_placed_at_its_task_as_run_places_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("cycle-and-more.yaml");
    let yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples/invalid/cycle.yaml"),
    )
    .expect("the cycle sample")
    .replace("  agent:\n    command: [\"claude-agent-acp\"]\n", "");
    std::fs::write(&file, &yaml).expect("write manifest");
    let file = file.display().to_string();
    let run = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["run", &file, "--agent", "x", "--state"])
        .arg(dir.path().join("state"))
        .output()
        .expect("run ralph run");
    let cycle_at = |stderr: &str| {
        stderr
            .lines()
            .find(|line| line.contains("dependency cycle"))
            .map(|line| line.trim_start_matches("error: "))
            .and_then(|line| line.split(": ").next().map(str::to_owned))
            .unwrap_or_default()
    };
    let placed_by_run = cycle_at(&String::from_utf8_lossy(&run.stderr));
    let placed_by_validate = cycle_at(&validate(&[&file]).stderr);
    assert!(
        !placed_by_run.ends_with(":1 (document 1)"),
        "{placed_by_run}"
    );
    assert_eq!(placed_by_validate, placed_by_run);
}
