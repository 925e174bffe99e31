//! An agent image no registry serves: the kubelet cannot pull it (a real one on a cluster
//! with nodes; the stand-in, which never pulls an image under `.invalid`, elsewhere), and
//! the Feature and its Task say so with the kubelet's reason, without a retry or a loop.

use ralph::api::AttemptOutcome;
use serde_json::json;

use crate::harness::{E2e, attempts};

/// An image that can exist on no registry: `.invalid` never resolves (RFC 6761).
const UNPULLABLE: &str = "registry.invalid/ralph-e2e/agent:never";

/// The kubelet's reasons for an image it cannot pull (it alternates between them).
const PULL_REASONS: [&str; 2] = ["ErrImagePull", "ImagePullBackOff"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn an_agent_image_that_cannot_be_pulled_is_a_visible_condition_and_no_retry() {
    let mut e2e = E2e::setup("unpullable").await;
    let mut agent = e2e.scripted_agent("plan.script.yaml");
    agent["image"] = json!(UNPULLABLE);
    e2e.apply_one_task_feature("unpullable", agent).await;

    let condition = e2e
        .wait_for_condition("unpullable", "Configured", "False")
        .await;
    assert!(
        PULL_REASONS.contains(&condition.reason.as_str()),
        "reason {}: {}",
        condition.reason,
        condition.message
    );
    crate::fake_apiserver::assert_mentions(
        &condition.message,
        &["unpullable-design-a1", UNPULLABLE, "spec.agent.image"],
    );

    let tasks = e2e.tasks();
    let task = e2e
        .eventually(
            "attempt 1 of Task unpullable-design to be recorded",
            || async {
                let task = tasks.get_opt("unpullable-design").await.ok().flatten()?;
                attempts(&task).first()?.1.map(|_| task)
            },
        )
        .await;
    assert_eq!(attempts(&task), [(1, Some(AttemptOutcome::Misconfigured))]);
    assert_eq!(task.status.map(|s| s.retry_count), Some(0));
    let mut warnings = 0;
    for reason in PULL_REASONS.iter().chain(&["AgentMisconfigured"]) {
        warnings += e2e.events_with_reason(reason).await.len();
    }
    assert_eq!(warnings, 1, "one Warning Event for the problem");
    let pods = e2e.pod_names();
    assert_eq!(pods, ["unpullable-design-a1"], "no attempt after the first");
}
