//! What a real kubelet showed: a finished agent Pod must end at once in both sidecar modes
//! (a plain sidecar that outlives its agent keeps the Pod Running and fills the node), and a
//! Pod that waits for a node longer than its claim's lease must not be ruled lost.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use ralph::api::{AttemptOutcome, FeaturePhase};
use serde_json::json;

use crate::harness::{E2e, PodRunner, attempts};

/// Runs a one-task Feature to Complete and waits (bounded) until its Pod is Succeeded or
/// Failed: before the fix, a plain claim-keeper kept it Running for the agent's idle timeout
/// plus a minute (here 16 minutes), past any wait limit.
async fn a_finished_pod_ends(e2e: &mut E2e, name: &str) -> Pod {
    let spec = json!({ "tasks": [{ "name": "design", "description": "Design it." }] });
    e2e.apply_scripted(name, "plan.script.yaml", spec).await;
    e2e.wait_for_phase(name, FeaturePhase::Complete).await;
    let pods = e2e.pods();
    let pod_name = format!("{name}-design-a1");
    e2e.eventually(&format!("Pod {pod_name} to end"), || async {
        let pod = pods.get_opt(&pod_name).await.ok().flatten()?;
        let phase = pod.status.as_ref()?.phase.clone()?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(pod)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_finished_pod_with_a_plain_sidecar_ends_with_its_agent() {
    let mut e2e = E2e::setup_with("plainend", &["--native-sidecars", "false"]).await;
    let pod = a_finished_pod_ends(&mut e2e, "plainend").await;
    let containers = pod.spec.as_ref().map(|s| s.containers.len());
    assert_eq!(containers, Some(2), "the claim-keeper is a plain container");
    assert_eq!(
        pod.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_finished_pod_with_a_native_sidecar_ends_with_its_agent() {
    let mut e2e = E2e::setup_with("nativeend", &["--native-sidecars", "true"]).await;
    let pod = a_finished_pod_ends(&mut e2e, "nativeend").await;
    let init = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref());
    let native = init.is_some_and(|c| {
        c.iter()
            .any(|c| c.restart_policy.as_deref() == Some("Always"))
    });
    assert!(native, "the claim-keeper is a native sidecar");
    assert_eq!(
        pod.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded")
    );
}

/// The nodes Pods of this test may go to: the stand-in's, or every schedulable one.
async fn nodes_of(e2e: &E2e) -> Vec<String> {
    match &e2e.runner {
        PodRunner::StandIn { node } => vec![node.clone()],
        PodRunner::Cluster { .. } => {
            let nodes = Api::<Node>::all(e2e.client.clone())
                .list(&Default::default())
                .await
                .unwrap_or_else(|e| panic!("listing nodes: {e}"));
            nodes
                .items
                .into_iter()
                .filter(|n| {
                    !n.spec
                        .as_ref()
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false)
                })
                .filter_map(|n| n.metadata.name)
                .collect()
        }
    }
}

/// Sets (or with `None` removes) label `key` on `nodes`.
async fn label_nodes(e2e: &E2e, nodes: &[String], key: &str, value: Option<&str>) {
    let api = Api::<Node>::all(e2e.client.clone());
    let patch = json!({ "metadata": { "labels": { key: value } } });
    for node in nodes {
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("labelling node {node}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_pod_held_pending_longer_than_its_lease_is_not_lost() {
    let mut e2e = E2e::setup("hold").await;
    let hold_key = "ralph.dev/e2e-hold";
    let namespace = e2e.namespace.clone();
    let mut template = e2e.pod_template();
    template["nodeSelector"][hold_key] = json!(namespace);
    let spec = json!({
        "leaseDurationSeconds": 15,
        "podTemplate": template,
        "tasks": [{ "name": "design", "description": "Design it." }],
    });
    e2e.apply_scripted("hold", "plan.script.yaml", spec).await;

    // No node has the label: the Pod waits unscheduled, and the Task says why.
    let tasks = e2e.tasks();
    let waiting = e2e
        .eventually("Task hold-design to show AttemptStarted=False", || async {
            let task = tasks.get_opt("hold-design").await.ok().flatten()?;
            let status = task.status?;
            status
                .conditions
                .into_iter()
                .find(|c| c.type_ == "AttemptStarted" && c.status == "False")
        })
        .await;
    assert!(
        waiting.message.contains("not scheduled"),
        "{}",
        waiting.message
    );
    // Twice the lease: before the fix the attempt was ruled lost after one.
    tokio::time::sleep(std::time::Duration::from_secs(32)).await;
    let task = tasks.get("hold-design").await.expect("Task hold-design");
    assert_eq!(attempts(&task), [(1, None)], "the waiting attempt is kept");

    let nodes = nodes_of(&e2e).await;
    label_nodes(&e2e, &nodes, hold_key, Some(&namespace)).await;
    e2e.wait_for_phase("hold", FeaturePhase::Complete).await;
    label_nodes(&e2e, &nodes, hold_key, None).await;
    let task = tasks.get("hold-design").await.expect("Task hold-design");
    assert_eq!(attempts(&task), [(1, Some(AttemptOutcome::Done))]);
    let started = task
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "AttemptStarted");
    assert_eq!(started.map(|c| c.status).as_deref(), Some("True"));
}
