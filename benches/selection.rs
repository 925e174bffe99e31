//! Figures of the pool and model selection, printed, not asserted: the Feature reconcile's
//! pure decision (`controller::plan::decide::plan`) for a 200-task Feature with one agent and no
//! models, and with a pool of 9 agents (the first 8 resting), an escalating model list and
//! 10 recorded attempts per task; and one `engine::selection::select` call.
//!
//! `cargo bench --bench selection` (release), or `--profile dev` for a quicker build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ralph::api::{Feature, desired_tasks};
use ralph::controller::plan::cached::CachedTask;
use ralph::controller::plan::decide::{Snapshot, plan};
use ralph::engine::conclusion::AgentRest;
use ralph::engine::selection::Rests;

const TASKS: usize = 200;
const ROUNDS: u32 = 50;
const NOW: i64 = 1_800_000_000_000;

fn feature(pooled: bool) -> Feature {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| serde_json::json!({"name": format!("t{i}")}))
        .collect();
    let mut spec = serde_json::json!({
        "agent": {"image": "agent:bench", "command": ["agent"]},
        "parallelism": 100,
        "tasks": tasks
    });
    if pooled {
        spec["fallbackAgents"] = (1..9)
            .map(|i| {
                serde_json::json!({"name": format!("key-{i}"), "image": "agent:bench",
                    "command": ["agent"], "envFrom": [{"secretRef": {"name": format!("key-{i}")}}]})
            })
            .collect();
        spec["model"] =
            serde_json::json!({"strategy": "escalate", "models": ["small", "medium", "large"]});
    }
    let mut feature: Feature = serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": "bench", "namespace": "ns", "uid": "uid-1", "generation": 1},
        "spec": spec
    }))
    .unwrap_or_else(|error| panic!("bench feature: {error}"));
    feature.metadata.uid = Some("uid-1".into());
    feature
}

fn tasks(feature: &Feature, history: bool) -> Vec<Arc<CachedTask>> {
    desired_tasks(feature)
        .unwrap_or_else(|error| panic!("{error}"))
        .into_iter()
        .map(|mut task| {
            task.metadata.generation = Some(1);
            if history {
                let attempts: Vec<_> = (1..=10)
                    .map(|n| serde_json::json!({"number": n, "outcome": "failed", "requestedModel": "small"}))
                    .collect();
                task.status = serde_json::from_value(serde_json::json!({
                    "phase": "Pending", "attemptCount": 10, "retryCount": 1, "attempts": attempts
                }))
                .ok();
            }
            Arc::new(task.into())
        })
        .collect()
}

fn measure(name: &str, feature: &Feature, tasks: &[Arc<CachedTask>], rests: &Rests) {
    let leases = BTreeMap::new();
    let pods = BTreeMap::new();
    let snapshot = Snapshot {
        feature,
        tasks,
        leases: &leases,
        pods: &pods,
        now_ms: NOW,
        start_limit: usize::MAX,
        rests,
        planning_only: None,
        plan_waits: None,
    };
    let started = Instant::now();
    let mut claimed = 0;
    for _ in 0..ROUNDS {
        claimed = plan(&snapshot)
            .tasks
            .iter()
            .filter(|t| t.selection.is_some())
            .count();
    }
    let per_plan = started.elapsed() / ROUNDS;
    println!(
        "{name}: decide::plan of {TASKS} tasks ({claimed} selected): {per_plan:?} per reconcile"
    );
}

fn main() {
    let plain = feature(false);
    measure(
        "one agent, no models",
        &plain,
        &tasks(&plain, false),
        &Rests::new(),
    );
    let pooled = feature(true);
    let rests: Rests = pooled
        .spec
        .pool()
        .iter()
        .take(8)
        .map(|(_, agent)| {
            (
                agent.identity(),
                AgentRest {
                    until_ms: NOW + 60_000,
                    message: "usage limit".into(),
                },
            )
        })
        .collect();
    measure(
        "pool of 9 (8 resting), escalate over 3 models, 10 attempts each",
        &pooled,
        &tasks(&pooled, true),
        &rests,
    );
}
