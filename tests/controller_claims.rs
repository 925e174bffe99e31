//! Claim Leases across attempts, against the fake API server. An attempt's conclusion spends
//! its claim: the Lease is not released but left to expire; the task's next attempt (a
//! retry, or a run after the task is set back to Pending) takes it over at once (one write;
//! the fencing token counts the attempts); a spent claim holds no attempt slot; the
//! Leases go with their Tasks; and a claim whose Pod exists but whose start was never
//! recorded is adopted, not made again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use fake_apiserver::{RequestRecord, Verb};
use harness::{Harness, feature_manifest};
use kube::api::ListParams;
use ralph::controller::act::claim;
use ralph::controller::plan::run_view;
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
    assert_eq!(run_view::holder(&lease), Some("fenced-a-a2"));
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
    assert_eq!(run_view::holder(&lease), Some("again-a-a2"));
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
    assert_eq!(run_view::holder(&lease), Some("one-slot-a-a1"));
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
    assert_eq!(run_view::holder(&lease), Some("redo-a-a2"));
    assert_eq!(claim::lease_transitions(&lease), 1);
    h.stop().await;
}

fn is_task_status_write(record: &RequestRecord) -> bool {
    record.resource == "tasks"
        && record.subresource.as_deref() == Some("status")
        && record.verb.is_write()
}

#[tokio::test]
async fn a_controller_restarted_between_the_pod_and_the_running_write_adopts_the_pod() {
    // Every Task status write fails until after the restart: the claim and the Pod exist,
    // the Task does not record the attempt.
    let mut h = Harness::start_after(|server| {
        server.fail_next(
            usize::MAX,
            is_task_status_write,
            fake_apiserver::ApiError::new(500, "InternalError", "etcd is away"),
        );
    })
    .await;
    h.create_feature(feature_manifest(
        "adopt",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    let pod = h.wait_for_pod("adopt-a-a1").await;
    h.eventually("the Running write to be refused", || async {
        let refused = h
            .server
            .count_requests(|r| is_task_status_write(r) && r.status == 500);
        (refused > 0).then_some(())
    })
    .await;
    h.restart_controller().await;
    h.server.clear_faults();

    let status = h
        .eventually("the attempt to be recorded Running", || async {
            let status = h.tasks().get("adopt-a").await.ok()?.status?;
            (status.phase == TaskPhase::Running).then_some(status)
        })
        .await;
    assert_eq!(status.attempt_count, 1);
    let adopted = h.pods().get("adopt-a-a1").await.expect("the attempt's Pod");
    assert_eq!(
        adopted.metadata.uid, pod.metadata.uid,
        "the same Pod, not a new one"
    );
    let lease = h.leases().get("adopt-a").await.expect("claim Lease");
    assert_eq!(run_view::holder(&lease), Some("adopt-a-a1"));
    assert_eq!(
        claim::lease_transitions(&lease),
        0,
        "the claim was not made again"
    );

    h.finish_done(&adopted).await;
    h.wait_for_feature_phase("adopt", "Complete").await;
    assert_eq!(h.task_status("adopt-a").await.attempt_count, 1);
    assert!(!h.has_pod("adopt-a-a2").await);
    h.stop().await;
}
