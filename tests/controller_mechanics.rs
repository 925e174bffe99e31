//! The controller's mechanics against the fake API server: the API writes one successful
//! attempt costs (four: claim, Pod, Running, result), no claim while the agent
//! ServiceAccount is missing, and agent Pods stopped when their Feature's plan turns invalid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use fake_apiserver::RequestRecord;
use harness::{Harness, NS, feature_manifest};

fn kind_of(record: &RequestRecord) -> String {
    match &record.subresource {
        Some(sub) => format!("{} {}/{}", record.method, record.resource, sub),
        None => format!("{} {}", record.method, record.resource),
    }
}

/// Successful writes that belong to attempts: not the test's own objects, not the kubelet
/// stand-in's Pod statuses, not the Feature → Task sync, not Feature status, not Events
/// (counted by what they regard).
fn attempt_writes(h: &Harness) -> BTreeMap<String, usize> {
    let not_attempts = [
        "POST features",
        "PATCH features",
        "POST serviceaccounts",
        "PATCH pods/status",
        "PATCH tasks",
        "PATCH features/status",
        "POST events",
        "PATCH events",
    ];
    let mut writes = BTreeMap::new();
    for record in h.server.requests() {
        let kind = kind_of(&record);
        if record.verb.is_write() && record.status < 400 && !not_attempts.contains(&kind.as_str()) {
            *writes.entry(kind).or_default() += 1;
        }
    }
    writes
}

#[tokio::test]
async fn a_successful_attempt_costs_four_writes_and_no_task_event() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "lean",
        serde_json::json!([{"name": "a"}]),
        serde_json::json!({}),
    ))
    .await;
    let pod = h.wait_for_pod("lean-a-a1").await;
    h.finish_done(&pod).await;
    // The Feature's status is written after the task's actions: nothing follows for it.
    h.wait_for_feature_phase("lean", "Complete").await;

    let expected: BTreeMap<String, usize> = [
        ("POST leases", 1),        // claim
        ("POST pods", 1),          // the agent Pod
        ("PATCH tasks/status", 2), // Running, then the result
    ]
    .into_iter()
    .map(|(kind, count)| (kind.to_owned(), count))
    .collect();
    assert_eq!(attempt_writes(&h), expected);
    let events: Api<Event> = Api::namespaced(h.client.clone(), NS);
    let about_tasks: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Task"))
        .map(|e| e.reason.unwrap_or_default())
        .collect();
    assert!(
        about_tasks.is_empty(),
        "Events about the task: {about_tasks:?}"
    );
    // The claim is spent, not released: the Task records none, the Lease is left to expire.
    let task = h.tasks().get("lean-a").await.expect("task");
    assert_eq!(task.status.and_then(|s| s.claim), None);
    let lease = h.leases().get("lean-a").await.expect("lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("lean-a-a1")
    );
    h.stop().await;
}

/// A harness whose namespace has no `ralph-agent` ServiceAccount (the harness creates one;
/// it is deleted once it exists).
async fn harness_without_agent_service_account() -> Harness {
    let h = Harness::start().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(h.client.clone(), NS);
    h.eventually("the harness's ServiceAccount", || async {
        accounts.get_opt("ralph-agent").await.ok()?.map(|_| ())
    })
    .await;
    accounts
        .delete("ralph-agent", &DeleteParams::default())
        .await
        .expect("delete the ServiceAccount");
    h
}

#[tokio::test]
async fn a_missing_agent_service_account_is_a_condition_with_one_warning_and_no_claim() {
    let h = harness_without_agent_service_account().await;

    h.create("accountless", harness::one_task(), serde_json::json!({}))
        .await;
    let condition = h
        .wait_for_feature_condition("accountless", "Configured", "MissingServiceAccount")
        .await;
    assert_eq!(condition.status, "False");
    assert!(
        condition.message.contains(&format!("{NS}/ralph-agent"))
            && condition.message.contains("config/rbac/agent.yaml"),
        "{}",
        condition.message
    );
    h.wait_for_task_condition("accountless-a", "Configured", "MissingServiceAccount")
        .await;
    assert_eq!(h.events_with_reason("MissingServiceAccount").await.len(), 1);
    assert!(
        h.leases()
            .get_opt("accountless-a")
            .await
            .expect("get")
            .is_none()
    );
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn the_feature_runs_once_its_missing_service_account_is_created() {
    let h = harness_without_agent_service_account().await;
    h.create("late-account", harness::one_task(), serde_json::json!({}))
        .await;
    h.wait_for_feature_condition("late-account", "Configured", "MissingServiceAccount")
        .await;

    harness::create_agent_service_account(&h.client).await;
    // The Feature looks for its ServiceAccount again every 5 s.
    let pod = h.wait_for_pod("late-account-a-a1").await;
    h.finish_done(&pod).await;
    h.wait_for_feature_phase("late-account", "Complete").await;
    h.stop().await;
}

#[tokio::test]
async fn the_agent_pods_of_a_feature_whose_plan_turns_invalid_are_stopped() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "turning",
        serde_json::json!([{"name": "a"}, {"name": "b", "dependsOn": ["a"]}]),
        serde_json::json!({}),
    ))
    .await;
    h.wait_for_pod("turning-a-a1").await;
    h.set_running("turning-a-a1").await;

    let cycle = serde_json::json!({"spec": {"tasks": [
        {"name": "a", "dependsOn": ["b"]},
        {"name": "b", "dependsOn": ["a"]}
    ]}});
    h.features()
        .patch("turning", &PatchParams::default(), &Patch::Merge(&cycle))
        .await
        .expect("make the plan cyclic");
    h.wait_for_feature_phase("turning", "Invalid").await;
    h.wait_for_pod_gone("turning-a-a1").await;
    let lease = h.leases().get("turning-a").await.expect("lease");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "claim still held by {holder}");
    assert!(
        h.agent_pods()
            .await
            .iter()
            .all(|p| p.name_any() != "turning-b-a1")
    );
    h.stop().await;
}
