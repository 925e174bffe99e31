//! The git layer against a real git server (git daemon and git http-backend on 127.0.0.1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/git_server.rs"]
mod git_server;

use std::path::Path;
use std::time::Duration;

use git_server::{GitServer, HTTP_TOKEN, HTTP_USER, git};
use ralph::workspace::{
    AttemptWorkspace, CommitAuthor, CommitOutcome, Credentials, GitOptions, IntegrationOutcome,
    LocalRepo, RemoteRepo, RepoSettings, WorkspaceError,
};
use tempfile::TempDir;

const FEATURE: &str = "login";
const FEATURE_BRANCH: &str = "ralph/login";

fn daemon_repo(server: &GitServer, name: &str) -> RemoteRepo {
    RemoteRepo::new(
        RepoSettings::new(server.daemon_url(name), "main"),
        FEATURE,
        GitOptions::default(),
    )
    .expect("valid settings")
}

fn http_repo(server: &GitServer, name: &str, token: &str) -> RemoteRepo {
    let mut settings = RepoSettings::new(server.http_url(name), "main");
    settings.credentials = Some(Credentials::Https {
        username: HTTP_USER.to_owned(),
        token: token.to_owned(),
    });
    RemoteRepo::new(settings, FEATURE, GitOptions::default()).expect("valid settings")
}

async fn prepare(repo: &RemoteRepo, root: &TempDir, task: &str, attempt: u32) -> AttemptWorkspace {
    let dir = root.path().join(format!("{task}-a{attempt}"));
    repo.prepare(&dir, task, attempt).await.expect("prepare")
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

fn assert_integrated(outcome: &IntegrationOutcome) {
    assert!(
        matches!(outcome, IntegrationOutcome::Integrated { .. }),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_diamond_of_tasks_ends_with_four_commits_and_dependents_see_their_blockers_files() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();

    let a = prepare(&repo, &root, "a", 1).await;
    write(&a, "a.txt", "a\n");
    assert_integrated(&finish(&repo, &a).await);

    let b = prepare(&repo, &root, "b", 1).await;
    let c = prepare(&repo, &root, "c", 1).await;
    assert!(b.dir.join("a.txt").exists() && c.dir.join("a.txt").exists());
    write(&b, "b.txt", "b\n");
    write(&c, "c.txt", "c\n");
    let (b_outcome, c_outcome) = tokio::join!(finish(&repo, &b), finish(&repo, &c));
    assert_integrated(&b_outcome);
    assert_integrated(&c_outcome);

    let d = prepare(&repo, &root, "d", 1).await;
    for blocker in ["a.txt", "b.txt", "c.txt"] {
        assert!(d.dir.join(blocker).exists(), "d misses {blocker}");
    }
    write(&d, "d.txt", "d\n");
    assert_integrated(&finish(&repo, &d).await);

    let subjects = server.subjects("app", FEATURE_BRANCH);
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
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    assert_eq!(server.head("app", FEATURE_BRANCH), None);

    let ws = prepare(&repo, &root, "t-1", 1).await;

    assert_eq!(
        server.head("app", FEATURE_BRANCH),
        server.head("app", "main")
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
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let first = prepare(&repo, &root, "t-1", 1).await;
    let second = prepare(&repo, &root, "t-2", 1).await;
    write(&first, "README.md", "# app\n\nstatus: done by t-1\n");
    write(&second, "README.md", "# app\n\nstatus: done by t-2\n");

    assert_integrated(&finish(&repo, &first).await);
    let outcome = finish(&repo, &second).await;

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
    assert_eq!(Some(feature_head), server.head("app", FEATURE_BRANCH));

    let retry = prepare(&repo, &root, "t-2", 2).await;
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
    assert_integrated(&finish(&repo, &retry).await);
    assert_eq!(
        server.subjects("app", FEATURE_BRANCH)[..2],
        ["t-2: work of attempt 2", "t-1: work of attempt 1"]
    );
}

#[tokio::test]
async fn a_crash_mid_task_leaves_no_commit_and_the_next_attempt_starts_clean() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let crashed = prepare(&repo, &root, "t-1", 1).await;
    let head_before = server.head("app", FEATURE_BRANCH);
    write(&crashed, "half-done.txt", "partial\n");

    let next = prepare(&repo, &root, "t-1", 2).await;

    assert_eq!(server.head("app", FEATURE_BRANCH), head_before);
    assert!(!next.dir.join("half-done.txt").exists());
    assert_eq!(git(&next.dir, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn an_attempt_never_reuses_a_dirty_directory() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let crashed = prepare(&repo, &root, "t-1", 1).await;
    write(&crashed, "half-done.txt", "partial\n");

    let error = repo.prepare(&crashed.dir, "t-1", 2).await.unwrap_err();

    assert!(
        matches!(error, WorkspaceError::DirectoryNotEmpty { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn an_unchanged_workspace_is_an_outcome_not_an_error() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let ws = prepare(&repo, &root, "t-1", 1).await;

    assert_eq!(repo.commit(&ws).await.unwrap(), CommitOutcome::Unchanged);
}

#[tokio::test]
async fn commits_the_agent_made_itself_are_folded_into_one_attempt_commit() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let ws = prepare(&repo, &root, "t-1", 1).await;
    write(&ws, "one.txt", "1\n");
    git(&ws.dir, &["add", "-A"]);
    git(&ws.dir, &["commit", "-q", "-m", "agent commit"]);
    git(&ws.dir, &["checkout", "-q", "-b", "agent-branch"]);
    write(&ws, "two.txt", "2\n");

    assert_integrated(&finish(&repo, &ws).await);

    assert_eq!(
        server.subjects("app", FEATURE_BRANCH),
        ["t-1: work of attempt 1", "initial commit"]
    );
    let files = server.files("app", FEATURE_BRANCH);
    assert!(files.contains(&"one.txt".to_owned()) && files.contains(&"two.txt".to_owned()));
}

#[tokio::test]
async fn a_push_rejected_by_a_protected_branch_hook_is_an_error_naming_the_branch() {
    let server = GitServer::start();
    server.create_repo("app");
    server.create_branch("app", FEATURE_BRANCH, "main");
    server.protect("app", "branch is protected");
    let repo = daemon_repo(&server, "app");
    let root = TempDir::new().unwrap();
    let ws = prepare(&repo, &root, "t-1", 1).await;
    write(&ws, "a.txt", "a\n");
    repo.commit(&ws).await.unwrap();

    let error = repo.integrate(&ws).await.unwrap_err();

    assert!(
        matches!(error, WorkspaceError::PushRejected { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains(FEATURE_BRANCH) && message.contains("pre-receive hook declined"),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_base_ref_is_a_clear_error() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = RemoteRepo::new(
        RepoSettings::new(server.daemon_url("app"), "develop"),
        FEATURE,
        GitOptions::default(),
    )
    .unwrap();
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::BaseRefMissing { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("baseRef `develop` does not exist"),
        "{error}"
    );
}

#[tokio::test]
async fn an_unreachable_remote_is_a_clear_error() {
    let server = GitServer::start();
    let repo = RemoteRepo::new(
        RepoSettings::new(server.unreachable_url(), "main"),
        FEATURE,
        GitOptions::default(),
    )
    .unwrap();
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::Unreachable { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_repository_that_does_not_exist_is_named() {
    let server = GitServer::start();
    let repo = daemon_repo(&server, "missing");
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::RepositoryNotFound { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn wrong_credentials_are_an_error_naming_the_credentials() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = http_repo(&server, "app", "wrong-token");
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::AuthenticationFailed { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("HTTPS token of user `{HTTP_USER}`")),
        "{message}"
    );
    assert!(!message.contains("wrong-token"), "{message}");
}

#[tokio::test]
async fn no_credentials_for_a_server_that_needs_them_is_an_authentication_error() {
    let server = GitServer::start();
    server.create_repo("app");
    let repo = RemoteRepo::new(
        RepoSettings::new(server.http_url("app"), "main"),
        FEATURE,
        GitOptions::default(),
    )
    .unwrap();
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::AuthenticationFailed { .. }),
        "{error}"
    );
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
    let server = GitServer::start();
    server.create_repo("app");
    let repo = RemoteRepo::new(
        RepoSettings::new(server.daemon_url("app"), "main"),
        FEATURE,
        GitOptions {
            command_timeout: Duration::from_millis(1),
            ..GitOptions::default()
        },
    )
    .unwrap();
    let root = TempDir::new().unwrap();

    let error = repo
        .prepare(&root.path().join("ws"), "t-1", 1)
        .await
        .unwrap_err();

    assert!(matches!(error, WorkspaceError::Timeout { .. }), "{error}");
}

// The local variant: worktrees of a repository on disk.

fn local_repo(dir: &Path) -> LocalRepo {
    LocalRepo::new(
        dir,
        FEATURE,
        "main",
        None,
        None,
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

#[tokio::test]
async fn local_parallel_tasks_work_in_their_own_worktrees_and_both_integrate() {
    let checkout = TempDir::new().unwrap();
    init_local(checkout.path());
    let repo = local_repo(checkout.path());
    let trees = TempDir::new().unwrap();
    let one = repo
        .prepare(&trees.path().join("one"), "one", 1)
        .await
        .unwrap();
    let two = repo
        .prepare(&trees.path().join("two"), "two", 1)
        .await
        .unwrap();
    assert_ne!(one.dir, two.dir);
    std::fs::write(one.dir.join("one.txt"), "1\n").unwrap();
    std::fs::write(two.dir.join("two.txt"), "2\n").unwrap();

    for ws in [&one, &two] {
        repo.commit(ws).await.unwrap();
        assert_integrated(&repo.integrate(ws).await.unwrap());
    }

    let log = git(checkout.path(), &["log", "--format=%s", FEATURE_BRANCH]);
    assert_eq!(
        log,
        "two: work of attempt 1\none: work of attempt 1\ninitial commit"
    );
    assert_eq!(git(checkout.path(), &["branch", "--show-current"]), "main");
}

#[tokio::test]
async fn local_worktrees_of_finished_attempts_are_removed() {
    let checkout = TempDir::new().unwrap();
    init_local(checkout.path());
    let repo = local_repo(checkout.path());
    let trees = TempDir::new().unwrap();
    let ws = repo
        .prepare(&trees.path().join("one"), "one", 1)
        .await
        .unwrap();

    repo.remove(&ws).await.unwrap();

    assert!(!ws.dir.exists());
    let worktrees = git(checkout.path(), &["worktree", "list", "--porcelain"]);
    assert!(!worktrees.contains("one"), "{worktrees}");
}

#[tokio::test]
async fn local_missing_base_ref_is_a_clear_error() {
    let checkout = TempDir::new().unwrap();
    init_local(checkout.path());
    let repo = LocalRepo::new(
        checkout.path(),
        FEATURE,
        "develop",
        None,
        None,
        CommitAuthor::default(),
        GitOptions::default(),
    )
    .unwrap();
    let trees = TempDir::new().unwrap();

    let error = repo
        .prepare(&trees.path().join("one"), "one", 1)
        .await
        .unwrap_err();

    assert!(
        matches!(error, WorkspaceError::BaseRefMissing { .. }),
        "{error}"
    );
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
    let repo = LocalRepo::new(
        checkout.path(),
        FEATURE,
        "main",
        None,
        Some("origin"),
        CommitAuthor::default(),
        GitOptions::default(),
    )
    .unwrap();
    let trees = TempDir::new().unwrap();
    let ws = repo
        .prepare(&trees.path().join("one"), "one", 1)
        .await
        .unwrap();
    std::fs::write(ws.dir.join("one.txt"), "1\n").unwrap();

    repo.commit(&ws).await.unwrap();
    assert_integrated(&repo.integrate(&ws).await.unwrap());

    assert_eq!(
        server.subjects("app", FEATURE_BRANCH)[0],
        "one: work of attempt 1"
    );
}
