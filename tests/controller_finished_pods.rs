//! Finished agent Pods leave the controller's cache once their Task records the attempt
//! (the retention sweep remembers when they finished): a Pod whose result is not recorded
//! yet stays cached with it, also when the controller restarts meanwhile, and the sweep
//! keeps and deletes finished Pods as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use std::time::Duration;

use fake_apiserver::{ApiError, RequestRecord};
use harness::{Harness, one_task, runner_arg};
use ralph::api::TaskStatus;
use ralph::controller::cache::retention::RETIRE_PERIOD;
use ralph::engine::dag::TaskPhase;
use ralph::engine::policy::AttemptOutcome;
use serde_json::json;

fn is_task_status_write(record: &RequestRecord) -> bool {
    record.resource == "tasks"
        && record.subresource.as_deref() == Some("status")
        && record.verb.is_write()
}

/// Refuses every Task status write: nothing the controller reads from a Pod can be recorded.
fn refuse_task_status_writes(h: &Harness) {
    h.server.fail_next(
        usize::MAX,
        is_task_status_write,
        ApiError::new(500, "InternalError", "etcd is away"),
    );
}

/// Waits until the controller tried to record something and was refused, then for several
/// retiring passes of the retention sweep.
async fn wait_for_a_refused_write_and_sweeps(h: &Harness) {
    h.eventually("a Task status write to be refused", || async {
        let refused = h
            .server
            .count_requests(|r| is_task_status_write(r) && r.status == 500);
        (refused > 0).then_some(())
    })
    .await;
    tokio::time::sleep(RETIRE_PERIOD * 3).await;
}

/// The runner's result: task done, a journal note, and usage.
async fn finish_with_journal(h: &Harness, pod: &k8s_openapi::api::core::v1::Pod) {
    let task = runner_arg(pod, "--task").expect("runner --task");
    h.finish_with_result(
        pod,
        json!({
            "sigils": {"taskDone": task, "journal": ["parser rewritten"]},
            "usage": {"inputTokens": 4321, "outputTokens": 123},
        }),
    )
    .await;
}

async fn wait_until_running(h: &Harness, task: &str) {
    h.eventually("the attempt to be recorded Running", || async {
        let status = h.tasks().get(task).await.ok()?.status?;
        (status.phase == TaskPhase::Running).then_some(())
    })
    .await;
}

async fn recorded_done(h: &Harness, task: &str) -> TaskStatus {
    h.eventually("the attempt to be recorded Done", || async {
        let status = h.tasks().get(task).await.ok()?.status?;
        (status.phase == TaskPhase::Done).then_some(status)
    })
    .await
}

fn assert_result_ingested(status: &TaskStatus) {
    let record = &status.attempts[0];
    assert_eq!(record.outcome, Some(AttemptOutcome::Done));
    assert_eq!(record.usage.tokens.input, 4321);
    assert_eq!(record.sigils.journal, vec!["parser rewritten".to_owned()]);
}

#[tokio::test]
async fn a_result_the_task_has_not_recorded_yet_stays_cached_until_it_is() {
    let h = Harness::with_feature("late", one_task(), json!({})).await;
    let pod = h.wait_for_pod("late-a-a1").await;
    wait_until_running(&h, "late-a").await;
    refuse_task_status_writes(&h);
    finish_with_journal(&h, &pod).await;
    wait_for_a_refused_write_and_sweeps(&h).await;
    h.server.clear_faults();

    assert_result_ingested(&recorded_done(&h, "late-a").await);
    h.stop().await;
}

#[tokio::test]
async fn a_result_not_recorded_before_a_restart_is_ingested_after_it() {
    let mut h = Harness::with_feature("away", one_task(), json!({})).await;
    let pod = h.wait_for_pod("away-a-a1").await;
    wait_until_running(&h, "away-a").await;
    refuse_task_status_writes(&h);
    finish_with_journal(&h, &pod).await;
    wait_for_a_refused_write_and_sweeps(&h).await;
    h.restart_controller().await;
    tokio::time::sleep(RETIRE_PERIOD * 3).await;
    h.server.clear_faults();

    assert_result_ingested(&recorded_done(&h, "away-a").await);
    h.stop().await;
}

#[tokio::test]
async fn the_finished_pod_of_a_recorded_attempt_stays_for_its_retention() {
    let mut h = Harness::with_feature("kept", one_task(), json!({})).await;
    let pod = h.wait_for_pod("kept-a-a1").await;
    finish_with_journal(&h, &pod).await;
    recorded_done(&h, "kept-a").await;
    tokio::time::sleep(RETIRE_PERIOD * 3).await;
    h.restart_controller().await;
    tokio::time::sleep(RETIRE_PERIOD * 3).await;

    assert!(h.has_pod("kept-a-a1").await, "kept for `kubectl logs`");
    let status = h.task_status("kept-a").await;
    assert_eq!(
        status.attempt_count, 1,
        "the retired Pod started no new attempt"
    );
    assert_result_ingested(&status);
    h.stop().await;
}

#[tokio::test]
async fn the_finished_pod_of_a_recorded_attempt_is_deleted_after_its_retention() {
    let h = Harness::start_with_pod_ttl(Duration::from_secs(4)).await;
    h.create("gone", one_task(), json!({})).await;
    let pod = h.wait_for_pod("gone-a-a1").await;
    finish_with_journal(&h, &pod).await;
    recorded_done(&h, "gone-a").await;

    h.wait_for_pod_gone("gone-a-a1").await;
    assert_result_ingested(&h.task_status("gone-a").await);
    h.stop().await;
}

#[tokio::test]
async fn a_finished_pod_whose_result_is_not_recorded_outlives_its_retention() {
    let h = Harness::start_with_pod_ttl(Duration::from_secs(1)).await;
    h.create("held", one_task(), json!({})).await;
    let pod = h.wait_for_pod("held-a-a1").await;
    wait_until_running(&h, "held-a").await;
    refuse_task_status_writes(&h);
    finish_with_journal(&h, &pod).await;
    wait_for_a_refused_write_and_sweeps(&h).await;

    assert!(h.has_pod("held-a-a1").await, "its result is still awaited");
    h.server.clear_faults();
    assert_result_ingested(&recorded_done(&h, "held-a").await);
    h.stop().await;
}
