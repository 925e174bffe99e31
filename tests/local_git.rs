//! `ralph run` in a git repository: every attempt works in its own worktree on its work
//! branch, and done work is integrated into the feature branch, concluded by the same
//! engine as on the cluster. Real repositories made with the `git` CLI, the real `ralph`
//! binary, the scripted agent writing files.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use std::path::Path;
use std::process::Command;

use local_run::{
    Project, assert_mentions, describe, feature_yaml, json_events, one_task_feature, task,
};

/// Runs git in `dir` and returns its trimmed stdout; fails the test on an error.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        describe(&output)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A project whose directory is a git repository with one commit (the manifest and the
/// script), `.ralph/` ignored.
fn git_project(manifest: &str, script: &str) -> Project {
    let project = Project::new(manifest, script);
    let dir = project.dir.path();
    std::fs::write(dir.join(".gitignore"), ".ralph/\n").expect("write .gitignore");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
    project
}

/// Commit subjects of `branch`, newest first.
fn subjects(project: &Project, branch: &str) -> Vec<String> {
    git(project.dir.path(), &["log", "--format=%s", branch])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A file's content on `branch`.
fn file_on(project: &Project, branch: &str, file: &str) -> String {
    git(project.dir.path(), &["show", &format!("{branch}:{file}")])
}

/// The worktree of attempt `number` of `task`.
fn worktree(project: &Project, task: &str, number: u32) -> std::path::PathBuf {
    project
        .state()
        .join("worktrees")
        .join(task)
        .join(format!("a{number}"))
}

fn warnings(output: &std::process::Output) -> Vec<String> {
    json_events(output)
        .into_iter()
        .filter(|e| e["event"] == "warning")
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect()
}

/// Asserts that the run warned with a message mentioning `part`.
fn assert_warned(output: &std::process::Output, part: &str) {
    assert!(
        warnings(output).iter().any(|w| w.contains(part)),
        "{}",
        describe(output)
    );
}

const DIAMOND: &str = r#"
tasks:
  top:
    - [ {tool: {path: top.txt, write: "top\n"}}, {text: "Wrote it. <task-done>top</task-done>"} ]
  left:
    - [ {tool: {path: top.txt, read: true, fail_text: "MISSING top.txt"}},
        {tool: {path: left.txt, write: "left\n"}}, {text: "Wrote it. <task-done>left</task-done>"} ]
  right:
    - [ {tool: {path: top.txt, read: true, fail_text: "MISSING top.txt"}},
        {tool: {path: right.txt, write: "right\n"}}, {text: "Wrote it. <task-done>right</task-done>"} ]
  bottom:
    - [ {tool: {path: left.txt, read: true, fail_text: "MISSING left.txt"}},
        {tool: {path: right.txt, read: true, fail_text: "MISSING right.txt"}},
        {tool: {path: bottom.txt, write: "bottom\n"}}, {text: "Wrote it. <task-done>bottom</task-done>"} ]
"#;

#[test]
fn a_diamond_lands_four_commits_on_the_feature_branch_and_dependents_see_their_blockers() {
    let project = git_project(
        &feature_yaml(
            "diamond",
            "",
            &[
                task("top", &[]),
                task("left", &["top"]),
                task("right", &["top"]),
                task("bottom", &["left", "right"]),
            ],
        ),
        DIAMOND,
    );

    let output = project.run_to_success(&["--parallel", "2"]);

    let subjects = subjects(&project, "ralph/diamond");
    for task in ["top", "left", "right", "bottom"] {
        assert!(
            subjects.contains(&format!("{task}: work of attempt 1")),
            "{task} missing in {subjects:?}"
        );
    }
    assert_eq!(subjects.len(), 5, "{subjects:?}");
    for task in ["left", "right", "bottom"] {
        let log = std::fs::read_to_string(
            project
                .state()
                .join("attempts")
                .join(format!("{task}-a1"))
                .join("runner.jsonl"),
        )
        .expect("runner log");
        assert!(!log.contains("MISSING"), "{task} missed a blocker's file");
    }
    assert_eq!(file_on(&project, "ralph/diamond", "bottom.txt"), "bottom");
    assert!(
        !project
            .state()
            .join("worktrees")
            .join("bottom")
            .join("a1")
            .exists(),
        "the worktree of integrated work is removed"
    );
    assert!(
        warnings(&output)
            .iter()
            .all(|w| !w.contains("one directory")),
        "{:?}",
        warnings(&output)
    );
}

#[test]
fn the_main_checkout_is_left_as_it_was() {
    let project = git_project(
        &one_task_feature("solo", "", "a"),
        "default:\n  - {tool: {path: a.txt, write: \"a\\n\"}}\n  - {text: \"<task-done>{task}</task-done>\"}\n",
    );

    project.run_to_success(&[]);

    assert!(
        !project.path("a.txt").exists(),
        "the agent wrote in its worktree"
    );
    assert_eq!(
        git(project.dir.path(), &["branch", "--show-current"]),
        "main"
    );
    assert_eq!(file_on(&project, "ralph/solo", "a.txt"), "a");
}

const SAME_LINE: &str = r#"
tasks:
  first:
    - [ {delay: 1s}, {tool: {path: shared.txt, write: "first\n"}}, {text: "<task-done>first</task-done>"} ]
  second:
    - [ {tool: {path: shared.txt, write: "second\n"}}, {delay: 3s}, {text: "<task-done>second</task-done>"} ]
    - [ {tool: {path: shared.txt, write: "first and second\n"}}, {text: "<task-done>second</task-done>"} ]
"#;

#[test]
fn parallel_tasks_editing_the_same_line_conflict_and_the_later_retries_on_the_new_head() {
    let project = git_project(
        &feature_yaml("lines", "", &[task("first", &[]), task("second", &[])]),
        SAME_LINE,
    );

    project.run_to_success(&["--parallel", "2"]);

    let outcomes: Vec<(String, String)> = project
        .attempts()
        .into_iter()
        .map(|a| (a.id, a.outcome.unwrap_or_default()))
        .collect();
    assert!(
        outcomes.contains(&("second-a1".to_owned(), "conflict".to_owned())),
        "{outcomes:?}"
    );
    let prompt = project.prompt("second-a2");
    assert_mentions(
        &prompt,
        &["conflicted with work integrated meanwhile by task first in shared.txt"],
    );
    let subjects = subjects(&project, "ralph/lines");
    assert_eq!(
        subjects[..2],
        ["second: work of attempt 2", "first: work of attempt 1"],
        "{subjects:?}"
    );
    assert_eq!(
        file_on(&project, "ralph/lines", "shared.txt"),
        "first and second"
    );
}

const CRASH: &str = r#"
tasks:
  t:
    - [ {tool: {path: half.txt, write: "half\n"}}, {exit: 3} ]
    - [ {tool: {path: whole.txt, write: "whole\n"}}, {text: "<task-done>t</task-done>"} ]
"#;

#[test]
fn a_crash_mid_task_commits_nothing_and_keeps_its_worktree_until_reset() {
    let project = git_project(&one_task_feature("crash", "", "t"), CRASH);

    project.run_to_success(&[]);

    let subjects = subjects(&project, "ralph/crash");
    assert_eq!(subjects, ["t: work of attempt 2", "initial"]);
    let kept = worktree(&project, "t", 1);
    assert!(
        kept.join("half.txt").exists(),
        "the crashed attempt's worktree is kept"
    );
    let show = project.ralph_ok(&["task", "show", "t"]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains(&format!("worktree kept at {}", kept.display())),
        "{show}"
    );

    project.ralph_ok(&["task", "reset", "t"]);

    assert!(!kept.exists(), "reset removes the kept worktree");
    let branches = git(project.dir.path(), &["branch", "--list", "ralph-work/*"]);
    assert_eq!(branches, "", "reset removes the work branch");
}

#[test]
fn done_with_nothing_changed_says_so_and_succeeds() {
    let project = git_project(
        &one_task_feature("idle", "", "t"),
        "default:\n  - {text: \"Nothing to do. <task-done>{task}</task-done>\"}\n",
    );
    let base = git(project.dir.path(), &["rev-parse", "HEAD"]);

    let output = project.run_to_success(&[]);

    assert_eq!(git(project.dir.path(), &["rev-parse", "ralph/idle"]), base);
    assert_warned(&output, "unchanged: nothing to commit");
    assert_eq!(project.attempt_outcomes(), ["done"]);
}

#[test]
fn without_git_parallel_attempts_share_the_directory_with_a_warning() {
    let project = Project::new(
        &feature_yaml("plain", "", &[task("a", &[]), task("b", &[])]),
        "default:\n  - {text: \"<task-done>{task}</task-done>\"}\n",
    );

    let output = project.run_to_success(&["--parallel", "2"]);

    assert_warned(&output, "one directory");
}

#[test]
fn a_repo_that_is_not_a_git_repository_is_refused_naming_it() {
    let project = Project::new(
        &one_task_feature("plain", "", "a"),
        "default:\n  - {text: \"<task-done>{task}</task-done>\"}\n",
    );
    let dir = project.dir.path().display().to_string();

    let output = project.run(&["--repo", &dir]);

    assert_ne!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_mentions(&stderr, &["not a git repository"]);
    assert!(stderr.contains(&dir), "{stderr}");
}

/// A git project of the Feature `verified` (verified by an agent) whose task `api` plays
/// one step list (a YAML flow sequence) per attempt, in order.
fn verified_project(attempts: &[&str]) -> Project {
    let mut script = "tasks:\n  api:\n".to_owned();
    for steps in attempts {
        script.push_str(&format!("    - {steps}\n"));
    }
    git_project(
        &one_task_feature("verified", "  verify:\n    agent: true\n", "api"),
        &script,
    )
}

#[test]
fn a_verifier_checks_the_work_in_its_worktree_and_its_pass_integrates_it() {
    let project = verified_project(&[
        r#"[ {tool: {path: api.txt, write: "api\n"}}, {text: "<task-done>api</task-done>"} ]"#,
        r#"[ {tool: {path: api.txt, read: true, fail_text: "MISSING api.txt"}}, {text: "Looks right. <verify-pass>api</verify-pass>"} ]"#,
    ]);

    project.run_to_success(&[]);

    let log = project.runner_log("api-a2");
    assert!(!log.contains("MISSING"), "the verifier saw the work");
    assert_eq!(
        subjects(&project, "ralph/verified"),
        ["api: work of attempt 1", "initial"]
    );
    assert!(
        !worktree(&project, "api", 1).exists(),
        "integrated: removed"
    );
}

#[test]
fn work_a_verifier_rejects_is_not_integrated() {
    let project = verified_project(&[
        r#"[ {tool: {path: api.txt, write: "wrong\n"}}, {text: "<task-done>api</task-done>"} ]"#,
        r#"[ {text: "Wrong answer. <verify-fail>api</verify-fail>"} ]"#,
        r#"[ {tool: {path: api.txt, write: "right\n"}}, {text: "<task-done>api</task-done>"} ]"#,
        r#"[ {text: "Right. <verify-pass>api</verify-pass>"} ]"#,
    ]);

    project.run_to_success(&[]);

    assert_eq!(
        subjects(&project, "ralph/verified"),
        ["api: work of attempt 3", "initial"]
    );
    assert_eq!(file_on(&project, "ralph/verified", "api.txt"), "right");
    assert!(
        worktree(&project, "api", 1).join("api.txt").exists(),
        "the rejected work is kept for a look"
    );
}

#[test]
fn a_verifier_passing_work_that_changed_nothing_completes_without_a_commit() {
    let project = verified_project(&[
        r#"[ {text: "Already there. <task-done>api</task-done>"} ]"#,
        r#"[ {text: "Indeed. <verify-pass>api</verify-pass>"} ]"#,
    ]);
    let base = git(project.dir.path(), &["rev-parse", "HEAD"]);

    project.run_to_success(&[]);

    assert_eq!(project.attempt_outcomes(), ["done", "done"]);
    assert_eq!(
        git(project.dir.path(), &["rev-parse", "ralph/verified"]),
        base
    );
    assert!(!worktree(&project, "api", 1).exists(), "finished: removed");
}

/// A git project of the Feature `name` whose task `a` writes `a.txt`, with the remote
/// `origin`: an empty bare repository.
fn project_with_remote(name: &str) -> (Project, tempfile::TempDir) {
    let project = git_project(
        &one_task_feature(name, "", "a"),
        "default:\n  - {tool: {path: a.txt, write: \"a\\n\"}}\n  - {text: \"<task-done>{task}</task-done>\"}\n",
    );
    let remote = tempfile::tempdir().expect("remote directory");
    git(remote.path(), &["init", "-q", "--bare"]);
    let url = remote.path().display().to_string();
    git(project.dir.path(), &["remote", "add", "origin", &url]);
    (project, remote)
}

#[test]
fn with_a_push_remote_the_feature_branch_is_pushed_after_each_integration() {
    let (project, remote) = project_with_remote("pushed");

    project.run_to_success(&["--push-remote", "origin"]);

    assert_eq!(
        git(remote.path(), &["rev-parse", "refs/heads/ralph/pushed"]),
        git(project.dir.path(), &["rev-parse", "ralph/pushed"])
    );
}

#[test]
fn without_a_push_remote_nothing_is_pushed() {
    let (project, remote) = project_with_remote("local");

    project.run_to_success(&[]);

    assert_eq!(git(remote.path(), &["for-each-ref"]), "");
}

const WRITES_A: &str = "default:\n  - {tool: {path: a.txt, write: \"a\\n\"}}\n  - {text: \"<task-done>{task}</task-done>\"}\n";

#[test]
fn done_work_is_committed_as_the_repositorys_own_user() {
    let project = git_project(&one_task_feature("authored", "", "a"), WRITES_A);
    let dir = project.dir.path();
    git(dir, &["config", "user.name", "Ada Lovelace"]);
    git(dir, &["config", "user.email", "ada@example.com"]);
    project.run_to_success(&[]);
    assert_eq!(
        git(dir, &["log", "-1", "--format=%an <%ae>", "ralph/authored"]),
        "Ada Lovelace <ada@example.com>"
    );
}

#[test]
fn the_state_never_shows_as_untracked_in_the_repository() {
    let project = git_project(&one_task_feature("quiet", "", "a"), WRITES_A);
    let dir = project.dir.path();
    std::fs::remove_file(dir.join(".gitignore")).expect("remove .gitignore");
    git(dir, &["commit", "-q", "-am", "no ignore file"]);
    project.run_to_success(&[]);
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
}

#[test]
fn a_repository_without_a_commit_is_refused_up_front_naming_the_fix() {
    let project = Project::new(&one_task_feature("unborn", "", "a"), WRITES_A);
    git(project.dir.path(), &["init", "-q", "-b", "main"]);
    let output = project.run(&[]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    assert_mentions(
        &String::from_utf8_lossy(&output.stderr),
        &["has no commit yet", "git commit --allow-empty"],
    );
    assert!(project.attempts().is_empty(), "no attempt started");
}

#[test]
fn reset_removes_the_kept_worktrees_and_keeps_the_feature_branch() {
    let project = git_project(&one_task_feature("over", "", "t"), CRASH);
    project.run_to_success(&[]);
    let kept = worktree(&project, "t", 1);
    assert!(kept.exists(), "the crashed attempt's worktree is kept");
    let reset = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["reset", "feature.yaml"])
        .current_dir(project.dir.path())
        .output()
        .expect("ralph reset");
    assert_eq!(reset.status.code(), Some(0), "{}", describe(&reset));
    assert!(!kept.exists(), "the worktree is removed");
    let dir = project.dir.path();
    assert_eq!(git(dir, &["branch", "--list", "ralph-work/*"]), "");
    assert_eq!(file_on(&project, "ralph/over", "whole.txt"), "whole");
}
