//! Controller memory with 10,000 Tasks, against the in-process fake API server with
//! realistic per-request latency (2 ms reads, 8 ms writes); printed, not asserted. The
//! controller runs as a separate `ralph controller` process, so its RSS is its own.
//!
//! 50 Features of 200 templated tasks are applied at once (suspended). Figures (VmRSS now,
//! and VmHWM, the peak so far):
//! - synced: every Feature has its judged status counting its 200 tasks (the time until
//!   every Feature has a status at all is printed too);
//! - run: the Features resumed (parallelism 10 each), a kubelet stand-in finishing every
//!   agent Pod at once with a task-done result carrying a journal note, until all 10,000
//!   tasks are done (the 10,000 finished Pods stay, under `--finished-pod-ttl`);
//! - restart: a new controller process after the run, once its caches have filled.
//!
//! Each stage also prints the controller's GETs of single objects by resource (reads count
//! against the client's QPS limit): in all up to the sync, per attempt in the run, and
//! since the restart.
//!
//! Parts: `plain` (tasks with a name only, as `benches/controller.rs applied`) and
//! `prompts` (a title and a 1 KiB prompt per task); `run` the run phase (picking only
//! `plain` or `prompts` measures synced and restart). The controller inherits the bench's
//! environment; with the Helm chart's allocator settings (the figures in
//! docs/performance.md): `_RJEM_MALLOC_CONF=dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1
//! MALLOC_ARENA_MAX=2 cargo bench --bench controller_rss -- prompts run`.
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

use std::time::{Duration, Instant};

use controller_harness::{NS, create_agent_service_account, finish_every_pod_with};
use controller_process::{ControllerProcess, judged_total, run_bench};
use fake_apiserver::{FakeApiServer, Verb};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ralph::api::Feature;

const FEATURES: usize = 50;
const TASKS_PER_FEATURE: usize = 200;

/// What each task's template holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Content {
    /// A name only.
    Plain,
    /// A title and a prompt of about 1 KiB.
    Prompts,
}

fn template(feature: usize, task: usize, content: Content) -> serde_json::Value {
    let name = format!("t{task}");
    match content {
        Content::Plain => serde_json::json!({"name": name}),
        Content::Prompts => {
            let description = format!(
                "Implement step {task} of feature {feature}. {}",
                "Read the module, write the failing test first, make it pass, keep the \
                 public interface as it is, run the linters and describe what changed. "
                    .repeat(6)
            );
            serde_json::json!({
                "name": name,
                "title": format!("Step {task} of feature {feature}: implement and test"),
                "description": description,
            })
        }
    }
}

fn feature(index: usize, content: Content) -> Feature {
    let tasks: Vec<_> = (0..TASKS_PER_FEATURE)
        .map(|task| template(index, task, content))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": format!("g{index}"), "namespace": NS},
        "spec": {
            "agent": {"image": "agent:bench", "command": ["agent"]},
            "parallelism": 10,
            "suspend": true,
            "tasks": tasks
        }
    }))
    .expect("bench feature")
}

/// Kubelet stand-in: every new agent Pod ends at once with a task-done result, a journal
/// note and usage, as a real runner reports them.
fn finish_every_pod(client: Client) -> tokio::task::JoinHandle<()> {
    finish_every_pod_with(client, NS, "ralph.dev/attempt", task_done_status)
}

/// The status of an agent Pod whose runner reported `task` done, as a kubelet writes it.
fn task_done_status(task: &str, pod: &str) -> serde_json::Value {
    let journal = format!(
        "Task {task}: added the test, implemented the change, all checks pass. {}",
        "Touched the parser and its tests; nothing else changed. ".repeat(6)
    );
    let result = serde_json::json!({
        "version": 1, "task": task, "attempt": pod, "outcome": "finished",
        "stopReason": "end_turn", "agent": "claude-agent-acp 0.5.1",
        "model": "claude-sonnet-4-5",
        "sigils": {"taskDone": task, "journal": [journal]},
        "usage": {"inputTokens": 48213, "outputTokens": 5120, "costUsd": 0.21}
    });
    let now = jiff::Timestamp::now().to_string();
    serde_json::json!({"status": {
        "phase": "Succeeded", "startTime": now,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "lastTransitionTime": now,
             "reason": "PodCompleted"},
            {"type": "ContainersReady", "status": "False",
             "lastTransitionTime": now, "reason": "PodCompleted"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        ],
        "hostIP": "10.0.3.17", "podIP": "10.244.3.121",
        "podIPs": [{"ip": "10.244.3.121"}], "qosClass": "BestEffort",
        "containerStatuses": [{
            "name": "agent", "image": "agent:bench",
            "imageID": "docker.io/library/agent@sha256:0f3c5d4a9b8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a",
            "containerID": "containerd://6c1f0e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100",
            "ready": false, "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": now, "finishedAt": now,
                "containerID": "containerd://6c1f0e2d3b4a59687766554433221100ffeeddccbbaa99887766554433221100",
                "message": result.to_string()}}
        }]
    }})
}

async fn features_where(features: &Api<Feature>, counted: impl Fn(&Feature) -> usize) -> usize {
    features
        .list(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(&counted).sum())
        .unwrap_or(0)
}

/// The controller's reads so far by resource: GETs of one object (the bench reads none;
/// it lists Features, and its kubelet stand-in watches Pods).
fn reads(server: &FakeApiServer) -> std::collections::BTreeMap<String, usize> {
    let mut by_resource = std::collections::BTreeMap::new();
    for record in server.requests() {
        if record.verb == Verb::Get {
            *by_resource.entry(record.resource).or_default() += 1;
        }
    }
    by_resource
}

/// `after` minus `before`, each divided by `per` (e.g. attempts), as `resource n.nn, ...`.
fn reads_between(
    before: &std::collections::BTreeMap<String, usize>,
    after: &std::collections::BTreeMap<String, usize>,
    per: f64,
) -> String {
    let figures: Vec<String> = after
        .iter()
        .map(|(resource, n)| {
            let earlier = before.get(resource).copied().unwrap_or(0);
            (resource, (n - earlier) as f64 / per)
        })
        .filter(|(_, n)| *n > 0.0)
        .map(|(resource, n)| format!("{resource} {n:.2}"))
        .collect();
    if figures.is_empty() {
        "none".to_owned()
    } else {
        figures.join(", ")
    }
}

fn report(stage: &str, controller: &ControllerProcess, extra: &str) {
    println!(
        "  {stage:<8} RSS {:>6.1} MiB (anon {:>6.1}, peak {:>6.1}; heap allocated {:>6.1}, \
         active {:>6.1}, resident {:>6.1}){extra}",
        controller.rss_mib(),
        controller.status_mib("RssAnon"),
        controller.status_mib("VmHWM"),
        controller.heap_mib("allocated"),
        controller.heap_mib("active"),
        controller.heap_mib("resident"),
    );
}

/// Waits until the controller's RSS has not grown for 3 s (and at least `min`).
async fn settle(controller: &ControllerProcess, min: Duration) {
    tokio::time::sleep(min).await;
    let mut last = controller.rss_mib();
    let mut steady = 0;
    while steady < 3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = controller.rss_mib();
        steady = if now > last + 0.2 { 0 } else { steady + 1 };
        last = now;
    }
}

async fn measure(content: Content, with_run: bool) {
    let label = match content {
        Content::Plain => "plain (name only)",
        Content::Prompts => "prompts (title and 1 KiB prompt)",
    };
    let env: Vec<String> = ["MALLOC_ARENA_MAX", "_RJEM_MALLOC_CONF"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect();
    println!(
        "10,000 Tasks, {label}{}:",
        if env.is_empty() {
            String::new()
        } else {
            format!(", {}", env.join(" "))
        }
    );
    let server = FakeApiServer::start().await.expect("fake API server");
    server.add_realistic_latency();
    let client = server.client_in(NS);
    create_agent_service_account(&client).await;
    let controller = ControllerProcess::start(&server, NS, &[], &[]);
    let features: Api<Feature> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    let creates = (0..FEATURES).map(|i| {
        let features = features.clone();
        async move {
            features
                .create(&PostParams::default(), &feature(i, content))
                .await
        }
    });
    for created in futures::future::join_all(creates).await {
        created.expect("create feature");
    }
    let any_status = |f: &Feature| usize::from(f.status.is_some());
    while features_where(&features, any_status).await < FEATURES {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first_status_after = started.elapsed().as_secs_f64();
    let judged = |f: &Feature| usize::from(judged_total(f) == Some(TASKS_PER_FEATURE as u32));
    while features_where(&features, judged).await < FEATURES {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let synced_after = started.elapsed().as_secs_f64();
    settle(&controller, Duration::from_secs(2)).await;
    report(
        "synced",
        &controller,
        &format!(
            " — every Feature has a status after {first_status_after:.1} s, its judged status \
             counting all its tasks after {synced_after:.1} s; GETs: {}",
            reads_between(&Default::default(), &reads(&server), 1.0)
        ),
    );

    if with_run {
        run_all(&server, &client, &features, &controller).await;
    }
    controller.stop().await;
    let before_restart = reads(&server);
    let controller = ControllerProcess::start(&server, NS, &[], &[]);
    settle(&controller, Duration::from_secs(8)).await;
    report(
        "restart",
        &controller,
        &format!(
            " — after the caches filled again; GETs: {}",
            reads_between(&before_restart, &reads(&server), 1.0)
        ),
    );
}

/// Resumes every Feature and waits until all 10,000 tasks are done.
async fn run_all(
    server: &FakeApiServer,
    client: &Client,
    features: &Api<Feature>,
    controller: &ControllerProcess,
) {
    let _kubelet = finish_every_pod(client.clone());
    let before = reads(server);
    let started = Instant::now();
    let resume = serde_json::json!({"spec": {"suspend": false}});
    for i in 0..FEATURES {
        features
            .patch(
                &format!("g{i}"),
                &PatchParams::default(),
                &Patch::Merge(&resume),
            )
            .await
            .expect("resume feature");
    }
    let done = |f: &Feature| f.status.as_ref().map_or(0, |s| s.counts.done as usize);
    let all = FEATURES * TASKS_PER_FEATURE;
    let mut last_report = Instant::now();
    loop {
        let finished = features_where(features, done).await;
        if finished >= all {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!("  ... {finished} of {all} tasks done");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let run_for = started.elapsed().as_secs_f64();
    settle(controller, Duration::from_secs(2)).await;
    report(
        "run",
        controller,
        &format!(
            " — 10,000 tasks done in {run_for:.1} s, 10,000 finished Pods kept; GETs per attempt: {}",
            reads_between(&before, &reads(server), all as f64)
        ),
    );
}

fn main() {
    // `cargo bench --bench controller_rss -- prompts` runs only that part; `run` adds the
    // run phase (10,000 tasks at the default client QPS: about 15 minutes in release).
    run_bench(|parts| async move {
        let content_named = parts.names_any(&["plain", "prompts"]);
        let with_run = parts.runs("run");
        for (content, name) in [(Content::Plain, "plain"), (Content::Prompts, "prompts")] {
            if !content_named || parts.runs(name) {
                measure(content, with_run).await;
            }
        }
    });
}
