//! Verification on a cluster, the test standing in for the kubelet: `verify.command` runs in
//! the worker's own Pod (the runner is told with `--verify-command`), and a failing check
//! retries the task with the end of the command's output in the next prompt.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/controller_harness.rs"]
mod harness;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use ralph::api::AttemptOutcome;
use ralph::engine::verification::AttemptKind;

use harness::{Harness, feature_manifest, runner_arg};

/// Kubelet stand-in: the runner reported its task done and `cargo test` exiting `exit_code`.
async fn finish_checked(h: &Harness, pod: &Pod, exit_code: i32, tail: &str) {
    let name = pod.name_any();
    let task_id = runner_arg(pod, "--task").expect("runner --task");
    let result = serde_json::json!({
        "version": 1,
        "task": task_id,
        "attempt": name,
        "outcome": "finished",
        "stopReason": "end_turn",
        "exitCode": 0,
        "sigils": {"taskDone": task_id},
        "check": {"command": "cargo test", "exitCode": exit_code, "outputTail": tail},
        "timings": {"startedAtMs": 0, "endedAtMs": jiff::Timestamp::now().as_millisecond()}
    });
    h.terminate_agent(&name, 0, "Completed", Some(result.to_string()))
        .await;
}

fn checked_feature(name: &str) -> serde_json::Value {
    feature_manifest(
        name,
        serde_json::json!([{"name": "a"}]),
        serde_json::json!({
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
    let prompt = second
        .annotations()
        .get("ralph.dev/prompt")
        .cloned()
        .unwrap_or_default();
    assert!(
        prompt.contains("verify.command `cargo test` exited with code 101")
            && prompt.contains("test greeting ... FAILED"),
        "{prompt}"
    );
    let status = h
        .tasks()
        .get("checked-a")
        .await
        .expect("task")
        .status
        .expect("status");
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
