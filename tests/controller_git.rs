//! Git workspaces in the cluster: the real controller against the fake API server, the
//! kubelet stand-in running the agent Pods (the git steps, the runner and the scripted ACP
//! agent as local processes), and a real git server (git http-backend with Basic auth).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{git_cluster, git_server, harness};

use std::path::Path;

use git_cluster::{SECRET, World};
use git_server::HTTP_TOKEN;
use harness::{NS, assert_mentions, prompt_of};
use ralph::api::{AttemptOutcome, Task};
use ralph::engine::workspace::WorkspaceOutcome;
use serde_json::json;

fn outcomes(task: &Task) -> Vec<(Option<AttemptOutcome>, Option<WorkspaceOutcome>)> {
    task.status
        .iter()
        .flat_map(|s| s.attempts.iter())
        .map(|a| (a.outcome, a.workspace.as_ref().map(|w| w.outcome)))
        .collect()
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The one task `a` of a Feature.
fn task_a() -> serde_json::Value {
    json!([{"name": "a", "description": "A."}])
}

/// Every attempt says its task is done.
const DONE_SCRIPT: &str = "default:\n  - {text: \"Did it. <task-done>{task}</task-done>\"}\n";

const DIAMOND_SCRIPT: &str = r#"
tasks:
  top:
    - [ {tool: {path: top.txt, write: "top\n"}}, {text: "Wrote it. <task-done>top</task-done>"} ]
  left:
    - [ {tool: {path: left.txt, write: "left\n"}}, {text: "Wrote it. <task-done>left</task-done>"} ]
  right:
    - [ {tool: {path: right.txt, write: "right\n"}}, {text: "Wrote it. <task-done>right</task-done>"} ]
  bottom:
    - [ {tool: {path: bottom.txt, write: "bottom\n"}}, {text: "Wrote it. <task-done>bottom</task-done>"} ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_diamond_lands_four_commits_on_the_feature_branch_and_dependents_see_their_blockers() {
    let world = World::with_credentials().await;
    let tasks = json!([
        {"name": "top", "description": "Top."},
        {"name": "left", "description": "Left.", "dependsOn": ["top"]},
        {"name": "right", "description": "Right.", "dependsOn": ["top"]},
        {"name": "bottom", "description": "Bottom.", "dependsOn": ["left", "right"]}
    ]);
    let feature = world.run("diamond", DIAMOND_SCRIPT, tasks, 2).await;

    let branch = world.feature_branch("diamond");
    let subjects = world.git.subjects("app", &branch);
    for task in ["top", "left", "right", "bottom"] {
        assert!(
            subjects.contains(&format!("{task}: work of attempt 1")),
            "{task} missing in {subjects:?}"
        );
    }
    assert_eq!(subjects.len(), 5, "{subjects:?}");
    let git = feature.status.and_then(|s| s.git).expect("branch status");
    assert_eq!(git.branch, branch);
    assert_eq!(git.head, world.git.head("app", &branch));
    assert_eq!(git.integrated, 4);
    let bottom = world.task("diamond-bottom").await;
    assert_eq!(
        outcomes(&bottom),
        vec![(
            Some(AttemptOutcome::Done),
            Some(WorkspaceOutcome::Integrated)
        )]
    );
    let workspace = world.workspace_of("diamond-bottom-a1");
    for blocker in ["top.txt", "left.txt", "right.txt"] {
        assert!(
            workspace.join(blocker).exists(),
            "bottom's workspace started with {blocker}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_process_sees_no_credential_in_its_mounts_or_workspace() {
    let world = World::with_credentials().await;
    let script = "default:\n  - {tool: {path: a.txt, write: \"a\\n\"}}\n  - {text: \"Wrote it. <task-done>{task}</task-done>\"}\n";
    world.run("secretless", script, task_a(), 1).await;
    let run = world
        .standin
        .run_info(NS, "secretless-a-a1")
        .expect("the attempt ran");
    let mounts: Vec<(String, std::path::PathBuf)> = run
        .paths
        .mounts()
        .map(|(p, h)| (p.to_owned(), h.to_owned()))
        .collect();
    assert!(
        mounts.iter().all(|(p, _)| !p.contains("git-credentials")),
        "{mounts:?}"
    );
    let mut files = Vec::new();
    for (_, host) in &mounts {
        if host.is_dir() {
            files_under(host, &mut files);
        } else {
            files.push(host.clone());
        }
    }
    assert!(files.len() > 3, "the agent's mounts hold files: {files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(HTTP_TOKEN),
            "{} holds the token",
            file.display()
        );
    }
}

const SAME_LINE_SCRIPT: &str = r##"
tasks:
  first:
    - [ {delay: 1500ms}, {tool: {path: README.md, write: "# app\n\nstatus: first\n"}}, {text: "Wrote it. <task-done>first</task-done>"} ]
    - [ {tool: {path: README.md, write: "# app\n\nstatus: first and second\n"}}, {text: "Wrote it. <task-done>first</task-done>"} ]
  second:
    - [ {delay: 1500ms}, {tool: {path: README.md, write: "# app\n\nstatus: second\n"}}, {text: "Wrote it. <task-done>second</task-done>"} ]
    - [ {tool: {path: README.md, write: "# app\n\nstatus: first and second\n"}}, {text: "Wrote it. <task-done>second</task-done>"} ]
"##;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_edits_of_one_line_conflict_and_the_retry_on_the_new_head_integrates() {
    let world = World::with_credentials().await;
    let tasks = json!([
        {"name": "first", "description": "First."},
        {"name": "second", "description": "Second."}
    ]);
    world.run("clash", SAME_LINE_SCRIPT, tasks, 2).await;

    let first = world.task("clash-first").await;
    let second = world.task("clash-second").await;
    let (retried, winner, other) = if outcomes(&first).len() == 2 {
        (first, "second", "first")
    } else {
        (second, "first", "second")
    };
    assert_eq!(
        outcomes(&retried),
        vec![
            (
                Some(AttemptOutcome::Conflict),
                Some(WorkspaceOutcome::Conflict)
            ),
            (
                Some(AttemptOutcome::Done),
                Some(WorkspaceOutcome::Integrated)
            ),
        ]
    );
    assert_eq!(retried.status.as_ref().map(|s| s.retry_count), Some(1));
    let retry_pod = world
        .harness
        .pods()
        .get(&format!("clash-{other}-a2"))
        .await
        .expect("the retry's Pod");
    let prompt = prompt_of(&retry_pod);
    assert_mentions(&prompt, &["README.md", &format!("task {winner}")]);
    let subjects = world.subjects("clash");
    assert_eq!(
        subjects[..2],
        [
            format!("{other}: work of attempt 2"),
            format!("{winner}: work of attempt 1")
        ]
    );
}

const CRASH_SCRIPT: &str = r#"
tasks:
  build:
    - [ {tool: {path: half.txt, write: "half\n"}}, {exit: 3} ]
    - [ {text: "Checked it. <task-done>build</task-done>"} ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_mid_task_leaves_no_commit_and_the_retry_starts_clean() {
    let world = World::with_credentials().await;
    let build = json!([{"name": "build", "description": "Build."}]);
    world.run("crashy", CRASH_SCRIPT, build, 1).await;
    let task = world.task("crashy-build").await;
    let recorded = outcomes(&task);
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    assert_eq!(recorded[0].0, Some(AttemptOutcome::Crashed));
    assert_eq!(
        recorded[1],
        (
            Some(AttemptOutcome::Done),
            Some(WorkspaceOutcome::Unchanged)
        )
    );
    assert_eq!(world.subjects("crashy"), vec!["initial commit"]);
    let workspace = world.workspace_of("crashy-build-a2");
    assert!(
        !workspace.join("half.txt").exists(),
        "the retry starts clean"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_credentials_stop_the_feature_with_a_condition_naming_the_secret() {
    let world = World::start().await;
    world.create_secret("not-the-token").await;
    world.create("locked", DONE_SCRIPT, task_a(), 1).await;
    let condition = world
        .harness
        .wait_for_feature_condition("locked", "Configured", "AgentMisconfigured")
        .await;
    assert_mentions(&condition.message, &[SECRET]);
    let task = world.task("locked-a").await;
    assert_eq!(
        outcomes(&task).first().map(|o| o.0),
        Some(Some(AttemptOutcome::Misconfigured))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_secret_is_a_condition_and_claims_nothing() {
    let world = World::start().await;
    world.create("nosecret", DONE_SCRIPT, task_a(), 1).await;
    let condition = world
        .harness
        .wait_for_feature_condition("nosecret", "Configured", "GitCredentialsMissing")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(&condition.message, &[&format!("{NS}/{SECRET}")]);
    let warnings = world
        .harness
        .events_with_reason("GitCredentialsMissing")
        .await;
    assert_eq!(warnings.len(), 1, "one Warning Event");
    assert!(world.harness.agent_pods().await.is_empty(), "no Pod");
    assert!(
        world
            .harness
            .leases()
            .list(&Default::default())
            .await
            .expect("leases")
            .items
            .is_empty()
    );
}
