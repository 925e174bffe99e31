//! Spent claim Leases leave the controller's cache once their Task records the attempt
//! (`controller::lease_cache`), against the fake API server: the task's next claim creates,
//! is refused (409), reads the Lease once and takes it over, the fencing token still rising;
//! two claimers racing for such a Lease never both win; a live claim is never retired; and
//! a restarted controller's re-list leaves spent claims out too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use std::time::Duration;

use fake_apiserver::{FakeApiServer, RequestRecord, Verb};
use harness::{Harness, NS, feature_manifest};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ralph::controller::act::claim::{self, ClaimError, ClaimRequest, Leases};
use ralph::controller::cache::retention::RETIRE_PERIOD;
use ralph::controller::plan::run_view;
use ralph::engine::dag::TaskPhase;

/// Longer than the harness waits: whatever happens to a claim, expiry is not why.
fn long_leases() -> serde_json::Value {
    serde_json::json!({"leaseDurationSeconds": 3600})
}

/// Requests to the claim Lease `name` with `verb` answered with `status`.
fn lease_requests(h: &Harness, name: &str, verb: Verb, status: u16) -> usize {
    h.server.count_requests(|r: &RequestRecord| {
        r.resource == "leases"
            && r.verb == verb
            && r.status == status
            && (r.name.as_deref() == Some(name) || verb == Verb::Create)
    })
}

/// Waits for several retiring passes of the Lease cache's sweep.
async fn wait_for_sweeps() {
    tokio::time::sleep(RETIRE_PERIOD * 3).await;
}

/// Sets the Done task `name` back to Pending (a user's re-run).
async fn set_back_to_pending(h: &Harness, name: &str) {
    let reset = serde_json::json!({"status": {"phase": "Pending"}});
    h.tasks()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&reset))
        .await
        .expect("set the task back to Pending");
}

/// The fencing token the Task records for its attempt `attempt`.
async fn recorded_fencing_token(h: &Harness, task: &str, attempt: u32) -> i32 {
    h.eventually("the attempt to be recorded started", || async {
        let claim = h.tasks().get(task).await.ok()?.status?.claim?;
        (claim.attempt == attempt).then_some(claim.fencing_token)
    })
    .await
}

/// Runs the one-task Feature `name`'s current attempt `attempt` to Done.
async fn finish_attempt_done(h: &Harness, feature: &str, attempt: u32) {
    let pod = h.wait_for_pod(&format!("{feature}-a-a{attempt}")).await;
    h.finish_done(&pod).await;
    h.eventually("the task to be recorded Done", || async {
        let status = h.tasks().get(&format!("{feature}-a")).await.ok()?.status?;
        (status.phase == TaskPhase::Done && status.attempt_count == attempt).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_rerun_takes_over_a_retired_claim_after_one_read_and_the_fence_rises_each_time() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "rerun",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    for attempt in 1..=2 {
        finish_attempt_done(&h, "rerun", attempt).await;
        wait_for_sweeps().await;
        set_back_to_pending(&h, "rerun-a").await;
        h.wait_for_pod(&format!("rerun-a-a{}", attempt + 1)).await;
        assert_eq!(
            lease_requests(&h, "rerun-a", Verb::Create, 409),
            attempt as usize,
            "the claim was not cached: the create was refused"
        );
        assert_eq!(
            recorded_fencing_token(&h, "rerun-a", attempt + 1).await,
            i32::try_from(attempt).expect("attempt")
        );
    }

    assert_eq!(
        lease_requests(&h, "rerun-a", Verb::Get, 200),
        2,
        "one read each"
    );
    assert_eq!(lease_requests(&h, "rerun-a", Verb::Update, 200), 2);
    let lease = h.leases().get("rerun-a").await.expect("claim Lease");
    assert_eq!(run_view::holder(&lease), Some("rerun-a-a3"));
    assert_eq!(claim::lease_transitions(&lease), 2);
    h.stop().await;
}

#[tokio::test]
async fn a_live_claim_is_never_retired() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "live",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    let pod = h.wait_for_pod("live-a-a1").await;
    h.set_running("live-a-a1").await;
    h.eventually("the attempt to be recorded Running", || async {
        let status = h.tasks().get("live-a").await.ok()?.status?;
        (status.phase == TaskPhase::Running).then_some(())
    })
    .await;
    wait_for_sweeps().await;
    h.finish_done(&pod).await;
    h.wait_for_feature_phase("live", "Complete").await;

    let status = h.task_status("live-a").await;
    assert_eq!(status.attempt_count, 1);
    assert_eq!(
        status.attempts[0].outcome,
        Some(ralph::engine::policy::AttemptOutcome::Done)
    );
    assert_eq!(
        lease_requests(&h, "live-a", Verb::Get, 200),
        0,
        "the claim was never missing from the cache (no live read to rule it lost)"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_controller_leaves_spent_claims_out_of_its_cache() {
    let mut h = Harness::start().await;
    h.create_feature(feature_manifest(
        "again",
        serde_json::json!([{"name": "a"}]),
        long_leases(),
    ))
    .await;
    finish_attempt_done(&h, "again", 1).await;
    h.restart_controller().await;
    h.wait_for_feature_phase("again", "Complete").await;
    wait_for_sweeps().await;
    let refused_before = lease_requests(&h, "again-a", Verb::Create, 409);

    set_back_to_pending(&h, "again-a").await;
    h.wait_for_pod("again-a-a2").await;
    assert_eq!(
        lease_requests(&h, "again-a", Verb::Create, 409),
        refused_before + 1,
        "the re-listed cache did not hold the spent claim"
    );
    assert_eq!(recorded_fencing_token(&h, "again-a", 2).await, 1);
    h.stop().await;
}

// --- Two claimers, one retired Lease --------------------------------------------------

fn request(holder: &str) -> ClaimRequest {
    ClaimRequest {
        lease: "feat-build".to_owned(),
        holder: holder.to_owned(),
        duration_seconds: 3600,
        owner: None,
        labels: Default::default(),
    }
}

/// A fake API server holding the spent claim `feat-build` of attempt 1 (fresh: not expired).
async fn spent_claim() -> (FakeApiServer, Leases) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let api: Api<Lease> = Api::namespaced(server.client_in(NS), NS);
    let leases = Leases::new(api, Duration::from_secs(5));
    leases
        .create(&request("feat-build-a1"), Timestamp::now())
        .await
        .expect("first claim");
    (server, leases)
}

/// Attempt 1's claim is spent: it may be taken over.
fn spent_by_attempt_1(live: &Lease) -> bool {
    run_view::holder(live) == Some("feat-build-a1")
}

#[tokio::test]
async fn two_claimers_racing_for_a_retired_claim_never_both_win() {
    let (_server, leases) = spent_claim().await;
    let now = Timestamp::now();
    let wanted = request("feat-build-a2");
    let (first, second) = tokio::join!(
        leases.create_or_take_over(&wanted, now, spent_by_attempt_1),
        leases.create_or_take_over(&wanted, now, spent_by_attempt_1),
    );

    let won = [&first, &second].iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{first:?} {second:?}");
    let lost = if first.is_ok() { second } else { first };
    assert!(
        matches!(
            lost,
            Err(ClaimError::Conflict { .. } | ClaimError::Held { .. })
        ),
        "{lost:?}"
    );
    let lease = leases.get("feat-build").await.expect("get").expect("Lease");
    assert_eq!(run_view::holder(&lease), Some("feat-build-a2"));
    assert_eq!(claim::lease_transitions(&lease), 1, "taken over once");
}

#[tokio::test]
async fn a_claim_not_cached_but_held_live_is_refused_with_the_live_lease() {
    let (server, leases) = spent_claim().await;
    let result = leases
        .create_or_take_over(&request("feat-build-a2"), Timestamp::now(), |_| false)
        .await;
    match result {
        Err(ClaimError::Held { holder, live, .. }) => {
            assert_eq!(holder, "feat-build-a1");
            assert_eq!(run_view::holder(&live), Some("feat-build-a1"));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let writes = server.count_requests(|r| r.resource == "leases" && r.verb == Verb::Update);
    assert_eq!(writes, 0, "no take-over of a held claim");
}

/// The spent claim of [`spent_claim`] as a cache last saw it, deleted since (with the
/// server, which must outlive the test).
async fn claim_deleted_behind_the_cache() -> (FakeApiServer, Leases, Lease) {
    let (server, leases) = spent_claim().await;
    let cached = leases.get("feat-build").await.expect("get").expect("Lease");
    let api: Api<Lease> = Api::namespaced(server.client_in(NS), NS);
    api.delete("feat-build", &Default::default())
        .await
        .expect("delete the Lease");
    (server, leases, cached)
}

#[tokio::test]
async fn taking_over_a_claim_deleted_behind_the_cache_claims_it_anew() {
    let (_server, leases, cached) = claim_deleted_behind_the_cache().await;

    let taken = leases
        .take_over(&cached, &request("feat-build-a2"), Timestamp::now())
        .await
        .expect("a PUT of a missing Lease creates it, as on a real API server");

    assert_eq!(run_view::holder(&taken), Some("feat-build-a2"));
    assert_ne!(taken.metadata.uid, cached.metadata.uid, "a new Lease");
    assert_eq!(claim::lease_transitions(&taken), 1, "the fence still rises");
}

#[tokio::test]
async fn releasing_a_claim_deleted_behind_the_cache_recreates_nothing() {
    let (_server, leases, cached) = claim_deleted_behind_the_cache().await;

    let released = leases.release(&cached).await;

    assert!(
        matches!(released, Err(ClaimError::Conflict { .. })),
        "{released:?}"
    );
    assert!(leases.get("feat-build").await.expect("get").is_none());
}
