//! The agent Pod's git steps (`ralph git prepare`, `ralph git finish`) as processes, the way
//! the Pod runs them, against a real git server (git daemon and git http-backend).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/git_server.rs"]
mod git_server;

use std::path::{Path, PathBuf};
use std::process::Command;

use git_server::{GitServer, HTTP_TOKEN, HTTP_USER, git};
use ralph::engine::attempt::AttemptResult;
use ralph::engine::sigils::{Sigils, Verdict};
use ralph::engine::testing;
use ralph::engine::workspace::{WorkspaceOutcome, WorkspaceReport};
use tempfile::TempDir;

const FEATURE: &str = "shop";
const FEATURE_BRANCH: &str = "ralph/shop";
const SECRET: &str = "repo-creds";

/// One attempt's Pod volumes: the workspace, the git steps' private state, the shared run
/// directory, the credentials Secret.
struct Attempt {
    _root: TempDir,
    task: String,
    number: u32,
    url: String,
    workspace: PathBuf,
    state: PathBuf,
    run: PathBuf,
    credentials: Option<PathBuf>,
}

impl Attempt {
    fn new(url: &str, task: &str, number: u32) -> Self {
        let root = tempfile::tempdir().expect("attempt dir");
        let dir = |name: &str| {
            let path = root.path().join(name);
            std::fs::create_dir_all(&path).expect("volume");
            path
        };
        Self {
            task: task.to_owned(),
            number,
            url: url.to_owned(),
            workspace: dir("workspace"),
            state: dir("git-state"),
            run: dir("run"),
            credentials: None,
            _root: root,
        }
    }

    fn with_token(mut self, token: &str) -> Self {
        let dir = self.state.parent().expect("root").join("git-credentials");
        std::fs::create_dir_all(&dir).expect("credentials");
        std::fs::write(dir.join("username"), HTTP_USER).expect("username");
        std::fs::write(dir.join("token"), token).expect("token");
        self.credentials = Some(dir);
        self
    }

    fn step(&self, step: &str, extra: &[&str]) -> (bool, WorkspaceReport) {
        let report = self.run.join(format!("{step}-report.json"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
        command
            .args(["git", step, "--url", &self.url, "--base-ref", "main"])
            .args(["--feature", FEATURE, "--task", &self.task])
            .args(["--attempt", &self.number.to_string()])
            .arg("--workspace")
            .arg(&self.workspace)
            .arg("--state-file")
            .arg(self.state.join("prepared.json"))
            .arg("--report-file")
            .arg(&report)
            .arg("--heartbeat-file")
            .arg(self.run.join("heartbeat"))
            .args(extra);
        if let Some(dir) = &self.credentials {
            command
                .arg("--credentials-dir")
                .arg(dir)
                .args(["--credentials-secret", SECRET]);
        }
        let output = command.output().expect("run ralph git");
        let text = std::fs::read_to_string(&report).unwrap_or_else(|_| {
            panic!(
                "no report from ralph git {step}: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        let report = serde_json::from_str(&text).expect("report parses");
        (output.status.success(), report)
    }

    fn prepare(&self) -> WorkspaceReport {
        let (ok, report) = self.step("prepare", &[]);
        assert!(ok, "prepare failed: {report:?}");
        report
    }

    /// The runner's result copy in the shared run directory.
    fn report_result(&self, result: &AttemptResult) {
        let json = serde_json::to_string(result).expect("result json");
        std::fs::write(self.run.join("result.json"), json).expect("result");
    }

    fn finish(&self) -> WorkspaceReport {
        let result = self.run.join("result.json");
        let (_, report) = self.step(
            "finish",
            &[
                "--result-file",
                &result.to_string_lossy(),
                "--runner-heartbeat-file",
                &self.run.join("heartbeat").to_string_lossy(),
                "--heartbeat-max-age",
                "1s",
            ],
        );
        report
    }

    fn write(&self, file: &str, contents: &str) {
        std::fs::write(self.workspace.join(file), contents).expect("agent writes");
    }

    fn has(&self, file: &str) -> bool {
        self.workspace.join(file).exists()
    }

    /// Prepare, let `work` act as the agent, report done, finish.
    fn run_done(&self, work: impl FnOnce(&Path)) -> WorkspaceReport {
        self.prepare();
        work(&self.workspace);
        self.report_result(&testing::done(&self.task));
        self.finish()
    }
}

fn assert_outcome(report: &WorkspaceReport, outcome: WorkspaceOutcome) {
    assert_eq!(report.outcome, outcome, "{report:?}");
}

#[test]
fn a_diamond_of_tasks_ends_with_four_commits_and_dependents_see_their_blockers_files() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let top = Attempt::new(&url, "top", 1);
    assert_outcome(
        &top.run_done(|ws| std::fs::write(ws.join("top.txt"), "top").expect("w")),
        WorkspaceOutcome::Integrated,
    );
    let left = Attempt::new(&url, "left", 1);
    let right = Attempt::new(&url, "right", 1);
    left.prepare();
    right.prepare();
    assert!(
        left.has("top.txt") && right.has("top.txt"),
        "the middle tasks see top's work"
    );
    left.write("left.txt", "left");
    right.write("right.txt", "right");
    for middle in [&left, &right] {
        middle.report_result(&testing::done(&middle.task));
        assert_outcome(&middle.finish(), WorkspaceOutcome::Integrated);
    }
    let bottom = Attempt::new(&url, "bottom", 1);
    bottom.prepare();
    assert!(
        ["top.txt", "left.txt", "right.txt"]
            .iter()
            .all(|f| bottom.has(f)),
        "the bottom task sees every blocker's work"
    );
    bottom.write("bottom.txt", "bottom");
    bottom.report_result(&testing::done("bottom"));
    let report = bottom.finish();
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    assert_eq!(report.feature_head, server.head("app", FEATURE_BRANCH));
    let subjects = server.subjects("app", FEATURE_BRANCH);
    for task in ["top", "left", "right", "bottom"] {
        assert!(
            subjects.contains(&format!("{task}: work of attempt 1")),
            "{task} missing in {subjects:?}"
        );
    }
    assert_eq!(
        subjects.len(),
        5,
        "four task commits on the initial one: {subjects:?}"
    );
}

#[test]
fn two_tasks_editing_the_same_line_conflict_and_the_retry_on_the_new_head_integrates() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let first = Attempt::new(&url, "first", 1);
    let second = Attempt::new(&url, "second", 1);
    first.prepare();
    second.prepare();
    first.write("README.md", "# app\n\nstatus: first\n");
    second.write("README.md", "# app\n\nstatus: second\n");
    first.report_result(&testing::done("first"));
    second.report_result(&testing::done("second"));
    assert_outcome(&first.finish(), WorkspaceOutcome::Integrated);
    let conflict = second.finish();
    assert_outcome(&conflict, WorkspaceOutcome::Conflict);
    assert_eq!(conflict.conflict_files, vec!["README.md"]);
    assert_eq!(conflict.conflicting_tasks, vec!["first"]);
    assert_eq!(conflict.feature_head, server.head("app", FEATURE_BRANCH));

    let retry = Attempt::new(&url, "second", 2);
    retry.prepare();
    let readme = std::fs::read_to_string(retry.workspace.join("README.md")).expect("readme");
    assert!(
        readme.contains("status: first"),
        "the retry starts on the new head"
    );
    retry.write("README.md", "# app\n\nstatus: first and second\n");
    retry.report_result(&testing::done("second"));
    assert_outcome(&retry.finish(), WorkspaceOutcome::Integrated);
    let subjects = server.subjects("app", FEATURE_BRANCH);
    assert_eq!(subjects[0], "second: work of attempt 2");
    assert_eq!(subjects[1], "first: work of attempt 1");
}

#[test]
fn a_crash_mid_task_commits_nothing_and_the_next_attempt_starts_clean() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let crashed = Attempt::new(&url, "build", 1);
    crashed.prepare();
    let head = server.head("app", FEATURE_BRANCH);
    crashed.write("half-done.txt", "partial");
    let report = crashed.finish();
    assert_outcome(&report, WorkspaceOutcome::NotCommitted);
    assert!(
        report
            .message
            .as_deref()
            .is_some_and(|m| m.contains("without a result")),
        "{report:?}"
    );
    assert_eq!(server.head("app", FEATURE_BRANCH), head, "nothing pushed");
    let next = Attempt::new(&url, "build", 2);
    next.prepare();
    assert!(!next.has("half-done.txt"), "the next attempt starts clean");
}

#[test]
fn a_failed_verdict_commits_nothing() {
    let server = GitServer::start();
    server.create_repo("app");
    let attempt = Attempt::new(&server.daemon_url("app"), "build", 1);
    attempt.prepare();
    attempt.write("broken.txt", "x");
    attempt.report_result(&testing::failed("build", Some("tests fail")));
    let report = attempt.finish();
    assert_outcome(&report, WorkspaceOutcome::NotCommitted);
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        vec!["initial commit"]
    );
}

#[test]
fn done_with_nothing_changed_says_so_and_does_not_fail() {
    let server = GitServer::start();
    server.create_repo("app");
    let attempt = Attempt::new(&server.daemon_url("app"), "noop", 1);
    let report = attempt.run_done(|_| {});
    assert_outcome(&report, WorkspaceOutcome::Unchanged);
    assert!(
        report
            .message
            .as_deref()
            .is_some_and(|m| m.contains("nothing to commit"))
    );
}

#[test]
fn an_agent_that_commits_itself_and_moves_head_still_yields_one_task_commit() {
    let server = GitServer::start();
    server.create_repo("app");
    let attempt = Attempt::new(&server.daemon_url("app"), "api", 1);
    let report = attempt.run_done(|ws| {
        std::fs::write(ws.join("api.rs"), "fn api() {}").expect("write");
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-q", "-m", "wip by the agent"]);
        git(ws, &["checkout", "-q", "-b", "agent-side-branch"]);
        std::fs::write(ws.join("more.rs"), "fn more() {}").expect("write");
    });
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    let subjects = server.subjects("app", FEATURE_BRANCH);
    assert_eq!(subjects, vec!["api: work of attempt 1", "initial commit"]);
    let files = server.files("app", FEATURE_BRANCH);
    assert!(files.contains(&"api.rs".to_owned()) && files.contains(&"more.rs".to_owned()));
}

#[test]
fn wrong_credentials_stop_the_clone_naming_the_secret() {
    let server = GitServer::start();
    server.create_repo("app");
    let attempt = Attempt::new(&server.http_url("app"), "build", 1).with_token("wrong-token");
    let (ok, report) = attempt.step("prepare", &[]);
    assert!(!ok);
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    let message = report.message.unwrap_or_default();
    assert!(message.contains(SECRET), "{message}");
    assert!(!message.contains("wrong-token"), "{message}");
}

#[test]
fn the_right_token_clones_and_integrates_over_https_basic_auth() {
    let server = GitServer::start();
    server.create_repo("app");
    let attempt = Attempt::new(&server.http_url("app"), "build", 1).with_token(HTTP_TOKEN);
    let report = attempt.run_done(|ws| std::fs::write(ws.join("b.txt"), "b").expect("write"));
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    assert!(
        !std::fs::read_to_string(attempt.workspace.join(".git/config"))
            .expect("config")
            .contains(HTTP_TOKEN)
    );
}

#[test]
fn a_missing_base_ref_is_a_misconfiguration_naming_it() {
    let server = GitServer::start();
    server.create_repo("app");
    let missing = Attempt::new(&server.daemon_url("app"), "build", 2);
    let output = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args([
            "git",
            "prepare",
            "--url",
            &missing.url,
            "--base-ref",
            "release-9",
        ])
        .args([
            "--feature",
            "other-feature",
            "--task",
            "build",
            "--attempt",
            "2",
        ])
        .arg("--workspace")
        .arg(&missing.workspace)
        .arg("--state-file")
        .arg(missing.state.join("prepared.json"))
        .output()
        .expect("run");
    assert!(!output.status.success());
    let report: WorkspaceReport = serde_json::from_slice(&output.stdout).expect("report on stdout");
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    assert!(report.message.unwrap_or_default().contains("release-9"));
}

#[test]
fn an_unreachable_server_is_a_failure_to_retry_not_a_misconfiguration() {
    let server = GitServer::start();
    let attempt = Attempt::new(&server.unreachable_url(), "build", 1);
    let (ok, report) = attempt.step("prepare", &[]);
    assert!(!ok);
    assert_outcome(&report, WorkspaceOutcome::Failed);
}

#[test]
fn a_protected_feature_branch_is_a_misconfiguration_naming_the_branch() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let attempt = Attempt::new(&url, "build", 1);
    attempt.prepare();
    server.protect("app", "branch ralph/shop is protected");
    attempt.write("x.txt", "x");
    attempt.report_result(&testing::done("build"));
    let report = attempt.finish();
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    assert!(report.message.unwrap_or_default().contains(FEATURE_BRANCH));
}

#[test]
fn a_verifier_starts_from_the_pushed_work_branch_and_integrates_it() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let work = Attempt::new(&url, "api", 1);
    work.prepare();
    work.write("api.rs", "fn api() {}");
    work.report_result(&testing::done("api"));
    let (_, pushed) = work.step(
        "finish",
        &[
            "--result-file",
            &work.run.join("result.json").to_string_lossy(),
            "--mode",
            "push-work-branch",
        ],
    );
    assert_outcome(&pushed, WorkspaceOutcome::PushedWorkBranch);
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        vec!["initial commit"]
    );
    let verifier = Attempt::new(&url, "api", 2);
    let (ok, report) = verifier.step("prepare", &["--from-work-branch"]);
    assert!(ok, "{report:?}");
    assert!(verifier.has("api.rs"), "the verifier sees the work");
    verifier.write("build.log", "output of the checks the verifier ran");
    verifier.report_result(&testing::with_sigils(
        "api",
        Sigils {
            verdict: Some(Verdict::Pass("api".to_owned())),
            ..Sigils::default()
        },
    ));
    let (_, report) = verifier.step(
        "finish",
        &[
            "--result-file",
            &verifier.run.join("result.json").to_string_lossy(),
            "--verifier",
        ],
    );
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    assert_eq!(
        server.files("app", FEATURE_BRANCH),
        ["README.md", "api.rs"],
        "the worker's change, without the verifier's leftovers"
    );
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        ["api: work of attempt 1", "initial commit"],
        "the worker's commit as it was verified"
    );
}

impl Attempt {
    /// Finishes a work attempt that a verifier follows: its work goes to the work branch.
    fn finish_for_verification(&self) -> WorkspaceReport {
        let result = self.run.join("result.json");
        let (_, report) = self.step(
            "finish",
            &[
                "--result-file",
                &result.to_string_lossy(),
                "--mode",
                "push-work-branch",
            ],
        );
        report
    }

    /// Prepares a verifier from the work branch; it passes the work; finishes.
    fn verify_and_pass(&self) -> WorkspaceReport {
        let (ok, report) = self.step("prepare", &["--from-work-branch"]);
        assert!(ok, "{report:?}");
        self.report_result(&testing::with_sigils(
            &self.task,
            Sigils {
                verdict: Some(Verdict::Pass(self.task.clone())),
                ..Sigils::default()
            },
        ));
        let result = self.run.join("result.json");
        let (_, report) = self.step(
            "finish",
            &["--result-file", &result.to_string_lossy(), "--verifier"],
        );
        report
    }
}

#[test]
fn a_verifier_checks_the_newest_work_attempt_even_one_that_changed_nothing() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let rejected = Attempt::new(&url, "api", 1);
    rejected.prepare();
    rejected.write("api.rs", "fn api() { todo!() }");
    rejected.report_result(&testing::done("api"));
    assert_outcome(
        &rejected.finish_for_verification(),
        WorkspaceOutcome::PushedWorkBranch,
    );
    let unchanged = Attempt::new(&url, "api", 3);
    unchanged.prepare();
    unchanged.report_result(&testing::done("api"));
    assert_outcome(
        &unchanged.finish_for_verification(),
        WorkspaceOutcome::PushedWorkBranch,
    );

    let verifier = Attempt::new(&url, "api", 4);
    let report = verifier.verify_and_pass();
    assert!(!verifier.has("api.rs"), "the rejected work is gone");
    assert_outcome(&report, WorkspaceOutcome::Unchanged);
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        vec!["initial commit"]
    );
}

#[test]
fn a_passed_work_that_conflicts_with_work_integrated_meanwhile_is_a_conflict_naming_the_task() {
    let server = GitServer::start();
    server.create_repo("app");
    let url = server.daemon_url("app");
    let verified = Attempt::new(&url, "second", 1);
    verified.prepare();
    verified.write("README.md", "# app\n\nstatus: second\n");
    verified.report_result(&testing::done("second"));
    assert_outcome(
        &verified.finish_for_verification(),
        WorkspaceOutcome::PushedWorkBranch,
    );
    let meanwhile = Attempt::new(&url, "first", 1);
    assert_outcome(
        &meanwhile.run_done(|ws| {
            std::fs::write(ws.join("README.md"), "# app\n\nstatus: first\n").expect("w")
        }),
        WorkspaceOutcome::Integrated,
    );

    let report = Attempt::new(&url, "second", 2).verify_and_pass();
    assert_outcome(&report, WorkspaceOutcome::Conflict);
    assert_eq!(report.conflict_files, ["README.md"]);
    assert_eq!(report.conflicting_tasks, ["first"]);
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        ["first: work of attempt 1", "initial commit"]
    );
}
