//! Claim Leases across attempts, against the fake API server: a retry takes the released
//! Lease over (the fencing token counts the attempts), and the token is recorded in the
//! Task's status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/controller_harness.rs"]
mod harness;

use harness::Harness;
use ralph::controller::claim;

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
