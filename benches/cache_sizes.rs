//! What the controller's caches hold per object, in heap bytes (jemalloc's
//! `stats.allocated`), printed, not asserted: a templated Task pending, running and done
//! (one attempt with a 400-byte journal note), as a watch delivers it (managedFields and
//! all) and as the controller caches it (a `CachedTask` in a kube reflector store); a
//! cached Feature of 200 templates with 1 KiB prompts; and a finished agent Pod in the Pod
//! cache (until its Task records the attempt, then it leaves the cache). Times 10,000 is
//! most of the controller's heap with 10,000 Tasks (`benches/controller_rss.rs`).
//! Run: `cargo bench --bench cache_sizes`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use ralph::api::{Feature, Task};
use ralph::controller::cache::trim::{trim_feature, trim_pod};
use ralph::controller::plan::cached::{CachedPod, CachedTask};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Objects measured at once (the figure is their mean; jemalloc counts small allocations
/// a thread cache at a time, so a few hundred KiB of error spread over them).
const COPIES: usize = 2_000;

fn allocated() -> usize {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    tikv_jemalloc_ctl::stats::allocated::read().unwrap()
}

/// A templated Task as the API server sends it, with `status`.
fn task(index: usize, status: Value) -> Value {
    let name = format!("g1-t{index}");
    json!({
        "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
        "metadata": {
            "name": name, "namespace": "team", "generation": 1, "resourceVersion": "48213",
            "uid": format!("{index:08x}-4742-4020-42b2-971d29c9c3c8"),
            "creationTimestamp": "2026-11-23T23:47:23Z",
            "labels": {"ralph.dev/feature": "g1", "ralph.dev/task": format!("t{index}")},
            "annotations": {"ralph.dev/template-hash": "a49cdcc2db767144"},
            "ownerReferences": [{"apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
                "name": "g1", "uid": "a72a83f4-cabd-0132-16c4-7e5f45ec933a", "controller": true}],
            "managedFields": [{"apiVersion": "ralph.dev/v1alpha1", "fieldsType": "FieldsV1",
                "manager": "ralph-controller", "operation": "Apply", "time": "2026-11-23T23:47:23Z",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:ralph.dev/feature": {}, "f:ralph.dev/task": {}}},
                    "f:spec": {"f:featureRef": {}, "f:title": {}, "f:description": {}}}}]
        },
        "spec": {"featureRef": "g1", "title": format!("Step {index} of feature 1: implement and test"),
            "description": "Read the module, write the failing test first, make it pass. ".repeat(16)},
        "status": status,
    })
}

fn running() -> Value {
    json!({"phase": "Running", "observedGeneration": 1, "attemptCount": 1,
        "claim": {"lease": "g1-t1", "holder": "ralph-controller-0", "attempt": 1,
            "acquiredAt": "2026-11-23T23:47:23Z", "fencingToken": 0},
        "attempts": [{"number": 1, "kind": "work", "pod": "g1-t1-a1", "generation": 1,
            "poolAgent": "primary", "startedAt": "2026-11-23T23:47:23Z"}],
        "message": "attempt 1 running in Pod g1-t1-a1"})
}

fn done() -> Value {
    let journal = format!(
        "Task t1: added the test, implemented the change, all checks pass. {}",
        "Touched the parser and its tests; nothing else changed. ".repeat(6)
    );
    json!({"phase": "Done", "observedGeneration": 1, "attemptCount": 1,
        "attempts": [{"number": 1, "kind": "work", "pod": "g1-t1-a1", "generation": 1,
            "agent": "claude-agent-acp 0.5.1", "model": "claude-sonnet-4-5", "poolAgent": "primary",
            "startedAt": "2026-11-23T23:47:23Z", "endedAt": "2026-11-23T23:49:02Z",
            "stopReason": "end_turn", "exitCode": 0, "outcome": "done",
            "sigils": {"taskDone": "t1", "journal": [journal]},
            "usage": {"inputTokens": 48213, "outputTokens": 5120, "costUsd": 0.21}}],
        "usage": {"inputTokens": 48213, "outputTokens": 5120, "costUSD": "0.21"},
        "message": "task t1 done"})
}

/// Mean heap bytes of one Task of `status` in a store, as the controller caches it.
fn cached_task_bytes(status: &Value) -> usize {
    let texts: Vec<String> = (0..COPIES)
        .map(|i| task(i, status.clone()).to_string())
        .collect();
    let (store, mut writer) = reflector::store::<CachedTask>();
    let before = allocated();
    for text in &texts {
        let task: Task = serde_json::from_str(text).unwrap();
        writer.apply_watcher_event(&Event::Apply(CachedTask::from(task)));
    }
    let bytes = (allocated() - before) / COPIES;
    assert_eq!(store.state().len(), COPIES);
    bytes
}

/// Mean heap bytes of one Task of `status` as deserialized from the watch, untrimmed.
fn received_task_bytes(status: &Value) -> usize {
    let texts: Vec<String> = (0..COPIES)
        .map(|i| task(i, status.clone()).to_string())
        .collect();
    let before = allocated();
    let tasks: Vec<Task> = texts
        .iter()
        .map(|text| serde_json::from_str(text).unwrap())
        .collect();
    let bytes = (allocated() - before) / COPIES;
    drop(tasks);
    bytes
}

fn cached_feature_bytes() -> usize {
    let templates: Vec<Value> = (0..200)
        .map(|task| {
            json!({"name": format!("t{task}"),
                "title": format!("Step {task} of feature 1: implement and test"),
                "description": "Read the module, write the failing test first. ".repeat(24)})
        })
        .collect();
    let text = json!({"apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
        "metadata": {"name": "g1", "namespace": "team", "uid": "u-1", "generation": 1,
            "resourceVersion": "5"},
        "spec": {"agent": {"image": "agent:bench", "command": ["agent"]}, "parallelism": 10,
            "tasks": templates}})
    .to_string();
    let features = 200;
    let (_store, mut writer) = reflector::store::<Feature>();
    let before = allocated();
    for i in 0..features {
        let mut feature: Feature = serde_json::from_str(&text).unwrap();
        feature.metadata.name = Some(format!("g{i}"));
        trim_feature(&mut feature, None);
        writer.apply_watcher_event(&Event::Apply(feature));
    }
    (allocated() - before) / features
}

/// A finished agent Pod as the API server sends it (its prompt in an annotation).
fn pod(index: usize) -> Value {
    let terminated = |name: &str, message: &str| {
        json!({"name": name, "image": "registry.example/agent:1.4.2",
            "imageID": "registry.example/agent@sha256:0f3c", "ready": false, "restartCount": 0,
            "containerID": "containerd://8c1d", "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                "startedAt": "2026-11-23T23:47:25Z", "finishedAt": "2026-11-23T23:49:02Z"}}})
    };
    let result = json!({"version": 1, "task": "t1", "attempt": format!("g1-t{index}-a1"),
        "outcome": "finished", "stopReason": "end_turn",
        "usage": {"inputTokens": 48213, "outputTokens": 5120}})
    .to_string();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("g1-t{index}-a1"), "namespace": "team", "resourceVersion": "48290",
            "uid": format!("{index:08x}-5742-4020-42b2-971d29c9c3c8"),
            "creationTimestamp": "2026-11-23T23:47:23Z",
            "labels": {"ralph.dev/feature": "g1", "ralph.dev/task": format!("t{index}"),
                "ralph.dev/attempt": format!("g1-t{index}-a1")},
            "annotations": {"ralph.dev/prompt": "Read the module, write the failing test first. ".repeat(40)},
            "ownerReferences": [{"apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
                "name": format!("g1-t{index}"), "uid": format!("{index:08x}-4742-4020-42b2-971d29c9c3c8"),
                "controller": true}]
        },
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "agent", "image": "registry.example/agent:1.4.2", "command": ["/ralph/bin/ralph", "runner"]},
            {"name": "claim-keeper", "image": "registry.example/ralph:0.1.0", "command": ["/ralph", "sidecar"]}]},
        "status": {
            "phase": "Succeeded", "startTime": "2026-11-23T23:47:24Z", "hostIP": "10.0.0.4",
            "podIP": "10.1.0.9", "podIPs": [{"ip": "10.1.0.9"}], "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "initContainerStatuses": [terminated("install-ralph", "")],
            "containerStatuses": [terminated("agent", &result), terminated("claim-keeper", "")]
        }
    })
}

/// Mean heap bytes of one finished agent Pod in a store: trimmed as the API's `Pod` (as
/// cached before session 14) and as the `CachedPod` the controller caches.
fn cached_pod_bytes() -> (usize, usize) {
    let texts: Vec<String> = (0..COPIES).map(|i| pod(i).to_string()).collect();
    let (trimmed_store, mut writer) = reflector::store::<Pod>();
    let before = allocated();
    for text in &texts {
        let mut pod: Pod = serde_json::from_str(text).unwrap();
        trim_pod(&mut pod);
        writer.apply_watcher_event(&Event::Apply(pod));
    }
    let trimmed = (allocated() - before) / COPIES;
    assert_eq!(trimmed_store.state().len(), COPIES);
    let (store, mut writer) = reflector::store::<CachedPod>();
    let before = allocated();
    for text in &texts {
        let pod: Pod = serde_json::from_str(text).unwrap();
        writer.apply_watcher_event(&Event::Apply(CachedPod::from(pod)));
    }
    let cached = (allocated() - before) / COPIES;
    assert_eq!(store.state().len(), COPIES);
    (trimmed, cached)
}

fn main() {
    println!("Heap bytes per object (mean of {COPIES}), as received and as cached:");
    for (phase, status) in [
        ("pending", json!({})),
        ("running", running()),
        ("done", done()),
    ] {
        println!(
            "  Task {phase:<8} received {:>6} B, cached {:>6} B",
            received_task_bytes(&status),
            cached_task_bytes(&status)
        );
    }
    println!(
        "  Feature of 200 templates (1 KiB prompts), cached: {} B",
        cached_feature_bytes()
    );
    let (trimmed, cached) = cached_pod_bytes();
    println!("  agent Pod finished, trimmed Pod {trimmed:>6} B, CachedPod {cached:>6} B");
}
