//! Verification on a cluster. `verify.command`, the test standing in for the kubelet: it runs
//! in the worker's own Pod (the runner is told with `--verify-command`), and a failing check
//! retries the task with the end of the command's output in the next prompt. `verify.agent`,
//! with the kubelet stand-in running the Pods against a real git server: the worker pushes its
//! work branch, a read-only verification Pod starts from it and integrates it on pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{git_cluster, harness};

use git_cluster::World;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use ralph::api::{AttemptOutcome, Task};
use ralph::engine::verification::AttemptKind;
use ralph::engine::workspace::WorkspaceOutcome;

use serde_json::json;

use harness::{Harness, assert_mentions, feature_manifest, one_task, prompt_of, runner_arg};

/// Kubelet stand-in: the runner reported its task done and `cargo test` exiting `exit_code`.
async fn finish_checked(h: &Harness, pod: &Pod, exit_code: i32, tail: &str) {
    let task_id = runner_arg(pod, "--task").expect("runner --task");
    let fields = json!({
        "sigils": {"taskDone": task_id},
        "check": {"command": "cargo test", "exitCode": exit_code, "outputTail": tail},
    });
    h.finish_with_result(pod, fields).await;
}

fn checked_feature(name: &str) -> serde_json::Value {
    feature_manifest(
        name,
        one_task(),
        json!({
            "verify": {"command": "cargo test", "commandTimeoutSeconds": 300},
            "retry": {"maxRetries": 2, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1}
        }),
    )
}

#[tokio::test]
async fn the_worker_pod_runs_the_verify_command_after_a_done_verdict() {
    let h = Harness::start().await;
    h.create_feature(checked_feature("checked")).await;
    let pod = h.wait_for_pod("checked-a-a1").await;
    assert_eq!(
        runner_arg(&pod, "--verify-command").as_deref(),
        Some("cargo test")
    );
    assert_eq!(
        runner_arg(&pod, "--verify-command-timeout").as_deref(),
        Some("300s")
    );
    assert_eq!(
        pod.labels()
            .get("ralph.dev/attempt-kind")
            .map(String::as_str),
        Some("work")
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failing_verify_command_retries_the_task_with_its_output_then_a_pass_completes_it() {
    let h = Harness::start().await;
    h.create_feature(checked_feature("checked")).await;
    let first = h.wait_for_pod("checked-a-a1").await;
    finish_checked(
        &h,
        &first,
        101,
        "test greeting ... FAILED\nerror: 1 test failed",
    )
    .await;

    let second = h.wait_for_pod("checked-a-a2").await;
    let prompt = prompt_of(&second);
    assert_mentions(
        &prompt,
        &[
            "verify.command `cargo test` exited with code 101",
            "test greeting ... FAILED",
        ],
    );
    let status = h.task_status("checked-a").await;
    assert_eq!(status.retry_count, 1);
    let record = &status.attempts[0];
    assert_eq!(record.kind, AttemptKind::Work);
    assert_eq!(record.outcome, Some(AttemptOutcome::Failed));
    assert_eq!(record.check.as_ref().and_then(|c| c.exit_code), Some(101));
    assert!(
        record
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("error: 1 test failed")),
        "{record:?}"
    );

    finish_checked(&h, &second, 0, "test result: ok").await;
    h.wait_for_feature_phase("checked", "Complete").await;
    assert_eq!(h.events_with_reason("VerificationFailed").await.len(), 1);
    h.stop().await;
}

/// A world holding the one-task Feature `checked` of the test repository, its agent
/// playing `script`, whose work a verification agent checks; and the Pod `pod` once it exists.
async fn agent_verified(script: &str, pod: &str) -> (World, Pod) {
    let world = World::with_credentials().await;
    let feature = world.feature_with(
        "checked",
        script,
        json!([{"name": "a", "description": "Serve GET /greeting."}]),
        json!({
            "verify": {"agent": true},
            "retry": {"maxRetries": 2, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1}
        }),
    );
    world.harness.create_feature(feature).await;
    let pod = world.harness.wait_for_pod(pod).await;
    (world, pod)
}

fn workspace_outcomes(task: &Task) -> Vec<Option<WorkspaceOutcome>> {
    task.status
        .iter()
        .flat_map(|s| &s.attempts)
        .map(|a| a.workspace.as_ref().map(|w| w.outcome))
        .collect()
}

const PASSING_SCRIPT: &str = r#"
tasks:
  a:
    - [ {tool: {path: greeting.rs, write: "fn greeting() {}\n"}}, {text: "<journal>Added GET /greeting.</journal> <task-done>a</task-done>"} ]
    - [ {text: "It answers. <verify-pass>a</verify-pass>"} ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_done_task_is_verified_by_a_read_only_verification_pod_before_it_is_done() {
    let (world, verifier) = agent_verified(PASSING_SCRIPT, "checked-a-a2").await;
    let h = &world.harness;
    assert!(runner_command_has(&verifier, "--read-only"));
    assert_eq!(
        verifier
            .labels()
            .get("ralph.dev/attempt-kind")
            .map(String::as_str),
        Some("verify")
    );
    let prompt = prompt_of(&verifier);
    assert!(prompt.starts_with("# Verify:"), "{prompt}");
    assert_mentions(&prompt, &["Added GET /greeting."]);

    h.wait_for_feature_phase("checked", "Complete").await;
    let task = world.task("checked-a").await;
    let status = task.status.as_ref().expect("status");
    let kinds: Vec<_> = status.attempts.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [AttemptKind::Work, AttemptKind::Verify]);
    let verifying = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verifying")
        .expect("Verifying condition");
    assert_eq!(
        (verifying.status.as_str(), verifying.reason.as_str()),
        ("False", "TaskVerified")
    );
    assert_eq!(
        workspace_outcomes(&task),
        [
            Some(WorkspaceOutcome::PushedWorkBranch),
            Some(WorkspaceOutcome::Integrated)
        ]
    );
    let branch = world.feature_branch("checked");
    assert_eq!(
        world.git.subjects("app", &branch),
        ["a: work of attempt 1", "initial commit"]
    );
    assert!(
        world
            .git
            .files("app", &branch)
            .contains(&"greeting.rs".to_owned())
    );
}

const REJECTED_SCRIPT: &str = r#"
tasks:
  a:
    - [ {tool: {path: greeting.rs, write: "fn greeting() { panic!() }\n"}}, {text: "<task-done>a</task-done>"} ]
    - [ {text: "GET /greeting answers 500. <verify-fail>a</verify-fail>"} ]
    - [ {delay: 60s}, {text: "<task-done>a</task-done>"} ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejecting_verifier_sends_the_task_back_to_work_with_its_reason() {
    let (world, retry) = agent_verified(REJECTED_SCRIPT, "checked-a-a3").await;
    assert!(!runner_command_has(&retry, "--read-only"));
    let prompt = prompt_of(&retry);
    assert_mentions(
        &prompt,
        &["the verifier rejected the work: GET /greeting answers 500."],
    );
    let task = world.task("checked-a").await;
    let status = task.status.as_ref().expect("status");
    assert_eq!(status.retry_count, 1);
    assert_eq!(
        workspace_outcomes(&task)[..2],
        [
            Some(WorkspaceOutcome::PushedWorkBranch),
            Some(WorkspaceOutcome::NotCommitted)
        ]
    );
    assert_eq!(
        world.subjects("checked"),
        ["initial commit"],
        "nothing rejected reached the feature branch"
    );
}

const WORK_SCRIPT: &str = r#"
tasks:
  a:
    - [ {tool: {path: greeting.rs, write: "fn greeting() {}\n"}}, {text: "<task-done>a</task-done>"} ]
    - [ {delay: 60s}, {text: "<verify-pass>a</verify-pass>"} ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_of_a_verified_feature_pushes_only_its_work_branch() {
    let (world, _) = agent_verified(WORK_SCRIPT, "checked-a-a2").await;
    let task = world.task("checked-a").await;
    assert_eq!(
        workspace_outcomes(&task).first(),
        Some(&Some(WorkspaceOutcome::PushedWorkBranch))
    );
    assert_eq!(
        world.git.subjects("app", "ralph-work/checked/a"),
        ["a: work of attempt 1", "initial commit"]
    );
    assert_eq!(world.subjects("checked"), ["initial commit"]);
}

fn runner_command_has(pod: &Pod, flag: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "agent"))
        .and_then(|c| c.command.as_ref())
        .is_some_and(|command| command.iter().any(|a| a == flag))
}

/// The runner reports what each attempt ran under; the controller copies it into the
/// attempt records and the `Confined` conditions of the Task and the Feature.
#[tokio::test]
async fn each_attempt_records_its_agent_mode_and_the_task_and_feature_are_confined() {
    let (world, _verifier) = agent_verified(PASSING_SCRIPT, "checked-a-a2").await;
    let h = &world.harness;

    let feature = h.wait_for_feature_phase("checked", "Complete").await;
    let task = world.task("checked-a").await;
    let status = task.status.as_ref().expect("status");
    let modes: Vec<_> = status
        .attempts
        .iter()
        .map(|a| a.ran_by.agent_mode.as_deref())
        .collect();
    assert_eq!(modes, [Some("default"), Some("plan")]);
    for conditions in [
        &status.conditions,
        &feature.status.expect("status").conditions,
    ] {
        let confined = conditions
            .iter()
            .find(|c| c.type_ == "Confined")
            .expect("Confined condition");
        assert_eq!(
            (confined.status.as_str(), confined.reason.as_str()),
            ("True", "Landlock"),
            "{confined:?}"
        );
    }
}
