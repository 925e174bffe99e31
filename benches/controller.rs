//! Controller figures against the in-process fake API server with realistic per-request
//! latency (2 ms reads, 8 ms writes), printed, not asserted. The controller runs as a
//! separate `ralph controller` process, so its CPU time and RSS are its own.
//!
//! - attempts: for Features of 100, 1,000 and 10,000 independent tasks (parallelism 100;
//!   100 as templates, the larger ones as standalone Tasks: a Feature holds at most 200),
//!   a kubelet stand-in finishes every agent Pod with a task-done result as soon as it
//!   appears; in steady state (from a tenth of the tasks, at most 100, done, 500 more, or
//!   all): tasks/s, API writes per attempt (by kind, Events included), controller CPU per task.
//! - applied: 50 Features of 200 tasks (10,000 Tasks) applied at once: seconds until every
//!   Feature has a status counting all its tasks, and the controller's RSS then.
//! - qps20, qps50, qps500, unthrottled: side by side at an equal client-side rate limit
//!   (`--kube-api-qps`, burst twice that; kube-controller-manager's default is QPS 20),
//!   each on a server of its own with the same latency and stand-in: a model of Kubernetes'
//!   Job controller (`support/job_controller.rs`: what bounds the real one, read from its
//!   source) runs one Job of 500 instant Pods at parallelism 50, then ralph runs a Feature
//!   of 500 standalone tasks at parallelism 50 (applied suspended, measured from its
//!   resumption): pods/s and tasks/s, and every request each client sent (the limiter
//!   counts reads too) per Pod and per task, by kind. The issue measured the real Job
//!   controller on a real API server at QPS 500: 44.6–48.1 pods/s.
//! - templated20, templated50, templated500: the same with 200 tasks (Pods) as the
//!   Feature's templates, whose descriptions need no read.
//!
//! - planning: a Feature that plans (approval Manual, parallelism 10) whose planner answers
//!   100 independent tasks; from the approval (the annotation written) until the 100
//!   planned Tasks exist, until the first planned attempt's Pod exists, and until all 100
//!   are done, at the controller's default client rate limit (QPS 50, burst 100).
//!
//! `cargo bench --bench controller` (release), or `--profile dev` for a quicker build.
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
#[path = "support/job_controller.rs"]
mod job_controller;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use controller_harness::finish_every_pod_with;
use controller_process::{ControllerProcess, judged_total, run_bench};
use fake_apiserver::{FakeApiServer, RequestRecord};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ralph::api::Feature;

const NS: &str = "bench";
/// Completed tasks measured per Feature size.
const WINDOW: usize = 500;

fn feature(name: &str, tasks: usize, parallelism: usize) -> Feature {
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
            "tasks": tasks
        }
    }))
    .unwrap_or_else(|error| panic!("bench feature: {error}"))
}

/// The agent Pods' ServiceAccount, which the controller checks for before claiming.
async fn create_agent_service_account(client: &Client) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    let account = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ralph-agent"}
    }))
    .expect("ServiceAccount");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create ServiceAccount");
}

/// The client-side rate limit of a `ralph controller`: `qps` with a burst of twice that, or
/// none.
fn rate_args(qps: Option<f64>) -> Vec<String> {
    match qps {
        Some(qps) => vec![
            "--kube-api-qps".to_owned(),
            qps.to_string(),
            "--kube-api-burst".to_owned(),
            ((qps * 2.0) as u32).to_string(),
        ],
        None => vec!["--kube-api-qps".to_owned(), "0".to_owned()],
    }
}

/// A `ralph controller` process against `server`, watching the bench's namespace.
fn start_controller(server: &FakeApiServer, qps: Option<f64>) -> ControllerProcess {
    ControllerProcess::start(server, NS, &rate_args(qps), &[])
}

/// `n` standalone Tasks of Feature `feature` (`<feature>-s<i>`), created 64 at a time.
async fn create_standalone_tasks(client: &Client, feature: &str, n: usize) {
    let tasks: Api<ralph::api::Task> = Api::namespaced(client.clone(), NS);
    let creates = (0..n).map(|i| {
        let tasks = tasks.clone();
        let task: ralph::api::Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": format!("{feature}-s{i}"), "namespace": NS},
            "spec": {"featureRef": feature}
        }))
        .expect("task");
        async move { tasks.create(&PostParams::default(), &task).await }
    });
    let created: Vec<_> = futures::stream::iter(creates)
        .buffer_unordered(64)
        .collect()
        .await;
    for result in created {
        result.expect("create task");
    }
}

/// Kubelet stand-in: every new agent Pod ends at once with a task-done result.
fn finish_every_pod(client: Client) -> tokio::task::JoinHandle<()> {
    finish_every_pod_in(client, NS, "ralph.dev/attempt")
}

/// Kubelet stand-in for the Pods with `label` in `namespace`.
fn finish_every_pod_in(
    client: Client,
    namespace: &'static str,
    label: &'static str,
) -> tokio::task::JoinHandle<()> {
    finish_every_pod_with(client, namespace, label, task_done_status)
}

/// The status of an agent Pod whose runner reported `task` done.
fn task_done_status(task: &str, pod: &str) -> serde_json::Value {
    let result = serde_json::json!({
        "version": 1, "task": task, "attempt": pod, "outcome": "finished",
        "stopReason": "end_turn", "sigils": {"taskDone": task}
    });
    let now = jiff::Timestamp::now().to_string();
    serde_json::json!({"status": {
    "phase": "Succeeded", "startTime": now,
    "containerStatuses": [{
        "name": "agent", "image": "agent", "imageID": "", "ready": false,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed",
            "startedAt": now, "finishedAt": now,
            "message": result.to_string()}}
    }]}})
}

fn kind_of(record: &RequestRecord) -> String {
    match &record.subresource {
        Some(sub) => format!("{} {}/{}", record.method, record.resource, sub),
        None => format!("{} {}", record.method, record.resource),
    }
}

/// Writes of the controller that belong to attempts: not the stand-in's Pod statuses, not
/// the bench's Feature, not the Feature → Task sync, not Feature status.
fn attempt_writes(server: &FakeApiServer) -> BTreeMap<String, usize> {
    let mut by_kind = BTreeMap::new();
    for record in server.requests() {
        if !record.verb.is_write() || record.status >= 400 {
            continue;
        }
        let kind = kind_of(&record);
        let excluded = [
            "PATCH pods/status",
            "POST serviceaccounts",
            "POST features",
            "PATCH tasks",
            "PATCH features/status",
        ];
        if !excluded.contains(&kind.as_str()) {
            *by_kind.entry(kind).or_default() += 1;
        }
    }
    by_kind
}

async fn done_count(features: &Api<Feature>, name: &str) -> usize {
    features
        .get(name)
        .await
        .ok()
        .and_then(|f| f.status)
        .map_or(0, |s| s.counts.done as usize)
}

/// One Feature of `n` independent tasks, parallelism 100, every attempt finished at once.
async fn attempts(n: usize) {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    let controller = start_controller(&server, None);
    let _kubelet = finish_every_pod(client.clone());
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let name = format!("f{n}");
    if n <= ralph::api::feature::MAX_TASKS {
        features
            .create(&PostParams::default(), &feature(&name, n, 100))
            .await
            .expect("create feature");
    } else {
        // A Feature holds at most MAX_TASKS templates: larger ones are standalone Tasks.
        features
            .create(&PostParams::default(), &feature(&name, 0, 100))
            .await
            .expect("create feature");
        create_standalone_tasks(&client, &name, n).await;
    }
    // Measure in steady state: from the first tenth (at most 100) of the tasks done to
    // WINDOW more; a Feature of 100 tasks is measured whole (Task sync included).
    let start_at = if n <= 100 { 0 } else { (n / 10).min(100) };
    while done_count(&features, &name).await < start_at {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (started, cpu_before, done_before) = (
        Instant::now(),
        controller.cpu_seconds(),
        done_count(&features, &name).await,
    );
    let target = (done_before + WINDOW).min(n);
    let writes_before = attempt_writes(&server);
    let mut done = done_before;
    let mut last_report = Instant::now();
    while done < target {
        tokio::time::sleep(Duration::from_millis(50)).await;
        done = done_count(&features, &name).await;
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... {done} of {target} tasks done");
            last_report = Instant::now();
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = controller.cpu_seconds() - cpu_before;
    let measured = (done - done_before).max(1) as f64;
    let mut writes = attempt_writes(&server);
    for (kind, count) in writes_before {
        if let Some(after) = writes.get_mut(&kind) {
            *after -= count;
        }
    }
    let total: usize = writes.values().sum();
    let events: usize = writes
        .iter()
        .filter(|(k, _)| k.contains("events"))
        .map(|(_, v)| v)
        .sum();
    println!(
        "Feature of {n:>5} tasks: {:.1} tasks/s, {:.2} writes per attempt ({:.2} without Events), {:.2} ms CPU per task ({} tasks measured)",
        measured / elapsed,
        total as f64 / measured,
        (total - events) as f64 / measured,
        cpu * 1000.0 / measured,
        done - done_before,
    );
    for (kind, count) in writes.iter().filter(|(_, c)| **c > 0) {
        println!("    {kind:<28} {:.2}/attempt", *count as f64 / measured);
    }
}

/// 50 Features of 200 tasks applied at once: time until every Feature has a status, and
/// until each has its judged status counting all its tasks, and the controller's RSS with the 10,000 Tasks cached.
async fn applied_10k() {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    let controller = start_controller(&server, None);
    let features: Api<Feature> = Api::namespaced(client, NS);
    let mut manifests: Vec<Feature> = (0..50)
        .map(|i| {
            let mut f = feature(&format!("g{i}"), 200, 1);
            f.spec.suspend = true;
            f
        })
        .collect();
    let started = Instant::now();
    let creates = manifests.drain(..).map(|f| {
        let features = features.clone();
        async move { features.create(&PostParams::default(), &f).await }
    });
    for created in futures::future::join_all(creates).await {
        created.expect("create feature");
    }
    let mut first_status = None;
    loop {
        let listed = features
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let with_status = listed.iter().filter(|f| f.status.is_some()).count();
        if with_status == 50 && first_status.is_none() {
            first_status = Some(started.elapsed().as_secs_f64());
        }
        let judged = listed
            .iter()
            .filter(|f| judged_total(f) == Some(200))
            .count();
        if judged == 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let first_status = first_status.unwrap_or(elapsed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "10,000 Tasks (50 Features of 200) applied: every Feature has a status after {first_status:.1} s, \
         its judged status counting all 200 after {elapsed:.1} s; controller RSS {:.1} MiB",
        controller.rss_mib()
    );
}

/// Tasks, and the Job's Pods, in the side-by-side runs: the 500 instant ones.
const SIDE_RUNS: usize = 500;
/// Tasks, and Pods, in the templated side-by-side runs: the most a Feature holds.
const SIDE_TEMPLATED_RUNS: usize = ralph::api::feature::MAX_TASKS;
/// Parallelism of the side-by-side runs (the issue's).
const SIDE_PARALLELISM: usize = 50;

/// How long the Job controller model's API server may take to answer (as `ralph controller`'s
/// default `--api-timeout`).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The load average, to print beside figures measured on a shared machine.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A request's kind with its verb, and its status when refused.
fn request_kind(record: &RequestRecord) -> String {
    let kind = format!(
        "{:?} {}",
        record.verb,
        kind_of(record).split_once(' ').map_or("", |k| k.1)
    );
    if record.status >= 400 {
        format!("{kind} ({})", record.status)
    } else {
        kind
    }
}

/// Requests a client of ours (a `ralph controller`, or the Job controller model) sent, by
/// kind: everything the rate limiter counts, watches and refused requests included.
fn requests_by_kind(server: &FakeApiServer) -> BTreeMap<String, usize> {
    let mut by_kind = BTreeMap::new();
    for record in server.requests() {
        if record.user_agent.as_deref() == Some(ralph::controller::client::USER_AGENT) {
            *by_kind.entry(request_kind(&record)).or_default() += 1;
        }
    }
    by_kind
}

/// Requests per run: all, writes, reads (gets, lists and watches).
fn per_run(by_kind: &BTreeMap<String, usize>, runs: usize) -> (f64, f64, f64) {
    let count = |pick: &dyn Fn(&str) -> bool| {
        by_kind
            .iter()
            .filter(|(kind, _)| pick(kind))
            .map(|(_, n)| n)
            .sum::<usize>() as f64
            / runs as f64
    };
    let read = |kind: &str| {
        ["Get ", "List ", "Watch "]
            .iter()
            .any(|v| kind.starts_with(v))
    };
    (
        count(&|_| true),
        count(&|kind| !read(kind) && !kind.starts_with("Discovery")),
        count(&read),
    )
}

/// The Job controller model with its own client under `qps` (burst twice that) on a server
/// of its own, the kubelet stand-in finishing its Pods: Pods per second and its requests.
async fn job_controller_run(qps: Option<f64>, runs: usize) -> (f64, BTreeMap<String, usize>) {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let _kubelet = finish_every_pod_in(server.client_in(NS), NS, job_controller::JOB_LABEL);
    let throttle = qps.and_then(|qps| {
        ralph::controller::client::ThrottleLayer::new(qps, (qps * 2.0) as u32, ANSWER_TIMEOUT)
    });
    let client = ralph::controller::client::build(server.config(NS), throttle)
        .expect("Job controller client");
    let pods_per_second = job_controller::run_job(client, NS, runs, SIDE_PARALLELISM).await;
    (pods_per_second, requests_by_kind(&server))
}

/// A `ralph controller` under `qps` (burst twice that) running a Feature of `runs` tasks
/// (templated, or standalone Tasks) at [`SIDE_PARALLELISM`], applied suspended and measured
/// from its resumption: tasks per second and the controller's requests.
async fn ralph_run(
    qps: Option<f64>,
    runs: usize,
    templated: bool,
) -> (f64, BTreeMap<String, usize>) {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let templates = if templated { runs } else { 0 };
    let mut manifest = feature("side", templates, SIDE_PARALLELISM);
    manifest.spec.suspend = true;
    features
        .create(&PostParams::default(), &manifest)
        .await
        .expect("create feature");
    if !templated {
        create_standalone_tasks(&client, "side", runs).await;
    }
    let _controller = start_controller(&server, qps);
    let _agents = finish_every_pod(client.clone());
    loop {
        let counted = features
            .get("side")
            .await
            .ok()
            .and_then(|f| judged_total(&f))
            .is_some_and(|total| total as usize == runs);
        if counted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.clear_requests();
    let started = Instant::now();
    let resume = serde_json::json!({"spec": {"suspend": false}});
    features
        .patch("side", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("resume feature");
    while done_count(&features, "side").await < runs {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tasks_per_second = runs as f64 / started.elapsed().as_secs_f64();
    (tasks_per_second, requests_by_kind(&server))
}

fn print_requests(by_kind: &BTreeMap<String, usize>, runs: usize) {
    for (kind, count) in by_kind {
        println!("    {kind:<34} {:.3}/run", *count as f64 / runs as f64);
    }
}

/// The Job controller model and ralph side by side at the client rate limit `qps` (none:
/// unthrottled), at parallelism 50: 500 instant tasks as standalone Tasks, or 200 as the
/// Feature's templates.
async fn side_by_side(qps: Option<f64>, templated: bool) {
    let (runs, kind) = if templated {
        (SIDE_TEMPLATED_RUNS, "templated")
    } else {
        (SIDE_RUNS, "standalone")
    };
    let limit = qps.map_or("unthrottled".to_owned(), |q| {
        format!("client QPS {q} (burst {})", q * 2.0)
    });
    let (pods_per_second, job_requests) = job_controller_run(qps, runs).await;
    let job_load = load_average();
    let (tasks_per_second, ralph_requests) = ralph_run(qps, runs, templated).await;
    let (job_all, job_writes, job_reads) = per_run(&job_requests, runs);
    let (all, writes, reads) = per_run(&ralph_requests, runs);
    println!(
        "{limit}, {runs} instant {kind} tasks at parallelism {SIDE_PARALLELISM}: \
         Job controller model {pods_per_second:.1} pods/s ({job_all:.2} requests per Pod: \
         {job_writes:.2} writes, {job_reads:.2} reads; load {job_load}); \
         ralph {tasks_per_second:.1} tasks/s ({all:.2} requests per task: {writes:.2} writes, \
         {reads:.2} reads; load {}): {:.2} of the Job controller",
        load_average(),
        tasks_per_second / pods_per_second
    );
    println!("  Job controller model requests:");
    print_requests(&job_requests, runs);
    println!("  ralph requests:");
    print_requests(&ralph_requests, runs);
}

/// Planned tasks in the planning part.
const PLANNED: usize = 100;

/// The planning part (see the module's doc).
async fn planning_approval() {
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    // What the planning attempt's claim-keeper uploads: 100 independent tasks.
    let tasks: String = (0..PLANNED)
        .map(|i| format!("- name: t{i}\n  title: Planned task {i}\n  acceptance: [done]\n"))
        .collect();
    let answer: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big-planning-a1-answer"},
        "data": {"tasks.yaml": tasks}
    }))
    .expect("answer ConfigMap");
    Api::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &answer)
        .await
        .expect("create the answer");
    let mut manifest = feature("big", 0, 10);
    manifest.spec = serde_json::from_value(serde_json::json!({
        "agent": {"image": "agent:bench", "command": ["agent"]},
        "parallelism": 10,
        "context": {"spec": {"inline": "Plan a hundred tasks."}},
        "planning": {"approval": "Manual", "maxTasks": PLANNED},
    }))
    .expect("planning spec");
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    features
        .create(&PostParams::default(), &manifest)
        .await
        .expect("create feature");
    // The controller's default client rate limit.
    let _controller = start_controller(&server, Some(50.0));
    let _agents = finish_every_pod(client.clone());
    let hash = loop {
        let waiting = features.get("big").await.ok().and_then(|f| {
            let status = f.status?;
            (status.phase == ralph::api::FeaturePhase::AwaitingApproval)
                .then_some(status.planning?.dag_hash)?
        });
        if let Some(hash) = waiting {
            break hash;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let tasks: Api<ralph::api::Task> = Api::namespaced(client.clone(), NS);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let planned = ListParams::default().labels(&format!("ralph.dev/plan={hash}"));
    let approve =
        serde_json::json!({"metadata": {"annotations": {"ralph.dev/approve-plan": hash}}});
    let started = Instant::now();
    features
        .patch("big", &PatchParams::default(), &Patch::Merge(&approve))
        .await
        .expect("approve");
    let (mut all_exist, mut first_pod) = (None, None);
    while all_exist.is_none() || first_pod.is_none() {
        if all_exist.is_none() && tasks.list(&planned).await.map_or(0, |l| l.items.len()) == PLANNED
        {
            all_exist = Some(started.elapsed());
        }
        if first_pod.is_none()
            && pods
                .list(&ListParams::default())
                .await
                .is_ok_and(|l| l.items.iter().any(|p| p.name_any().starts_with("big-t")))
        {
            first_pod = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while done_count(&features, "big").await < PLANNED + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64();
    println!("planning: approval of a {PLANNED}-task plan (QPS 50, burst 100, 2/8 ms latency)");
    println!(
        "  all {PLANNED} planned Tasks exist       {:>7.2} s",
        secs(all_exist)
    );
    println!(
        "  first planned attempt's Pod exists  {:>7.2} s",
        secs(first_pod)
    );
    println!(
        "  all {PLANNED} planned tasks done        {:>7.2} s",
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    // `cargo bench --bench controller -- 100 applied` runs only those parts.
    run_bench(|parts| async move {
        for n in [100, 1_000, 10_000] {
            if parts.runs(&n.to_string()) {
                attempts(n).await;
            }
        }
        if parts.runs("applied") {
            applied_10k().await;
        }
        for qps in [20.0, 50.0, 500.0] {
            if parts.runs(&format!("qps{qps}")) {
                side_by_side(Some(qps), false).await;
            }
            if parts.runs(&format!("templated{qps}")) {
                side_by_side(Some(qps), true).await;
            }
        }
        if parts.runs("unthrottled") {
            side_by_side(None, false).await;
        }
        if parts.runs("planning") {
            planning_approval().await;
        }
    });
}
