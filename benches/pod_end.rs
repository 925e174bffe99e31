//! How agent Pods end on the kubelet stand-in, in both sidecar modes, printed, not asserted:
//! the time from the agent container's end to the Pod's terminal phase, and the Lease writes
//! per attempt (the controller's claims and the claim-keeper's renewals, told apart by the
//! user each acts as). A `ralph controller` process, the fake API server and the stand-in
//! running each agent Pod's runner (the scripted agent, 7 s of work) and its `ralph sidecar`.
//!
//! `cargo bench --profile dev --bench pod_end` (or release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/controller_harness.rs"]
mod controller_harness;
#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/controller_process.rs"]
mod controller_process;
#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/kubelet_standin.rs"]
mod kubelet_standin;

use std::time::{Duration, Instant};

use controller_harness::{NS, create_agent_service_account};
use controller_process::ControllerProcess;
use fake_apiserver::FakeApiServer;
use kube::Api;
use kube::api::PostParams;
use kubelet_standin::{KubeletStandIn, NodeOptions};
use ralph::api::{Feature, FeaturePhase};

/// Tasks per mode (parallelism 3).
const TASKS: usize = 6;
/// The user the claim-keepers act as.
const AGENT_USER: &str = "system:serviceaccount:team:ralph-agent";

fn script() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/support/pod_end.script.yaml"
    )
    .to_owned()
}

fn feature(name: &str) -> Feature {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| serde_json::json!({"name": format!("t{i}"), "description": "Work."}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": 3,
            "leaseDurationSeconds": 15,
            "agent": {
                "image": "ralph:bench",
                "command": ["/ralph/bin/ralph", "agent", "script", script()],
            },
            "tasks": tasks,
        },
    }))
    .expect("Feature")
}

fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    format!(
        "min {:.0}, median {:.0}, max {:.0}",
        at(0.0),
        at(0.5),
        at(1.0)
    )
}

async fn measure(mode: &str) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sidecar_kubeconfig = dir.path().join("agent-kubeconfig");
    std::fs::write(
        &sidecar_kubeconfig,
        server.kubeconfig_yaml_as(NS, AGENT_USER),
    )
    .expect("kubeconfig");
    let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
        .namespace(NS)
        .sidecar_kubeconfig(&sidecar_kubeconfig)
        .host_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/support"));
    let kubelet = KubeletStandIn::node(client.clone(), options).expect("stand-in");
    let args: Vec<String> = ["--native-sidecars", mode].map(str::to_owned).to_vec();
    let controller = ControllerProcess::start(&server, NS, &args, &[]);
    let name = format!("end-{mode}");
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    features
        .create(&PostParams::default(), &feature(&name))
        .await
        .expect("create");
    let deadline = Instant::now() + Duration::from_secs(300);
    let pods: Vec<String> = (0..TASKS).map(|i| format!("{name}-t{i}-a1")).collect();
    let ended = loop {
        let complete = features
            .get(&name)
            .await
            .ok()
            .and_then(|f| f.status)
            .is_some_and(|s| s.phase == FeaturePhase::Complete);
        let ended: Vec<Duration> = pods
            .iter()
            .filter_map(|pod| {
                let run = kubelet.run_info(NS, pod)?;
                Some(run.terminal_at?.duration_since(run.agent_ended_at?))
            })
            .collect();
        if complete && ended.len() == TASKS {
            break ended;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: not every Pod ended ({} of {TASKS})",
            ended.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lease_writes = |by_agent: bool| {
        server.count_requests(|r| {
            r.resource == "leases"
                && r.verb.is_write()
                && (r.user.as_deref() == Some(AGENT_USER)) == by_agent
        }) as f64
            / TASKS as f64
    };
    let label = if mode == "true" { "native" } else { "plain" };
    println!(
        "{label:>6} sidecar: agent end -> Pod terminal (ms): {}; Lease writes per attempt: \
         controller {:.2}, claim-keeper {:.2}",
        spread(ended.iter().map(|d| d.as_secs_f64() * 1000.0).collect()),
        lease_writes(false),
        lease_writes(true),
    );
    controller.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for mode in ["false", "true"] {
            measure(mode).await;
        }
    });
}
