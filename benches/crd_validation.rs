//! What the fake API server's CRD validation costs per status write, for a Feature of 1
//! and of 200 tasks (printed, not asserted; the goal is 200 tasks ≤ 2 × 1 task):
//! - schema and CEL validation of the whole object alone, as on every status write;
//! - a status merge patch end to end through the real kube client.
//!
//! `cargo bench --bench crd_validation`
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, ResourceType, validate_against_schema};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use ralph::api::Feature;
use serde_json::{Value, json};

/// A Feature of `tasks` chained tasks, each with a title, a prompt and a dependency.
fn feature(name: &str, tasks: usize) -> Value {
    let templates: Vec<Value> = (0..tasks)
        .map(|i| {
            let depends_on: Vec<String> = (i.saturating_sub(2)..i)
                .map(|d| format!("task-{d}"))
                .collect();
            json!({
                "name": format!("task-{i}"),
                "title": format!("Task number {i}"),
                "description": "Implement the next step of the plan and test it.",
                "dependsOn": depends_on,
            })
        })
        .collect();
    json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"agent": {"image": "node:22-slim", "command": ["agent"]}, "tasks": templates},
        "status": {"phase": "Running", "counts": {"total": tasks, "pending": tasks}}
    })
}

/// Median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn validation_alone() -> (Duration, Duration) {
    let rt = ResourceType::custom("ralph.dev", "v1alpha1", "features", "Feature", true);
    let time = |tasks| {
        let object = feature("f", tasks);
        median(501, || {
            if let Err(error) = validate_against_schema(&rt, &object) {
                panic!("bench Feature is invalid: {error}");
            }
        })
    };
    (time(1), time(200))
}

async fn status_patch_end_to_end() -> (Duration, Duration) {
    let server = FakeApiServer::start()
        .await
        .unwrap_or_else(|error| panic!("fake API server: {error}"));
    let api: Api<Feature> = Api::default_namespaced(server.client());
    let mut figures = Vec::new();
    for (name, tasks) in [("one", 1), ("many", 200)] {
        let object: Feature = serde_json::from_value(feature(name, tasks))
            .unwrap_or_else(|error| panic!("bench Feature: {error}"));
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("create: {error}"));
        let mut times = Vec::new();
        for round in 0..201u32 {
            let patch = json!({"status": {"iterations": round}});
            let start = Instant::now();
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_or_else(|error| panic!("status patch: {error}"));
            times.push(start.elapsed());
        }
        times.sort();
        figures.push(times[times.len() / 2]);
    }
    (figures[0], figures[1])
}

fn report(what: &str, (one, many): (Duration, Duration)) {
    let ratio = many.as_secs_f64() / one.as_secs_f64();
    println!(
        "{what}: 1 task {:>9.1} µs, 200 tasks {:>9.1} µs, ratio {ratio:.2} (goal ≤ 2)",
        one.as_secs_f64() * 1e6,
        many.as_secs_f64() * 1e6
    );
}

fn main() {
    report(
        "schema + CEL validation of the whole Feature",
        validation_alone(),
    );
    let runtime =
        tokio::runtime::Runtime::new().unwrap_or_else(|error| panic!("tokio runtime: {error}"));
    report(
        "status merge patch through the fake, end to end",
        runtime.block_on(status_patch_end_to_end()),
    );
}
