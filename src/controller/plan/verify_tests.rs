use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::Task;
use crate::api::{AgentSpec, AttemptOutcome, AttemptRecord, VerifySpec};
use crate::controller::plan::pod::{AttemptPod, SidecarMode, attempt_pod};
use crate::controller::testing::{assert_problem, condition_state, object, pod_settings};
use crate::engine::policy::{self as engine_policy, TaskContext};

fn feature(verify: serde_json::Value) -> Feature {
    let metadata = serde_json::json!({"name": "hello", "namespace": "team", "generation": 1});
    let spec = serde_json::json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "verify": verify,
        "tasks": [{"name": "t"}]
    });
    object("Feature", metadata, spec)
}

fn task(attempts: &[(AttemptKind, Option<AttemptOutcome>)]) -> CachedTask {
    let metadata = serde_json::json!({"name": "hello-t", "namespace": "team", "generation": 1});
    let mut task: Task = object("Task", metadata, serde_json::json!({"featureRef": "hello"}));
    let mut status = TaskStatus {
        attempt_count: u32::try_from(attempts.len()).unwrap_or(0),
        ..TaskStatus::default()
    };
    for (number, (kind, outcome)) in (1..).zip(attempts) {
        status.push_attempt(AttemptRecord {
            number,
            kind: *kind,
            outcome: *outcome,
            generation: Some(1),
            ..AttemptRecord::default()
        });
    }
    task.status = Some(status);
    task.into()
}

fn pod(kind: AttemptKind, verify: &VerifySpec) -> Pod {
    let agent: AgentSpec =
        serde_json::from_value(serde_json::json!({"image": "agent:1", "command": ["agent"]}))
            .expect("valid agent");
    let input = AttemptPod {
        namespace: "team",
        task: "hello-t",
        task_id: "t",
        feature: "hello",
        attempt_id: "hello-t-a2",
        prompt: "Verify task t.",
        owner: OwnerReference::default(),
        agent: &agent,
        model: None,
        overrides: None,
        kind,
        verify,
        lease_duration_seconds: 60,
    };
    attempt_pod(&input, &pod_settings(SidecarMode::Native)).expect("pod")
}

fn runner_command(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "agent"))
        .and_then(|c| c.command.clone())
        .unwrap_or_default()
}

fn command_spec() -> VerifySpec {
    VerifySpec {
        command: Some("cargo test".to_owned()),
        command_timeout_seconds: Some(120),
        ..VerifySpec::default()
    }
}

#[test]
fn a_verification_agent_without_a_git_workspace_is_a_problem_naming_the_fix() {
    assert_problem(
        verify_problem(&feature(serde_json::json!({"agent": true}))),
        "VerifyNeedsWorkspace",
        &["spec.workspace.git", "spec.verify.command"],
    );
}

#[test]
fn a_verify_command_alone_needs_no_workspace() {
    assert_eq!(
        verify_problem(&feature(serde_json::json!({"command": "cargo test"}))),
        None
    );
}

#[test]
fn the_attempt_after_done_work_verifies() {
    let feature = feature(serde_json::json!({"agent": true}));
    let task = task(&[(AttemptKind::Work, Some(AttemptOutcome::Done))]);
    assert_eq!(next_attempt_kind(&feature, &task), AttemptKind::Verify);
}

#[test]
fn the_attempt_after_a_failed_verification_works() {
    let feature = feature(serde_json::json!({"agent": true}));
    let task = task(&[
        (AttemptKind::Work, Some(AttemptOutcome::Done)),
        (AttemptKind::Verify, Some(AttemptOutcome::Failed)),
    ]);
    assert_eq!(next_attempt_kind(&feature, &task), AttemptKind::Work);
}

#[test]
fn a_verification_pod_runs_the_runner_read_only_and_is_labelled_verify() {
    let pod = pod(AttemptKind::Verify, &command_spec());
    let command = runner_command(&pod);
    assert!(command.contains(&"--read-only".to_owned()), "{command:?}");
    assert!(
        !command.contains(&"--verify-command".to_owned()),
        "{command:?}"
    );
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get(crate::api::labels::ATTEMPT_KIND_LABEL)
            .map(String::as_str),
        Some("verify")
    );
}

#[test]
fn a_work_pod_runs_the_verify_command_with_its_limits() {
    let command = runner_command(&pod(AttemptKind::Work, &command_spec()));
    let at = command
        .iter()
        .position(|a| a == "--verify-command")
        .expect("--verify-command");
    assert_eq!(command[at + 1], "cargo test");
    let timeout = command
        .iter()
        .position(|a| a == "--verify-command-timeout")
        .expect("--verify-command-timeout");
    assert_eq!(command[timeout + 1], "120s");
    assert!(!command.contains(&"--read-only".to_owned()));
    let agent_at = command.iter().position(|a| a == "--").expect("--");
    assert!(at < agent_at, "runner flags come before the agent command");
}

#[test]
fn a_work_pod_without_verification_gets_no_verify_flags() {
    let command = runner_command(&pod(AttemptKind::Work, &VerifySpec::default()));
    assert!(
        !command
            .iter()
            .any(|a| a.starts_with("--verify") || a == "--read-only")
    );
}

fn context() -> TaskContext {
    TaskContext {
        name: "t".to_owned(),
        retry_count: 0,
        max_retries: 2,
        verify: true,
    }
}

/// Status and reason of the Verifying condition in `status`.
fn verifying(status: &TaskStatus) -> (&str, &str) {
    condition_state(&status.conditions, conditions::VERIFYING)
}

/// Records the end of the current attempt with `decision`, under a verifying Feature.
fn end_with(status: &mut TaskStatus, decision: &engine_policy::Decision) {
    let feature = feature(serde_json::json!({"agent": true}));
    record_end(status, &feature, decision, Some(1), 0);
}

/// The status of a task after `attempts` (kind and outcome, oldest first).
fn status_after(attempts: &[(AttemptKind, Option<AttemptOutcome>)]) -> TaskStatus {
    task(attempts).status.unwrap_or_default()
}

#[test]
fn a_pending_verification_shows_as_the_verifying_condition() {
    let mut status = status_after(&[(AttemptKind::Work, Some(AttemptOutcome::Done))]);
    let decision = engine_policy::decide(&context(), &crate::engine::testing::done("t"));
    end_with(&mut status, &decision);
    assert_eq!(verifying(&status), ("True", "VerificationPending"));
}

#[test]
fn a_running_verification_shows_as_the_verifying_condition_and_on_its_record() {
    let mut status = status_after(&[
        (AttemptKind::Work, Some(AttemptOutcome::Done)),
        (AttemptKind::Work, None),
    ]);
    record_start(&mut status, AttemptKind::Verify, Some(1), 0);
    assert_eq!(status.attempts[1].kind, AttemptKind::Verify);
    assert_eq!(verifying(&status), ("True", "VerificationRunning"));
}

#[test]
fn a_ruling_verification_turns_the_condition_false_with_its_reason() {
    let mut status = status_after(&[
        (AttemptKind::Work, Some(AttemptOutcome::Done)),
        (AttemptKind::Verify, Some(AttemptOutcome::Failed)),
    ]);
    record_start(&mut status, AttemptKind::Verify, Some(1), 0);
    let decision =
        engine_policy::verification_failed(&context(), "the verifier rejected the work".into());
    end_with(&mut status, &decision);
    assert_eq!(verifying(&status), ("False", "VerificationFailed"));
}

#[test]
fn the_verification_prompt_gets_what_the_worker_noted() {
    let mut task = task(&[(AttemptKind::Work, Some(AttemptOutcome::Done))]);
    if let Some(status) = task.status.as_mut() {
        status.attempts[0].sigils.journal = vec!["Added GET /greeting.".to_owned()];
    }
    assert_eq!(
        reported_work(&task).as_deref(),
        Some("Added GET /greeting.")
    );
}

#[test]
fn the_next_work_prompt_is_told_why_the_verification_failed() {
    let mut task = task(&[
        (AttemptKind::Work, Some(AttemptOutcome::Done)),
        (AttemptKind::Verify, None),
    ]);
    let decision = engine_policy::verification_failed(
        &context(),
        "the verifier rejected the work: GET /greeting answers 500".into(),
    );
    let ingestion = crate::controller::plan::status::Ingestion {
        decision: &decision,
        result: None,
        next_attempt_after_ms: None,
        now_ms: 0,
    };
    task.status = Some(crate::controller::plan::status::ingested(&task, &ingestion));
    let previous = crate::controller::plan::status::previous_attempt(&task).map(|p| p.to_string());
    assert_eq!(
        previous.as_deref(),
        Some("Previous attempt failed: the verifier rejected the work: GET /greeting answers 500")
    );
}
