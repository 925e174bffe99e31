//! Controller figures against the in-process fake API server (printed, not asserted):
//! tasks claimed and started per second, API writes per completed task, and the
//! controller's memory with 10,000 Tasks cached.
//!
//! `cargo bench --bench controller`

#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, RequestRecord};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ralph::api::Feature;
use ralph::controller::{ControllerConfig, NativeSidecars};
use tokio_util::sync::CancellationToken;

const NS: &str = "bench";

fn feature(name: &str, tasks: usize, parallelism: usize, suspend: bool) -> Feature {
    let tasks: Vec<_> = (0..tasks)
        .map(|i| serde_json::json!({"name": format!("t{i}")}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "agent": {"image": "agent:bench", "command": ["agent"]},
            "parallelism": parallelism,
            "suspend": suspend,
            "tasks": tasks
        }
    }))
    .unwrap_or_else(|error| panic!("bench feature: {error}"))
}

fn start_controller(client: Client, max_concurrent_attempts: usize) -> CancellationToken {
    let stop = CancellationToken::new();
    let token = stop.clone();
    let config = ControllerConfig {
        namespace: Some(NS.to_owned()),
        ralph_image: "ralph:bench".to_owned(),
        agent_service_account: "ralph-agent".to_owned(),
        native_sidecars: NativeSidecars::Always,
        max_concurrent_attempts,
        api_timeout: Duration::from_secs(30),
        leader_election: None,
        metrics_addr: None,
        instance: "bench".to_owned(),
        finished_pod_ttl: Duration::from_secs(3600),
    };
    tokio::spawn(async move {
        let shutdown = async move { token.cancelled().await };
        if let Err(error) = ralph::controller::run(client, config, shutdown).await {
            eprintln!("controller failed: {error}");
        }
    });
    stop
}

async fn agent_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("ralph.dev/attempt"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Tasks claimed and started per second: 500 independent tasks (created while the feature
/// is suspended), then the suspend is lifted and the first 100 (parallelism) start.
async fn claim_and_start_rate() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client_in(NS);
    let stop = start_controller(client.clone(), 10_000);
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let tasks: Api<ralph::api::Task> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let n = 500;
    features
        .create(&PostParams::default(), &feature("wide", n, 100, true))
        .await
        .expect("create feature");
    while tasks
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
        < n
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let resume = serde_json::json!({"spec": {"suspend": false}});
    features
        .patch("wide", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("resume");
    while agent_pods(&pods).await.len() < 100 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    println!(
        "claim+start: 100 of 500 ready tasks claimed and started in {:.3} s = {:.0} tasks/s",
        elapsed.as_secs_f64(),
        100.0 / elapsed.as_secs_f64()
    );
    stop.cancel();
}

fn kind_of(record: &RequestRecord) -> String {
    match &record.subresource {
        Some(sub) => format!("{} {}/{}", record.method, record.resource, sub),
        None => format!("{} {}", record.method, record.resource),
    }
}

/// API writes per completed task: 50 tasks, 10 at a time, each finished by the kubelet
/// stand-in with a task-done result.
async fn writes_per_task() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client_in(NS);
    let stop = start_controller(client.clone(), 10_000);
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let n = 50;
    features
        .create(&PostParams::default(), &feature("count", n, 10, false))
        .await
        .expect("create feature");
    let mut finished = std::collections::BTreeSet::new();
    loop {
        for pod in agent_pods(&pods).await {
            let name = pod.name_any();
            if !finished.insert(name.clone()) {
                continue;
            }
            let task = pod
                .labels()
                .get(ralph::api::labels::TASK_LABEL)
                .cloned()
                .unwrap_or_default();
            let result = serde_json::json!({
                "version": 1, "task": task, "attempt": name, "outcome": "finished",
                "stopReason": "end_turn", "sigils": {"taskDone": task}
            });
            let status = serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [{
                "name": "agent", "image": "agent", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": result.to_string()}}
            }]}});
            let _ = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
        let done = features
            .get("count")
            .await
            .ok()
            .and_then(|f| f.status)
            .is_some_and(|s| s.counts.done as usize == n);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the last releases and deletions land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let controller_writes: Vec<RequestRecord> = server
        .requests()
        .into_iter()
        .filter(|r| r.verb.is_write() && r.status < 400)
        .filter(|r| !(r.resource == "pods" && r.subresource.as_deref() == Some("status")))
        .filter(|r| !(r.resource == "features" && r.subresource.is_none() && r.method == "POST"))
        .collect();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for record in &controller_writes {
        *by_kind.entry(kind_of(record)).or_default() += 1;
    }
    let events: usize = by_kind
        .iter()
        .filter(|(k, _)| k.contains("events"))
        .map(|(_, v)| v)
        .sum();
    let total = controller_writes.len();
    println!(
        "writes per completed task ({n} tasks, parallelism 10): {:.2} all, {:.2} without Events",
        total as f64 / n as f64,
        (total - events) as f64 / n as f64
    );
    for (kind, count) in by_kind {
        println!(
            "  {kind:<40} {:>6}  ({:.2}/task)",
            count,
            count as f64 / n as f64
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Controller memory with 10,000 Tasks: 100 suspended Features of 100 Tasks each exist;
/// a `ralph controller` process starts, caches and reconciles them all; its RSS is read.
async fn memory_with_10k_tasks() {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client_in(NS);
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let tasks: Api<ralph::api::Task> = Api::namespaced(client.clone(), NS);
    for i in 0..100 {
        let created = features
            .create(
                &PostParams::default(),
                &feature(&format!("f{i}"), 100, 1, true),
            )
            .await
            .expect("create feature");
        for task in ralph::api::desired_tasks(&created).expect("desired tasks") {
            tasks
                .create(&PostParams::default(), &task)
                .await
                .expect("create task");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml(NS)).expect("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args([
            "controller",
            "--namespace",
            NS,
            "--ralph-image",
            "ralph:bench",
            "--no-leader-election",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log",
            "warn",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn ralph controller");
    let pid = child.id().unwrap_or(0);
    let started = Instant::now();
    loop {
        let reconciled = features
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().filter(|f| f.status.is_some()).count())
            .unwrap_or(0);
        if reconciled == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "memory: `ralph controller` with 10,000 Tasks in 100 Features cached and reconciled: RSS {:.1} MiB (all reconciled after {:.1} s)",
        rss_kib(pid) as f64 / 1024.0,
        elapsed.as_secs_f64()
    );
    let _ = child.kill().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        claim_and_start_rate().await;
        writes_per_task().await;
        memory_with_10k_tasks().await;
    });
}
