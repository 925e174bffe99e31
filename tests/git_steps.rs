//! The agent Pod's git steps (`ralph git prepare`, `ralph git finish`) as processes, the way
//! the Pod runs them, against a real git server (git daemon and git http-backend).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::git_server;

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

    /// Finishes with the result the runner reported, and `extra` arguments.
    fn finish_with(&self, extra: &[&str]) -> WorkspaceReport {
        let result = self.run.join("result.json").to_string_lossy().into_owned();
        let (_, report) = self.step("finish", &[&["--result-file", &result], extra].concat());
        report
    }

    fn finish(&self) -> WorkspaceReport {
        let heartbeat = self.run.join("heartbeat").to_string_lossy().into_owned();
        self.finish_with(&[
            "--runner-heartbeat-file",
            &heartbeat,
            "--heartbeat-max-age",
            "1s",
        ])
    }

    /// Finishes a work attempt that a verifier follows: its work goes to the work branch.
    fn push_for_verification(&self) {
        let report = self.finish_with(&["--mode", "push-work-branch"]);
        assert_outcome(&report, WorkspaceOutcome::PushedWorkBranch);
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
        self.finish_with(&["--verifier"])
    }

    fn report_done(&self) {
        self.report_result(&testing::done(&self.task));
    }

    /// Prepare, write `file` as the agent, report done.
    fn work_done(&self, file: &str, contents: &str) {
        self.prepare();
        self.write(file, contents);
        self.report_done();
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
        self.report_done();
        self.finish()
    }
}

fn assert_outcome(report: &WorkspaceReport, outcome: WorkspaceOutcome) {
    assert_eq!(report.outcome, outcome, "{report:?}");
}

fn message(report: &WorkspaceReport) -> &str {
    report.message.as_deref().unwrap_or_default()
}

/// The repository `app` on a fresh git server, reached over the git daemon.
struct App {
    server: GitServer,
    url: String,
}

impl App {
    fn start() -> Self {
        let server = GitServer::with_repo("app");
        let url = server.daemon_url("app");
        Self { server, url }
    }

    fn attempt(&self, task: &str, number: u32) -> Attempt {
        Attempt::new(&self.url, task, number)
    }

    /// An attempt of `task` writes `file` and pushes it to the work branch for a verifier.
    fn push_work(&self, task: &str, number: u32, file: &str, contents: &str) {
        let work = self.attempt(task, number);
        work.work_done(file, contents);
        work.push_for_verification();
    }

    /// The commit subjects of the Feature branch, newest first.
    fn subjects(&self) -> Vec<String> {
        self.server.subjects("app", FEATURE_BRANCH)
    }

    fn head(&self) -> Option<String> {
        self.server.head("app", FEATURE_BRANCH)
    }

    fn files(&self) -> Vec<String> {
        self.server.files("app", FEATURE_BRANCH)
    }
}

#[test]
fn a_diamond_of_tasks_ends_with_four_commits_and_dependents_see_their_blockers_files() {
    let app = App::start();
    let top = app.attempt("top", 1);
    assert_outcome(
        &top.run_done(|ws| std::fs::write(ws.join("top.txt"), "top").expect("w")),
        WorkspaceOutcome::Integrated,
    );
    let left = app.attempt("left", 1);
    let right = app.attempt("right", 1);
    left.prepare();
    right.prepare();
    assert!(
        left.has("top.txt") && right.has("top.txt"),
        "the middle tasks see top's work"
    );
    left.write("left.txt", "left");
    right.write("right.txt", "right");
    for middle in [&left, &right] {
        middle.report_done();
        assert_outcome(&middle.finish(), WorkspaceOutcome::Integrated);
    }
    let bottom = app.attempt("bottom", 1);
    bottom.prepare();
    assert!(
        ["top.txt", "left.txt", "right.txt"]
            .iter()
            .all(|f| bottom.has(f)),
        "the bottom task sees every blocker's work"
    );
    bottom.write("bottom.txt", "bottom");
    bottom.report_done();
    let report = bottom.finish();
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    assert_eq!(report.feature_head, app.head());
    let subjects = app.subjects();
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
    let app = App::start();
    let first = app.attempt("first", 1);
    let second = app.attempt("second", 1);
    first.work_done("README.md", "# app\n\nstatus: first\n");
    second.work_done("README.md", "# app\n\nstatus: second\n");
    assert_outcome(&first.finish(), WorkspaceOutcome::Integrated);
    let conflict = second.finish();
    assert_outcome(&conflict, WorkspaceOutcome::Conflict);
    assert_eq!(conflict.conflict_files, vec!["README.md"]);
    assert_eq!(conflict.conflicting_tasks, vec!["first"]);
    assert_eq!(conflict.feature_head, app.head());

    let retry = app.attempt("second", 2);
    retry.prepare();
    let readme = std::fs::read_to_string(retry.workspace.join("README.md")).expect("readme");
    assert!(
        readme.contains("status: first"),
        "the retry starts on the new head"
    );
    retry.write("README.md", "# app\n\nstatus: first and second\n");
    retry.report_done();
    assert_outcome(&retry.finish(), WorkspaceOutcome::Integrated);
    let subjects = app.subjects();
    assert_eq!(subjects[0], "second: work of attempt 2");
    assert_eq!(subjects[1], "first: work of attempt 1");
}

#[test]
fn a_crash_mid_task_commits_nothing_and_the_next_attempt_starts_clean() {
    let app = App::start();
    let crashed = app.attempt("build", 1);
    crashed.prepare();
    let head = app.head();
    crashed.write("half-done.txt", "partial");
    let report = crashed.finish();
    assert_outcome(&report, WorkspaceOutcome::NotCommitted);
    assert!(message(&report).contains("without a result"), "{report:?}");
    assert_eq!(app.head(), head, "nothing pushed");
    let next = app.attempt("build", 2);
    next.prepare();
    assert!(!next.has("half-done.txt"), "the next attempt starts clean");
}

#[test]
fn a_failed_verdict_commits_nothing() {
    let app = App::start();
    let attempt = app.attempt("build", 1);
    attempt.prepare();
    attempt.write("broken.txt", "x");
    attempt.report_result(&testing::failed("build", Some("tests fail")));
    assert_outcome(&attempt.finish(), WorkspaceOutcome::NotCommitted);
    assert_eq!(app.subjects(), vec!["initial commit"]);
}

#[test]
fn done_with_nothing_changed_says_so_and_does_not_fail() {
    let report = App::start().attempt("noop", 1).run_done(|_| {});
    assert_outcome(&report, WorkspaceOutcome::Unchanged);
    assert!(message(&report).contains("nothing to commit"), "{report:?}");
}

#[test]
fn an_agent_that_commits_itself_and_moves_head_still_yields_one_task_commit() {
    let app = App::start();
    let report = app.attempt("api", 1).run_done(|ws| {
        std::fs::write(ws.join("api.rs"), "fn api() {}").expect("write");
        git(ws, &["add", "-A"]);
        git(ws, &["commit", "-q", "-m", "wip by the agent"]);
        git(ws, &["checkout", "-q", "-b", "agent-side-branch"]);
        std::fs::write(ws.join("more.rs"), "fn more() {}").expect("write");
    });
    assert_outcome(&report, WorkspaceOutcome::Integrated);
    assert_eq!(
        app.subjects(),
        vec!["api: work of attempt 1", "initial commit"]
    );
    let files = app.files();
    assert!(files.contains(&"api.rs".to_owned()) && files.contains(&"more.rs".to_owned()));
}

#[test]
fn wrong_credentials_stop_the_clone_naming_the_secret() {
    let server = GitServer::with_repo("app");
    let attempt = Attempt::new(&server.http_url("app"), "build", 1).with_token("wrong-token");
    let (ok, report) = attempt.step("prepare", &[]);
    assert!(!ok);
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    assert!(message(&report).contains(SECRET), "{report:?}");
    assert!(!message(&report).contains("wrong-token"), "{report:?}");
}

#[test]
fn the_right_token_clones_and_integrates_over_https_basic_auth() {
    let server = GitServer::with_repo("app");
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
    let app = App::start();
    let missing = app.attempt("build", 2);
    let output = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["git", "prepare", "--url", &app.url])
        .args(["--base-ref", "release-9", "--feature", "other-feature"])
        .args(["--task", "build", "--attempt", "2"])
        .arg("--workspace")
        .arg(&missing.workspace)
        .arg("--state-file")
        .arg(missing.state.join("prepared.json"))
        .output()
        .expect("run");
    assert!(!output.status.success());
    let report: WorkspaceReport = serde_json::from_slice(&output.stdout).expect("report on stdout");
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    assert!(message(&report).contains("release-9"));
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
    let app = App::start();
    let attempt = app.attempt("build", 1);
    attempt.prepare();
    app.server.protect("app", "branch ralph/shop is protected");
    attempt.write("x.txt", "x");
    attempt.report_done();
    let report = attempt.finish();
    assert_outcome(&report, WorkspaceOutcome::Misconfigured);
    assert!(message(&report).contains(FEATURE_BRANCH));
}

#[test]
fn a_verifier_starts_from_the_pushed_work_branch_and_integrates_it() {
    let app = App::start();
    app.push_work("api", 1, "api.rs", "fn api() {}");
    assert_eq!(app.subjects(), vec!["initial commit"]);
    let verifier = app.attempt("api", 2);
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
    assert_outcome(
        &verifier.finish_with(&["--verifier"]),
        WorkspaceOutcome::Integrated,
    );
    assert_eq!(
        app.files(),
        ["README.md", "api.rs"],
        "the worker's change, without the verifier's leftovers"
    );
    assert_eq!(
        app.subjects(),
        ["api: work of attempt 1", "initial commit"],
        "the worker's commit as it was verified"
    );
}

#[test]
fn a_verifier_checks_the_newest_work_attempt_even_one_that_changed_nothing() {
    let app = App::start();
    app.push_work("api", 1, "api.rs", "fn api() { todo!() }");
    let unchanged = app.attempt("api", 3);
    unchanged.prepare();
    unchanged.report_done();
    unchanged.push_for_verification();

    let verifier = app.attempt("api", 4);
    let report = verifier.verify_and_pass();
    assert!(!verifier.has("api.rs"), "the rejected work is gone");
    assert_outcome(&report, WorkspaceOutcome::Unchanged);
    assert_eq!(app.subjects(), vec!["initial commit"]);
}

#[test]
fn a_passed_work_that_conflicts_with_work_integrated_meanwhile_is_a_conflict_naming_the_task() {
    let app = App::start();
    app.push_work("second", 1, "README.md", "# app\n\nstatus: second\n");
    let meanwhile = app.attempt("first", 1);
    assert_outcome(
        &meanwhile.run_done(|ws| {
            std::fs::write(ws.join("README.md"), "# app\n\nstatus: first\n").expect("w")
        }),
        WorkspaceOutcome::Integrated,
    );

    let report = app.attempt("second", 2).verify_and_pass();
    assert_outcome(&report, WorkspaceOutcome::Conflict);
    assert_eq!(report.conflict_files, ["README.md"]);
    assert_eq!(report.conflicting_tasks, ["first"]);
    assert_eq!(
        app.subjects(),
        ["first: work of attempt 1", "initial commit"]
    );
}
