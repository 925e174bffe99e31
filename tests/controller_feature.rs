//! The controller against the fake API server, the test standing in for the kubelet:
//! a Feature runs to Complete in dependency order, a crash is retried, an expired claim
//! makes the attempt lost and retried, and a suspend cancels the running attempt.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/controller_harness.rs"]
mod harness;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use ralph::api::{AttemptOutcome, FeaturePhase};
use ralph::engine::dag::TaskPhase;

use harness::{Harness, NS, feature_manifest, runner_arg};

/// Diamond: a; b and c after a; d after b and c.
fn diamond() -> serde_json::Value {
    serde_json::json!([
        {"name": "a", "title": "Write the greeting"},
        {"name": "b", "dependsOn": ["a"]},
        {"name": "c", "dependsOn": ["a"]},
        {"name": "d", "dependsOn": ["b", "c"]}
    ])
}

/// Finishes every agent Pod that appears with its task-done sigil until the feature is
/// Complete; returns the task ids in the order their Pods appeared.
async fn run_to_completion(h: &Harness, feature: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    let deadline = tokio::time::Instant::now() + harness::PATIENCE;
    loop {
        for pod in h.agent_pods().await {
            if seen.insert(pod.name_any()) {
                order.push(runner_arg(&pod, "--task").unwrap_or_default());
                h.finish_done(&pod).await;
            }
        }
        let phase = h
            .features()
            .get(feature)
            .await
            .ok()
            .and_then(|f| f.status)
            .map(|s| s.phase);
        if phase == Some(FeaturePhase::Complete) {
            return order;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "feature {feature} did not complete; pods seen: {order:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn feature_runs_its_tasks_in_dependency_order_to_complete() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "hello",
        diamond(),
        serde_json::json!({"parallelism": 2}),
    ))
    .await;

    let order = run_to_completion(&h, "hello").await;

    assert_eq!(order.len(), 4, "{order:?}");
    assert_eq!(order[0], "a");
    assert_eq!(order[3], "d");
    let feature = h.features().get("hello").await.expect("feature");
    let status = feature.status.expect("status");
    assert_eq!(status.counts.done, 4);
    assert_eq!(status.counts.total, 4);
    assert_eq!(status.iterations, 4);
    assert_eq!(status.usage.input_tokens, 400);
    for task in ["a", "b", "c", "d"] {
        let t = h.tasks().get(&format!("hello-{task}")).await.expect("task");
        let s = t.status.expect("task status");
        assert_eq!(s.phase, TaskPhase::Done, "task {task}");
        assert_eq!(s.attempts[0].outcome, Some(AttemptOutcome::Done));
    }
    h.stop().await;
}

#[tokio::test]
async fn finished_attempts_keep_their_pods_for_logs_and_write_no_prompt_objects() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "tidy",
        diamond(),
        serde_json::json!({"parallelism": 4}),
    ))
    .await;
    run_to_completion(&h, "tidy").await;

    let pods: Vec<String> = h.agent_pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        pods,
        ["tidy-a-a1", "tidy-b-a1", "tidy-c-a1", "tidy-d-a1"],
        "finished Pods stay for `kubectl logs` until their retention ends"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), NS);
    let prompts = config_maps
        .list(&kube::api::ListParams::default().labels("ralph.dev/attempt"))
        .await
        .expect("list configmaps");
    assert!(prompts.items.is_empty(), "{:?}", prompts.items);
    h.stop().await;
}

#[tokio::test]
async fn agent_pod_gets_the_prompt_and_the_claim_lease_names_the_attempt() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "one",
        serde_json::json!([{"name": "a", "title": "Greet", "description": "Write hello.txt"}]),
        serde_json::json!({}),
    ))
    .await;
    let pod = h.wait_for_pod("one-a-a1").await;
    let text = pod
        .annotations()
        .get("ralph.dev/prompt")
        .cloned()
        .expect("prompt annotation");
    assert!(text.contains("Write hello.txt"), "{text}");
    let lease = h.leases().get("one-a").await.expect("claim Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("one-a-a1")
    );
    let task = h.tasks().get("one-a").await.expect("task");
    assert_eq!(task.status.map(|s| s.phase), Some(TaskPhase::Running));
    h.finish_done(&pod).await;
    h.wait_for_feature_phase("one", "Complete").await;
    h.stop().await;
}

#[tokio::test]
async fn crashed_attempt_is_retried_and_the_next_prompt_says_why() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "crashy",
        serde_json::json!([{"name": "a"}]),
        serde_json::json!({}),
    ))
    .await;
    h.wait_for_pod("crashy-a-a1").await;
    h.terminate_agent("crashy-a-a1", 137, "OOMKilled", None)
        .await;

    let second = h.wait_for_pod("crashy-a-a2").await;
    let text = second
        .annotations()
        .get("ralph.dev/prompt")
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("OOMKilled"), "{text}");
    let task = h.tasks().get("crashy-a").await.expect("task");
    let status = task.status.expect("status");
    assert_eq!(status.retry_count, 1);
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Crashed));

    h.finish_done(&second).await;
    h.wait_for_feature_phase("crashy", "Complete").await;
    h.stop().await;
}

#[tokio::test]
async fn failed_task_blocks_its_dependents_and_fails_the_feature() {
    let h = Harness::start().await;
    let tasks = serde_json::json!([
        {"name": "a", "maxRetries": 0},
        {"name": "b", "dependsOn": ["a"]}
    ]);
    h.create_feature(feature_manifest("doomed", tasks, serde_json::json!({})))
        .await;
    let pod = h.wait_for_pod("doomed-a-a1").await;
    h.finish_attempt(&pod, serde_json::json!({"taskFailed": "a"}))
        .await;

    let feature = h.wait_for_feature_phase("doomed", "Failed").await;
    let status = feature.status.expect("status");
    assert_eq!(status.counts.failed, 1);
    assert_eq!(status.counts.blocked, 1);
    let b = h.tasks().get("doomed-b").await.expect("task b");
    assert_eq!(b.status.map(|s| s.phase), Some(TaskPhase::Blocked));
    h.stop().await;
}

#[tokio::test]
async fn expired_claim_makes_the_attempt_lost_deletes_its_pod_and_retries() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "lossy",
        serde_json::json!([{"name": "a"}]),
        serde_json::json!({}),
    ))
    .await;
    h.wait_for_pod("lossy-a-a1").await;
    h.set_running("lossy-a-a1").await;
    // The sidecar stopped renewing long ago (node lost).
    let stale = serde_json::json!({"spec": {"renewTime": "2020-01-01T00:00:00.000000Z"}});
    h.leases()
        .patch("lossy-a", &PatchParams::default(), &Patch::Merge(&stale))
        .await
        .expect("age the lease");

    h.wait_for_pod_gone("lossy-a-a1").await;
    let second = h.wait_for_pod("lossy-a-a2").await;
    let task = h.tasks().get("lossy-a").await.expect("task");
    let status = task.status.expect("status");
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Lost));
    h.finish_done(&second).await;
    h.wait_for_feature_phase("lossy", "Complete").await;
    h.stop().await;
}

#[tokio::test]
async fn suspend_cancels_the_running_attempt_and_starts_nothing() {
    let h = Harness::start().await;
    let tasks = serde_json::json!([{"name": "a"}, {"name": "b", "dependsOn": ["a"]}]);
    h.create_feature(feature_manifest("paused", tasks, serde_json::json!({})))
        .await;
    h.wait_for_pod("paused-a-a1").await;
    h.set_running("paused-a-a1").await;

    let suspend = serde_json::json!({"spec": {"suspend": true}});
    h.features()
        .patch("paused", &PatchParams::default(), &Patch::Merge(&suspend))
        .await
        .expect("suspend");

    h.wait_for_pod_gone("paused-a-a1").await;
    h.wait_for_feature_phase("paused", "Suspended").await;
    let task = h
        .eventually("attempt to be recorded interrupted", || async {
            let t = h.tasks().get("paused-a").await.ok()?;
            let outcome = t.status.as_ref()?.attempts.first()?.outcome;
            (outcome == Some(AttemptOutcome::Interrupted)).then_some(t)
        })
        .await;
    let status = task.status.expect("status");
    assert_eq!(status.phase, TaskPhase::Pending);
    assert_eq!(status.retry_count, 0);
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn invalid_plan_is_reported_and_nothing_runs() {
    let h = Harness::start().await;
    let tasks = serde_json::json!([
        {"name": "a", "dependsOn": ["b"]},
        {"name": "b", "dependsOn": ["a"]}
    ]);
    h.create_feature(feature_manifest("loop", tasks, serde_json::json!({})))
        .await;
    let feature = h.wait_for_feature_phase("loop", "Invalid").await;
    let status = feature.status.expect("status");
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .expect("Valid condition");
    assert_eq!(valid.status, "False");
    assert!(valid.message.contains("loop-a"), "{}", valid.message);
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn parallelism_limits_concurrent_agent_pods() {
    let h = Harness::start().await;
    let tasks = serde_json::json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
    h.create_feature(feature_manifest(
        "narrow",
        tasks,
        serde_json::json!({"parallelism": 2}),
    ))
    .await;
    h.wait_for_pod("narrow-a-a1").await;
    h.wait_for_pod("narrow-b-a1").await;
    // Let the controller settle, then check that the third did not start.
    h.eventually("feature status to count two running", || async {
        let f = h.features().get("narrow").await.ok()?;
        (f.status?.counts.running == 2).then_some(())
    })
    .await;
    assert!(
        h.pods()
            .get_opt("narrow-c-a1")
            .await
            .expect("get")
            .is_none()
    );
    let first = h.pods().get("narrow-a-a1").await.expect("pod");
    h.finish_done(&first).await;
    h.wait_for_pod("narrow-c-a1").await;
    h.stop().await;
}
