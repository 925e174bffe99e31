//! The controller through API server outages, against the fake API server: with leader
//! election it stops leading while it cannot renew, campaigns again and works again after
//! the outage; it never exits. Watches reconnect after the server cuts them. Also how its
//! client names itself.
//!
//! The outage is compressed: election timings are scaled down with it (lease 3 s, renew
//! deadline 2 s, retry 0.5 s against an outage of 5 s), so the controller goes through the
//! same states as with the defaults (15 s, 10 s, 2 s) and a 60 s outage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use std::time::Duration;

use fake_apiserver::{FakeApiServer, rbac};
use harness::{NS, PATIENCE, feature_manifest, poll_until, runner_arg};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ralph::api::Feature;
use ralph::controller::runtime::leader::ElectionConfig;
use ralph::controller::{ControllerConfig, LeaderElection, NativeSidecars};
use tokio_util::sync::CancellationToken;

/// Longer than the scaled lease duration: leadership is lost during it.
const OUTAGE: Duration = Duration::from_secs(5);

fn election() -> ElectionConfig {
    ElectionConfig {
        lease: "ralph-controller-leader".to_owned(),
        identity: "replica-a".to_owned(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    }
}

struct Running {
    server: FakeApiServer,
    client: Client,
    stop: CancellationToken,
    controller: tokio::task::JoinHandle<Result<(), ralph::controller::RunError>>,
}

async fn start(leader_election: Option<ElectionConfig>) -> Running {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    harness::create_agent_service_account(&client).await;
    server.enforce_rbac(rbac::CONTROLLER_USER, rbac::controller_rules());
    let controller_client = server.client_as(NS, rbac::CONTROLLER_USER);
    let config = ControllerConfig {
        namespace: Some(NS.to_owned()),
        ralph_image: "ralph:test".to_owned(),
        agent_service_account: "ralph-agent".to_owned(),
        native_sidecars: NativeSidecars::Always,
        max_concurrent_attempts: 100,
        api_timeout: Duration::from_secs(2),
        queue_wait: Duration::ZERO,
        leader_election: leader_election.map(|election| LeaderElection {
            namespace: NS.to_owned(),
            election,
            client: controller_client.clone(),
        }),
        metrics_addr: None,
        instance: "replica-a".to_owned(),
        finished_pod_ttl: Duration::from_secs(3600),
        gateway_prices: Default::default(),
    };
    let stop = CancellationToken::new();
    let token = stop.clone();
    let controller = tokio::spawn(async move {
        ralph::controller::run(
            controller_client,
            config,
            async move { token.cancelled().await },
        )
        .await
    });
    Running {
        server,
        client,
        stop,
        controller,
    }
}

impl Running {
    async fn eventually<T, Fut>(&self, what: &str, check: impl FnMut() -> Fut) -> T
    where
        Fut: Future<Output = Option<T>>,
    {
        poll_until(what, check, || {
            assert!(
                !self.controller.is_finished(),
                "the controller exited while waiting for {what}"
            );
        })
        .await
    }

    async fn pod(&self, name: &str) -> Pod {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        self.eventually(&format!("Pod {name}"), || async {
            pods.get_opt(name).await.ok().flatten()
        })
        .await
    }

    /// Kubelet stand-in: the runner reported its task done.
    async fn finish_done(&self, pod: &Pod) {
        let name = pod.name_any();
        let task = runner_arg(pod, "--task").expect("runner --task");
        let result = serde_json::json!({
            "version": 1, "task": task, "attempt": name, "outcome": "finished",
            "stopReason": "end_turn", "exitCode": 0, "sigils": {"taskDone": task}
        });
        let status = serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "agent", "image": "agent:test", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "message": result.to_string()}}
        }]}});
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("patch Pod status");
    }

    async fn wait_for_complete(&self, name: &str) {
        let features: Api<Feature> = Api::namespaced(self.client.clone(), NS);
        self.eventually(&format!("Feature {name} to be Complete"), || async {
            let feature = features.get(name).await.ok()?;
            let phase = serde_json::to_value(feature.status?.phase).ok()?;
            (phase == "Complete").then_some(())
        })
        .await;
    }

    async fn create_chain(&self, name: &str) {
        let features: Api<Feature> = Api::namespaced(self.client.clone(), NS);
        let manifest = feature_manifest(
            name,
            serde_json::json!([
                {"name": "first"},
                {"name": "second", "dependsOn": ["first"]}
            ]),
            serde_json::json!({}),
        );
        let feature: Feature = serde_json::from_value(manifest).expect("feature manifest");
        features
            .create(&PostParams::default(), &feature)
            .await
            .expect("create Feature");
    }

    /// Finishes the chain `name` ([`Running::create_chain`]) from the attempt `first` of its
    /// first task: that one, then the second task's, and waits for the Feature to complete.
    async fn finish_chain(&self, name: &str, first: &Pod) {
        self.finish_done(first).await;
        let second = self.pod(&format!("{name}-second-a1")).await;
        self.finish_done(&second).await;
        self.wait_for_complete(name).await;
    }

    async fn stop(self) -> Result<(), ralph::controller::RunError> {
        self.stop.cancel();
        tokio::time::timeout(PATIENCE, self.controller)
            .await
            .expect("the controller stops when asked")
            .expect("the controller task does not panic")
    }
}

#[tokio::test]
async fn leader_survives_an_outage_longer_than_its_lease_and_works_again_after() {
    let running = start(Some(election())).await;
    running.create_chain("outage").await;
    let first = running.pod("outage-first-a1").await;

    running.server.start_outage();
    tokio::time::sleep(OUTAGE).await;
    running.server.end_outage();

    assert!(
        !running.controller.is_finished(),
        "the controller keeps running through the outage"
    );
    running.finish_chain("outage", &first).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn controller_reconnects_its_watches_after_the_server_cuts_them() {
    let running = start(None).await;
    running.create_chain("cut").await;
    let first = running.pod("cut-first-a1").await;

    running.server.disconnect_watches();

    running.finish_chain("cut", &first).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn the_controller_client_names_itself_in_the_user_agent() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = ralph::controller::client::build(server.config(NS), None).expect("client");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client, NS);
    leases.get_opt("any").await.expect("get");
    let agents: Vec<Option<String>> = server
        .requests()
        .into_iter()
        .map(|r| r.user_agent)
        .collect();
    assert_eq!(
        agents,
        [Some(format!(
            "ralph-operator/{}",
            env!("CARGO_PKG_VERSION")
        ))]
    );
}

#[tokio::test]
async fn calls_queued_in_the_rate_limit_longer_than_the_api_timeout_still_succeed() {
    use ralph::controller::client::ThrottleLayer;
    use ralph::controller::client::call::bounded;
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let api_timeout = Duration::from_millis(500);
    let throttle = ThrottleLayer::new(10.0, 1, api_timeout).expect("a positive rate");
    let call_limit = api_timeout + throttle.longest_queue_wait();
    let client = ralph::controller::client::build(server.config(NS), Some(throttle)).unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client, NS);
    let started = std::time::Instant::now();
    // At 10 per second the last of 15 waits about 1.4 s for its token.
    let calls = (0..15).map(|n| {
        let leases = leases.clone();
        async move { bounded(call_limit, format!("get Lease {n}"), leases.get_opt("any")).await }
    });
    for answered in futures::future::join_all(calls).await {
        answered.expect("answered once sent");
    }
    assert!(started.elapsed() > api_timeout * 2);
}

#[tokio::test]
async fn a_sent_request_without_an_answer_times_out_after_the_api_timeout() {
    use ralph::controller::client::ThrottleLayer;
    use ralph::controller::client::call::{CallError, bounded};
    let server = FakeApiServer::start().await.expect("fake API server");
    let api_timeout = Duration::from_millis(300);
    let throttle = ThrottleLayer::new(10.0, 1, api_timeout).expect("a positive rate");
    let call_limit = api_timeout + throttle.longest_queue_wait();
    let client = ralph::controller::client::build(server.config(NS), Some(throttle)).unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client, NS);
    server.add_latency(|_| true, Duration::from_secs(60));
    let error = bounded(call_limit, "get Lease any", leases.get_opt("any"))
        .await
        .expect_err("no answer");
    assert!(
        matches!(error, CallError::Timeout { timeout, .. } if timeout == api_timeout),
        "{error}"
    );
}
