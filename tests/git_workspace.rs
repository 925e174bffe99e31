//! The git layer against a real git server (git daemon and git http-backend on 127.0.0.1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::git_server;

use std::path::Path;
use std::time::Duration;

use git_server::{GitServer, HTTP_TOKEN, HTTP_USER, git};
use ralph::workspace::{
    AttemptWorkspace, CloneFrom, CommitAuthor, CommitOutcome, Credentials, GitOptions,
    IntegrationOutcome, LocalRepo, RemoteRepo, RepoSettings, WorkspaceError,
};
use tempfile::TempDir;

const FEATURE: &str = "login";
const FEATURE_BRANCH: &str = "ralph/login";

fn remote_repo(url: String, base_ref: &str, options: GitOptions) -> RemoteRepo {
    RemoteRepo::new(RepoSettings::new(url, base_ref), FEATURE, options).expect("valid settings")
}

/// A handle on `url`, integrating onto `base_ref`, with default options.
fn repo_at(url: String, base_ref: &str) -> RemoteRepo {
    remote_repo(url, base_ref, GitOptions::default())
}

fn daemon_repo(server: &GitServer, name: &str) -> RemoteRepo {
    repo_at(server.daemon_url(name), "main")
}

fn http_repo(server: &GitServer, name: &str, token: &str) -> RemoteRepo {
    let mut settings = RepoSettings::new(server.http_url(name), "main");
    settings.credentials = Some(Credentials::Https {
        username: HTTP_USER.to_owned(),
        token: token.to_owned(),
    });
    RemoteRepo::new(settings, FEATURE, GitOptions::default()).expect("valid settings")
}

/// A git server holding the repository `app`, a handle on it over git daemon, and a directory
/// for attempt workspaces.
struct Fixture {
    server: GitServer,
    repo: RemoteRepo,
    root: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let server = GitServer::start();
        server.create_repo("app");
        let repo = daemon_repo(&server, "app");
        Self {
            server,
            repo,
            root: TempDir::new().unwrap(),
        }
    }

    async fn prepare(&self, task: &str, attempt: u32) -> AttemptWorkspace {
        prepare(&self.repo, &self.root, task, attempt).await
    }

    async fn finish(&self, ws: &AttemptWorkspace) -> IntegrationOutcome {
        finish(&self.repo, ws).await
    }
}

async fn prepare(repo: &RemoteRepo, root: &TempDir, task: &str, attempt: u32) -> AttemptWorkspace {
    let dir = root.path().join(format!("{task}-a{attempt}"));
    repo.prepare(&dir, task, attempt, CloneFrom::FeatureBranch)
        .await
        .expect("prepare")
}

/// The error preparing a first attempt ends in, with the handle `repo` makes on a server that
/// holds the repository `app`.
async fn first_prepare_error(repo: impl FnOnce(&GitServer) -> RemoteRepo) -> WorkspaceError {
    let server = GitServer::start();
    server.create_repo("app");
    prepare_error(&repo(&server)).await
}

/// The error preparing a first attempt with `repo` ends in.
async fn prepare_error(repo: &RemoteRepo) -> WorkspaceError {
    let root = TempDir::new().unwrap();
    repo.prepare(&root.path().join("ws"), "t-1", 1, CloneFrom::FeatureBranch)
        .await
        .unwrap_err()
}

fn write(ws: &AttemptWorkspace, file: &str, contents: &str) {
    std::fs::write(ws.dir.join(file), contents).expect("write file");
}

async fn finish(repo: &RemoteRepo, ws: &AttemptWorkspace) -> IntegrationOutcome {
    match repo.commit(ws).await.expect("commit") {
        CommitOutcome::Committed { .. } => repo.integrate(ws).await.expect("integrate"),
        CommitOutcome::Unchanged => panic!("{} left nothing to commit", ws.attempt.task),
    }
}

/// Asserts that `value` matches `pattern`, showing the value when it does not.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat) => {
        assert!(matches!($value, $pattern), "{:?}", $value)
    };
}

fn assert_integrated(outcome: &IntegrationOutcome) {
    assert_matches!(outcome, IntegrationOutcome::Integrated { .. });
}

#[tokio::test]
async fn a_diamond_of_tasks_ends_with_four_commits_and_dependents_see_their_blockers_files() {
    let app = Fixture::new();

    let a = app.prepare("a", 1).await;
    write(&a, "a.txt", "a\n");
    assert_integrated(&app.finish(&a).await);

    let b = app.prepare("b", 1).await;
    let c = app.prepare("c", 1).await;
    assert!(b.dir.join("a.txt").exists() && c.dir.join("a.txt").exists());
    write(&b, "b.txt", "b\n");
    write(&c, "c.txt", "c\n");
    let (b_outcome, c_outcome) = tokio::join!(app.finish(&b), app.finish(&c));
    assert_integrated(&b_outcome);
    assert_integrated(&c_outcome);

    let d = app.prepare("d", 1).await;
    for blocker in ["a.txt", "b.txt", "c.txt"] {
        assert!(d.dir.join(blocker).exists(), "d misses {blocker}");
    }
    write(&d, "d.txt", "d\n");
    assert_integrated(&app.finish(&d).await);

    let subjects = app.server.subjects("app", FEATURE_BRANCH);
    assert_eq!(subjects.len(), 5, "{subjects:?}");
    assert_eq!(subjects[0], "d: work of attempt 1");
    assert_eq!(subjects[4], "initial commit");
    let mut middle = subjects[1..3].to_vec();
    middle.sort();
    assert_eq!(middle, ["b: work of attempt 1", "c: work of attempt 1"]);
    assert_eq!(subjects[3], "a: work of attempt 1");
}

#[tokio::test]
async fn the_feature_branch_is_created_from_base_ref_and_pushed_the_first_time() {
    let app = Fixture::new();
    assert_eq!(app.server.head("app", FEATURE_BRANCH), None);

    let ws = app.prepare("t-1", 1).await;

    assert_eq!(
        app.server.head("app", FEATURE_BRANCH),
        app.server.head("app", "main")
    );
    assert_eq!(ws.work_branch, "ralph/login/t-1");
    assert_eq!(
        git(&ws.dir, &["branch", "--show-current"]),
        "ralph/login/t-1"
    );
    assert_eq!(
        git(&ws.dir, &["rev-parse", "--is-shallow-repository"]),
        "true"
    );
}

#[tokio::test]
async fn two_tasks_editing_the_same_line_conflict_and_the_retry_on_the_new_head_integrates() {
    let app = Fixture::new();
    let first = app.prepare("t-1", 1).await;
    let second = app.prepare("t-2", 1).await;
    write(&first, "README.md", "# app\n\nstatus: done by t-1\n");
    write(&second, "README.md", "# app\n\nstatus: done by t-2\n");

    assert_integrated(&app.finish(&first).await);
    let outcome = app.finish(&second).await;

    let IntegrationOutcome::Conflict {
        files,
        other_commit_subjects,
        feature_head,
    } = outcome
    else {
        panic!("expected a conflict, got {outcome:?}");
    };
    assert_eq!(files, ["README.md"]);
    assert_eq!(other_commit_subjects, ["t-1: work of attempt 1"]);
    assert_eq!(Some(feature_head), app.server.head("app", FEATURE_BRANCH));

    let retry = app.prepare("t-2", 2).await;
    let seen = std::fs::read_to_string(retry.dir.join("README.md")).unwrap();
    assert!(
        seen.contains("t-1"),
        "the retry starts from the new head: {seen}"
    );
    write(
        &retry,
        "README.md",
        "# app\n\nstatus: done by t-1 and t-2\n",
    );
    assert_integrated(&app.finish(&retry).await);
    assert_eq!(
        app.server.subjects("app", FEATURE_BRANCH)[..2],
        ["t-2: work of attempt 2", "t-1: work of attempt 1"]
    );
}

#[tokio::test]
async fn a_crash_mid_task_leaves_no_commit_and_the_next_attempt_starts_clean() {
    let app = Fixture::new();
    let crashed = app.prepare("t-1", 1).await;
    let head_before = app.server.head("app", FEATURE_BRANCH);
    write(&crashed, "half-done.txt", "partial\n");

    let next = app.prepare("t-1", 2).await;

    assert_eq!(app.server.head("app", FEATURE_BRANCH), head_before);
    assert!(!next.dir.join("half-done.txt").exists());
    assert_eq!(git(&next.dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn an_attempt_never_reuses_a_dirty_directory() {
    let app = Fixture::new();
    let crashed = app.prepare("t-1", 1).await;
    write(&crashed, "half-done.txt", "partial\n");

    let error = app
        .repo
        .prepare(&crashed.dir, "t-1", 2, CloneFrom::FeatureBranch)
        .await
        .unwrap_err();

    assert_matches!(error, WorkspaceError::DirectoryNotEmpty { .. });
}

#[tokio::test]
async fn an_unchanged_workspace_is_an_outcome_not_an_error() {
    let app = Fixture::new();
    let ws = app.prepare("t-1", 1).await;

    assert_eq!(
        app.repo.commit(&ws).await.unwrap(),
        CommitOutcome::Unchanged
    );
}

#[tokio::test]
async fn commits_the_agent_made_itself_are_folded_into_one_attempt_commit() {
    let app = Fixture::new();
    let ws = app.prepare("t-1", 1).await;
    write(&ws, "one.txt", "1\n");
    git(&ws.dir, &["add", "-A"]);
    git(&ws.dir, &["commit", "-q", "-m", "agent commit"]);
    git(&ws.dir, &["checkout", "-q", "-b", "agent-branch"]);
    write(&ws, "two.txt", "2\n");

    assert_integrated(&app.finish(&ws).await);

    assert_eq!(
        app.server.subjects("app", FEATURE_BRANCH),
        ["t-1: work of attempt 1", "initial commit"]
    );
    let files = app.server.files("app", FEATURE_BRANCH);
    assert!(files.contains(&"one.txt".to_owned()) && files.contains(&"two.txt".to_owned()));
}

#[tokio::test]
async fn a_push_rejected_by_a_protected_branch_hook_is_an_error_naming_the_branch() {
    let app = Fixture::new();
    app.server.create_branch("app", FEATURE_BRANCH, "main");
    app.server.protect("app", "branch is protected");
    let ws = app.prepare("t-1", 1).await;
    write(&ws, "a.txt", "a\n");
    app.repo.commit(&ws).await.unwrap();

    let error = app.repo.integrate(&ws).await.unwrap_err();

    assert_matches!(error, WorkspaceError::PushRejected { .. });
    let message = error.to_string();
    assert!(
        message.contains(FEATURE_BRANCH) && message.contains("pre-receive hook declined"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_base_ref_is_a_clear_error() {
    let error = first_prepare_error(|server| repo_at(server.daemon_url("app"), "develop")).await;

    assert_matches!(error, WorkspaceError::BaseRefMissing { .. });
    assert!(
        error
            .to_string()
            .contains("baseRef `develop` does not exist"),
        "{error}"
    );
}

#[tokio::test]
async fn an_unreachable_remote_is_a_clear_error() {
    let error = first_prepare_error(|server| repo_at(server.unreachable_url(), "main")).await;

    assert_matches!(error, WorkspaceError::Unreachable { .. });
}

#[tokio::test]
async fn a_repository_that_does_not_exist_is_named() {
    let error = first_prepare_error(|server| daemon_repo(server, "missing")).await;

    assert_matches!(error, WorkspaceError::RepositoryNotFound { .. });
}

#[tokio::test]
async fn wrong_credentials_are_an_error_naming_the_credentials() {
    let error = first_prepare_error(|server| http_repo(server, "app", "wrong-token")).await;

    assert_matches!(error, WorkspaceError::AuthenticationFailed { .. });
    let message = error.to_string();
    assert!(
        message.contains(&format!("HTTPS token of user `{HTTP_USER}`")),
        "{message}"
    );
    assert!(!message.contains("wrong-token"), "{message}");
}

#[tokio::test]
async fn no_credentials_for_a_server_that_needs_them_is_an_authentication_error() {
    let error = first_prepare_error(|server| repo_at(server.http_url("app"), "main")).await;

    assert_matches!(error, WorkspaceError::AuthenticationFailed { .. });
}

/// Every file under `dir` (the `.git` directory included) as text.
fn all_text_under(dir: &Path) -> String {
    let mut text = String::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

#[tokio::test]
async fn credentials_reach_git_but_not_the_workspace_config_files_or_the_agents_environment() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = http_repo(&server, "app", HTTP_TOKEN);
    let root = TempDir::new().unwrap();
    let ws = prepare(&repo, &root, "t-1", 1).await;

    let agent = std::process::Command::new("sh")
        .args(["-c", "env; cat .git/config"])
        .current_dir(&ws.dir)
        .output()
        .unwrap();
    write(&ws, "work.txt", "done\n");
    assert_integrated(&finish(&repo, &ws).await);

    let agent_view = String::from_utf8_lossy(&agent.stdout);
    assert!(
        !agent_view.contains(HTTP_TOKEN),
        "the agent's environment holds the token"
    );
    let config = std::fs::read_to_string(ws.dir.join(".git/config")).unwrap();
    assert!(
        config.contains(&format!("url = {}", server.http_url("app"))),
        "{config}"
    );
    assert!(!config.contains(HTTP_USER), "{config}");
    assert!(
        !all_text_under(&ws.dir).contains(HTTP_TOKEN),
        "a workspace file holds the token"
    );
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH)[0],
        "t-1: work of attempt 1"
    );
}

#[tokio::test]
async fn the_private_credentials_directory_is_deleted_with_the_repo_handle() {
    let server = GitServer::start();
    let repo = http_repo(&server, "app", HTTP_TOKEN);
    let dir = repo.credentials_dir().unwrap().to_owned();
    assert!(dir.exists());
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);

    drop(repo);

    assert!(!dir.exists());
}

#[tokio::test]
async fn a_clone_that_outlasts_the_time_limit_is_a_timeout_error() {
    let error = first_prepare_error(|server| {
        remote_repo(
            server.daemon_url("app"),
            "main",
            GitOptions {
                command_timeout: Duration::from_millis(1),
                ..GitOptions::default()
            },
        )
    })
    .await;

    assert_matches!(error, WorkspaceError::Timeout { .. });
}

// The local variant: worktrees of a repository on disk.

fn local_repo(dir: &Path, base_ref: &str, remote: Option<&str>) -> LocalRepo {
    LocalRepo::new(
        dir,
        FEATURE,
        base_ref,
        None,
        remote,
        CommitAuthor::default(),
        GitOptions::default(),
    )
    .unwrap()
}

fn init_local(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README.md"), "status: new\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial commit"]);
}

/// A checkout on disk, a local handle on it and a directory for worktrees.
struct LocalFixture {
    checkout: TempDir,
    repo: LocalRepo,
    trees: TempDir,
}

impl LocalFixture {
    /// A fresh repository with one commit on `main`, integrating onto `base_ref`.
    fn new(base_ref: &str) -> Self {
        let checkout = TempDir::new().unwrap();
        init_local(checkout.path());
        Self::on(checkout, base_ref, None)
    }

    fn on(checkout: TempDir, base_ref: &str, remote: Option<&str>) -> Self {
        let repo = local_repo(checkout.path(), base_ref, remote);
        Self {
            checkout,
            repo,
            trees: TempDir::new().unwrap(),
        }
    }

    async fn try_prepare(&self, task: &str) -> Result<AttemptWorkspace, WorkspaceError> {
        self.repo
            .prepare(&self.trees.path().join(task), task, 1)
            .await
    }

    async fn prepare(&self, task: &str) -> AttemptWorkspace {
        self.try_prepare(task).await.unwrap()
    }
}

#[tokio::test]
async fn local_parallel_tasks_work_in_their_own_worktrees_and_both_integrate() {
    let local = LocalFixture::new("main");
    let one = local.prepare("one").await;
    let two = local.prepare("two").await;
    assert_ne!(one.dir, two.dir);
    std::fs::write(one.dir.join("one.txt"), "1\n").unwrap();
    std::fs::write(two.dir.join("two.txt"), "2\n").unwrap();

    for ws in [&one, &two] {
        local.repo.commit(ws).await.unwrap();
        assert_integrated(&local.repo.integrate(ws).await.unwrap());
    }

    let log = git(
        local.checkout.path(),
        &["log", "--format=%s", FEATURE_BRANCH],
    );
    assert_eq!(
        log,
        "two: work of attempt 1\none: work of attempt 1\ninitial commit"
    );
    assert_eq!(
        git(local.checkout.path(), &["branch", "--show-current"]),
        "main"
    );
}

#[tokio::test]
async fn local_worktrees_of_finished_attempts_are_removed() {
    let local = LocalFixture::new("main");
    let ws = local.prepare("one").await;

    local.repo.remove(&ws).await.unwrap();

    assert!(!ws.dir.exists());
    let worktrees = git(local.checkout.path(), &["worktree", "list", "--porcelain"]);
    assert!(!worktrees.contains("one"), "{worktrees}");
}

#[tokio::test]
async fn local_missing_base_ref_is_a_clear_error() {
    let local = LocalFixture::new("develop");

    let error = local.try_prepare("one").await.unwrap_err();

    assert_matches!(error, WorkspaceError::BaseRefMissing { .. });
}

#[tokio::test]
async fn local_integration_pushes_when_a_remote_is_configured() {
    let server = GitServer::start();
    server.create_repo("app");
    let checkout = TempDir::new().unwrap();
    git(
        checkout.path(),
        &["clone", "-q", &server.daemon_url("app"), "."],
    );
    let local = LocalFixture::on(checkout, "main", Some("origin"));
    let ws = local.prepare("one").await;
    std::fs::write(ws.dir.join("one.txt"), "1\n").unwrap();

    local.repo.commit(&ws).await.unwrap();
    assert_integrated(&local.repo.integrate(&ws).await.unwrap());

    assert_eq!(
        server.subjects("app", FEATURE_BRANCH)[0],
        "one: work of attempt 1"
    );
}
