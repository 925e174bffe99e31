//! `ralph sidecar`'s loop against the fake API server: it renews the claim while the
//! heartbeat is fresh, stops when another attempt holds the Lease, and stops renewing a
//! stale heartbeat. Also the Lease claim operations (create, double claim, take over, release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ralph::controller::claim::{self, ClaimError, ClaimRequest, Leases};
use ralph::controller::sidecar::{self, SidecarConfig, SidecarExit};

const NS: &str = "team";
const PATIENCE: Duration = Duration::from_secs(30);

fn request(holder: &str, duration_seconds: i32) -> ClaimRequest {
    ClaimRequest {
        lease: "feat-build".to_owned(),
        holder: holder.to_owned(),
        duration_seconds,
        owner: None,
        labels: Default::default(),
    }
}

async fn setup() -> (FakeApiServer, Api<Lease>, Leases) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let api: Api<Lease> = Api::namespaced(server.client_in(NS), NS);
    let leases = Leases::new(api.clone(), Duration::from_secs(5));
    (server, api, leases)
}

/// The second attempt's claim request, for `duration_seconds`.
fn second_attempt(duration_seconds: i32) -> ClaimRequest {
    request("feat-build-a2", duration_seconds)
}

/// The first attempt's claim, created now for `duration_seconds`.
async fn first_claim(leases: &Leases, duration_seconds: i32) -> Lease {
    first_claim_at(leases, duration_seconds, Timestamp::now()).await
}

/// The first attempt's claim, created at `now` for `duration_seconds`.
async fn first_claim_at(leases: &Leases, duration_seconds: i32, now: Timestamp) -> Lease {
    leases
        .create(&request("feat-build-a1", duration_seconds), now)
        .await
        .expect("first claim")
}

fn config(heartbeat: &std::path::Path, exit_when_stale: bool) -> SidecarConfig {
    SidecarConfig {
        namespace: NS.to_owned(),
        lease: "feat-build".to_owned(),
        holder: "feat-build-a1".to_owned(),
        heartbeat_file: heartbeat.to_owned(),
        heartbeat_max_age: Duration::from_secs(60),
        startup_grace: Duration::from_secs(60),
        api_timeout: Duration::from_secs(5),
        exit_when_stale,
    }
}

/// A heartbeat file written now, in a temporary directory (kept while it lives).
fn fresh_heartbeat() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let heartbeat = dir.path().join("heartbeat");
    std::fs::write(&heartbeat, b"").expect("heartbeat");
    (dir, heartbeat)
}

/// How the spawned sidecar `run` ended (it must end within [`PATIENCE`]).
async fn exit_of(
    run: tokio::task::JoinHandle<Result<SidecarExit, sidecar::SidecarError>>,
) -> SidecarExit {
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("sidecar stopped")
        .expect("sidecar task")
        .expect("sidecar ran")
}

fn renew_ms(lease: &Lease) -> i64 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map_or(0, |t| t.0.as_millisecond())
}

#[tokio::test]
async fn second_claim_on_a_held_lease_is_refused_naming_the_holder() {
    let (_server, _api, leases) = setup().await;
    first_claim(&leases, 60).await;
    let second = leases.create(&second_attempt(60), Timestamp::now()).await;
    match second {
        Err(ClaimError::Held { holder, .. }) => assert_eq!(holder, "feat-build-a1"),
        other => panic!("expected Held, got {other:?}"),
    }
}

#[tokio::test]
async fn expired_lease_is_taken_over_with_a_higher_fencing_token() {
    let (_server, _api, leases) = setup().await;
    let long_ago = Timestamp::from_second(1_000).expect("time");
    first_claim_at(&leases, 15, long_ago).await;
    let taken = leases
        .acquire(&second_attempt(15), Timestamp::now())
        .await
        .expect("take over");
    assert_eq!(claim::holder(&taken), Some("feat-build-a2"));
    assert_eq!(claim::lease_transitions(&taken), 1);
}

#[tokio::test]
async fn fresh_lease_of_another_holder_is_not_taken_over() {
    let (_server, _api, leases) = setup().await;
    first_claim(&leases, 60).await;
    let result = leases.acquire(&second_attempt(60), Timestamp::now()).await;
    assert!(matches!(result, Err(ClaimError::Held { .. })), "{result:?}");
}

#[tokio::test]
async fn release_of_a_lease_changed_since_it_was_read_is_a_conflict() {
    let (_server, _api, leases) = setup().await;
    let lease = first_claim(&leases, 60).await;
    leases
        .renew("feat-build", "feat-build-a1", Timestamp::now())
        .await
        .expect("renew");
    let result = leases.release(&lease).await;
    assert!(
        matches!(result, Err(ClaimError::Conflict { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn sidecar_renews_while_the_heartbeat_is_fresh_and_stops_when_fenced() {
    let (server, api, leases) = setup().await;
    let (_dir, heartbeat) = fresh_heartbeat();
    let created = first_claim(&leases, 3).await;
    let first_renewal = renew_ms(&created);
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        config(&heartbeat, false),
        std::future::pending(),
    ));

    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let lease = api.get("feat-build").await.expect("lease");
        if renew_ms(&lease) > first_renewal {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let takeover = serde_json::json!({"spec": {"holderIdentity": "feat-build-a2"}});
    api.patch(
        "feat-build",
        &PatchParams::default(),
        &Patch::Merge(&takeover),
    )
    .await
    .expect("another attempt takes the lease");
    let exit = exit_of(run).await;
    assert_eq!(
        exit,
        SidecarExit::Fenced {
            holder: "feat-build-a2".to_owned()
        }
    );
}

#[tokio::test]
async fn sidecar_with_stale_heartbeat_does_not_renew_and_exits_when_asked_to() {
    let (server, api, leases) = setup().await;
    let (_dir, heartbeat) = fresh_heartbeat();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&heartbeat)
        .and_then(|f| f.set_modified(old))
        .expect("age the heartbeat");
    let created = first_claim(&leases, 3).await;
    let exit = tokio::time::timeout(
        PATIENCE,
        sidecar::run(
            server.client_in(NS),
            config(&heartbeat, true),
            std::future::pending(),
        ),
    )
    .await
    .expect("sidecar stopped")
    .expect("sidecar ran");
    assert_eq!(exit, SidecarExit::Stale);
    let lease = api.get("feat-build").await.expect("lease");
    assert_eq!(renew_ms(&lease), renew_ms(&created));
}

#[tokio::test]
async fn sidecar_stops_when_the_claim_is_released() {
    let (server, _api, leases) = setup().await;
    let (_dir, heartbeat) = fresh_heartbeat();
    let lease = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        config(&heartbeat, false),
        std::future::pending(),
    ));
    // Release with a fresh read: the sidecar may have renewed in between.
    let current = leases
        .get("feat-build")
        .await
        .expect("get")
        .unwrap_or(lease);
    let _ = leases.release(&current).await;
    let current = leases.get("feat-build").await.expect("get");
    if let Some(current) = current {
        leases.release(&current).await.expect("release");
    }
    let exit = exit_of(run).await;
    assert_eq!(exit, SidecarExit::Released);
}

#[tokio::test]
async fn a_released_claim_is_taken_over_with_the_next_fencing_token() {
    let (_server, _api, leases) = setup().await;
    let first = first_claim(&leases, 60).await;
    leases.release(&first).await.expect("release");
    let free = leases
        .get("feat-build")
        .await
        .expect("get")
        .expect("a released Lease is kept");
    assert!(claim::is_expired(&free, Timestamp::now()), "free to claim");
    let second = leases
        .take_over(&free, &second_attempt(60), Timestamp::now())
        .await
        .expect("take over");
    assert_eq!(claim::holder(&second), Some("feat-build-a2"));
    assert_eq!(claim::lease_transitions(&second), 1);
}
