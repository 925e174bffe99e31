//! Claim Leases across attempts, against the fake API server. An attempt's conclusion spends
//! its claim: the Lease is not released but left to expire; the task's next attempt (a
//! retry, or a run after the task is set back to Pending) takes it over at once (one write;
//! the fencing token counts the attempts); a spent claim holds no attempt slot; and the
//! Leases go with their Tasks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/controller_harness.rs"]
mod harness;

use fake_apiserver::{RequestRecord, Verb};
use harness::{Harness, feature_manifest};
use kube::api::ListParams;
use ralph::controller::claim;
use ralph::engine::dag::TaskPhase;

/// Longer than the harness waits: whatever happens to a claim, expiry is not why.
fn long_leases() -> serde_json::Value {
    serde_json::json!({"leaseDurationSeconds": 3600})
}

fn lease_write(record: &RequestRecord) -> Option<Verb> {
    (record.resource == "leases" && record.verb.is_write() && record.status < 400)
        .then_some(record.verb)
}

#[tokio::test]
async fn a_retry_takes_the_claim_over_with_the_next_fencing_token() {
    let h = Harness::start().await;
    h.start_one_task_feature("fenced").await;
    h.terminate_agent("fenced-a-a1", 137, "OOMKilled", None)
        .await;
    h.wait_for_pod("fenced-a-a2").await;

    let lease = h.leases().get("fenced-a").await.expect("claim Lease");
    assert_eq!(claim::holder(&lease), Some("fenced-a-a2"));
    assert_eq!(claim::lease_transitions(&lease), 1);
    let recorded = h
        .eventually("the second attempt to be recorded", || async {
            let task = h.tasks().get("fenced-a").await.ok()?;
            let claim = task.status?.claim?;
            (claim.attempt == 2).then_some(claim.fencing_token)
        })
        .await;
    assert_eq!(recorded, 1);
    h.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_failed_attempt_takes_the_unexpired_claim_over_in_one_write() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "again",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    let first = h.wait_for_pod("again-a-a1").await;
    h.finish_attempt(&first, serde_json::json!({"taskFailed": "a"}))
        .await;
    h.wait_for_pod("again-a-a2").await;

    let lease = h.leases().get("again-a").await.expect("claim Lease");
    assert_eq!(claim::holder(&lease), Some("again-a-a2"));
    assert_eq!(claim::lease_transitions(&lease), 1);
    let writes: Vec<Verb> = h.server.requests().iter().filter_map(lease_write).collect();
    assert_eq!(
        writes,
        [Verb::Create, Verb::Update],
        "the first claim, then the take-over (no release between)"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_finished_tasks_unexpired_claim_holds_no_attempt_slot() {
    let h = Harness::start_with(1).await;
    let mut spec = long_leases();
    spec["parallelism"] = 2.into();
    h.create_feature(feature_manifest(
        "one-slot",
        serde_json::json!([{"name": "a"}, {"name": "b"}]),
        spec,
    ))
    .await;
    let first = h.wait_for_pod("one-slot-a-a1").await;
    assert!(
        h.pods()
            .get_opt("one-slot-b-a1")
            .await
            .expect("get")
            .is_none()
    );
    h.finish_done(&first).await;

    h.wait_for_pod("one-slot-b-a1").await;
    let lease = h.leases().get("one-slot-a").await.expect("claim Lease");
    assert_eq!(claim::holder(&lease), Some("one-slot-a-a1"));
    h.stop().await;
}

#[tokio::test]
async fn a_deleted_feature_leaves_no_claim_lease_behind() {
    let h = Harness::start().await;
    let pod = h.start_one_task_feature("gone").await;
    h.finish_done(&pod).await;
    h.wait_for_feature_phase("gone", "Complete").await;
    let task = h.tasks().get("gone-a").await.expect("task");
    assert_eq!(task.status.map(|s| s.phase), Some(TaskPhase::Done));
    let lease = h.leases().get("gone-a").await.expect("the spent claim");
    let owners = lease.metadata.owner_references.unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "Task" && o.name == "gone-a"),
        "{owners:?}"
    );

    h.features()
        .delete("gone", &Default::default())
        .await
        .expect("delete the Feature");
    h.eventually("the Task and its claim Lease to be collected", || async {
        let tasks = h.tasks().list(&ListParams::default()).await.ok()?;
        let leases = h.leases().list(&ListParams::default()).await.ok()?;
        (tasks.items.is_empty() && leases.items.is_empty()).then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_done_task_set_back_to_pending_takes_its_spent_claim_over_at_once() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "redo",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    let first = h.wait_for_pod("redo-a-a1").await;
    h.finish_done(&first).await;
    h.wait_for_feature_phase("redo", "Complete").await;

    let reset = serde_json::json!({"status": {"phase": "Pending"}});
    h.tasks()
        .patch_status(
            "redo-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&reset),
        )
        .await
        .expect("set the task back to Pending");
    h.wait_for_pod("redo-a-a2").await;

    let lease = h.leases().get("redo-a").await.expect("claim Lease");
    assert_eq!(claim::holder(&lease), Some("redo-a-a2"));
    assert_eq!(claim::lease_transitions(&lease), 1);
    h.stop().await;
}
