//! Budgets on a cluster: the controller against the fake API server, each attempt's result
//! produced by the real runner on the scripted agent (scripted to report tokens and cost)
//! and written as the agent container's termination message.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{harness, scripted};

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use ralph::api::{Feature, FeaturePhase};
use ralph::controller::plan::budget::{COST_REPORTED, REASON_COST_UNKNOWN};

use serde_json::json;

use harness::{Harness, a_then_b, one_task, runner_arg};
use scripted::Scenario;

/// A scripted attempt that reports `input` + `output` tokens (and `cost` dollars when
/// given), then says the task is done.
fn done_after(input: u64, output: u64, cost: Option<f64>) -> String {
    let cost = cost.map_or(String::new(), |c| format!(", cost_usd: {c}"));
    format!(
        "default: [{{usage: {{input_tokens: {input}, output_tokens: {output}{cost}}}}}, \
         {{text: \"<task-done>{{task}}</task-done>\"}}]\n"
    )
}

/// Kubelet stand-in: runs the real runner on the scripted agent for `pod`'s task and
/// attempt, and ends the agent container with its result.
async fn run_scripted(h: &Harness, pod: &Pod, script: &str) {
    let task = runner_arg(pod, "--task").expect("runner --task");
    let attempt = pod.name_any();
    let scenario = Scenario::new(&task, script).attempt(&attempt);
    let run = tokio::task::spawn_blocking(move || scenario.run())
        .await
        .expect("runner thread");
    h.terminate_agent(&attempt, 0, "Completed", Some(run.result_json))
        .await;
}

/// Three independent tasks, one at a time unless `parallelism` says otherwise.
fn three_tasks() -> serde_json::Value {
    json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])
}

/// Starts the controller with the Feature `name` of `tasks`, at most `parallelism` at a
/// time, within `budget`.
async fn budgeted(
    name: &str,
    tasks: serde_json::Value,
    parallelism: u32,
    budget: serde_json::Value,
) -> Harness {
    let h = Harness::start().await;
    let spec = json!({"parallelism": parallelism, "budget": budget});
    h.create(name, tasks, spec).await;
    h
}

/// Finishes each agent Pod as it appears with `script` until the Feature is in `phase`;
/// returns the Pods finished.
async fn run_until(h: &Harness, feature: &str, script: &str, phase: FeaturePhase) -> Vec<String> {
    let mut finished: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + harness::PATIENCE;
    loop {
        for pod in h.agent_pods().await {
            if !finished.contains(&pod.name_any()) {
                finished.push(pod.name_any());
                run_scripted(h, &pod, script).await;
            }
        }
        let now = feature_now(h, feature).await;
        if now.status.as_ref().map(|s| s.phase) == Some(phase) {
            return finished;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "feature {feature} never reached {phase:?}; finished {finished:?}; status {:?}",
            now.status
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn feature_now(h: &Harness, name: &str) -> Feature {
    h.features().get(name).await.expect("feature")
}

async fn message(h: &Harness, name: &str) -> String {
    feature_now(h, name)
        .await
        .status
        .and_then(|s| s.message)
        .unwrap_or_default()
}

#[tokio::test]
async fn a_spent_token_budget_starts_no_new_attempt_and_ends_the_feature_limit_reached() {
    let h = budgeted("tokens", three_tasks(), 1, json!({"maxTokens": 150})).await;

    let script = done_after(100, 20, None);
    let finished = run_until(&h, "tokens", &script, FeaturePhase::LimitReached).await;

    assert_eq!(finished, ["tokens-a-a1", "tokens-b-a1"]);
    let status = feature_now(&h, "tokens").await.status.expect("status");
    assert_eq!((status.counts.done, status.counts.pending), (2, 1));
    assert_eq!(status.usage.tokens(), 240);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "the token budget is spent: 240 tokens reported of maxTokens 150; no new attempt \
             starts; 2 of 3 tasks done"
        )
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        h.agent_pods().await.len(),
        2,
        "no attempt starts after the stop"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_spent_cost_budget_ends_the_feature_with_the_exact_reported_cost() {
    let h = budgeted("dollars", three_tasks(), 1, json!({"maxCostUSD": "0.50"})).await;

    let script = done_after(10, 10, Some(0.3));
    let finished = run_until(&h, "dollars", &script, FeaturePhase::LimitReached).await;

    assert_eq!(finished.len(), 2, "{finished:?}");
    let feature = feature_now(&h, "dollars").await;
    let status = feature.status.expect("status");
    assert_eq!(status.usage.cost_text(), "$0.60");
    assert!(
        message(&h, "dollars")
            .await
            .starts_with("the cost budget is spent: $0.60 reported of maxCostUSD $0.50"),
    );
    assert_eq!(h.task_status("dollars-a").await.usage.cost_text(), "$0.30");
    h.stop().await;
}

#[tokio::test]
async fn attempts_running_when_the_budget_is_spent_finish_and_are_counted() {
    let h = budgeted("overshoot", three_tasks(), 2, json!({"maxTokens": 100})).await;
    let first = h.wait_for_pod("overshoot-a-a1").await;
    let second = h.wait_for_pod("overshoot-b-a1").await;

    run_scripted(&h, &first, &done_after(100, 20, None)).await;
    h.eventually("the running attempt is waited for", || async {
        message(&h, "overshoot")
            .await
            .ends_with("waiting for 1 running attempt to finish")
            .then_some(())
    })
    .await;
    assert_eq!(
        feature_now(&h, "overshoot").await.status.map(|s| s.phase),
        Some(FeaturePhase::Running)
    );
    run_scripted(&h, &second, &done_after(30, 5, None)).await;
    let feature = h.wait_for_feature_phase("overshoot", "LimitReached").await;

    let status = feature.status.expect("status");
    assert_eq!(status.usage.tokens(), 155, "the running attempt is counted");
    assert_eq!(status.counts.done, 2);
    let pods: Vec<String> = h.agent_pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(pods, ["overshoot-a-a1", "overshoot-b-a1"]);
    h.stop().await;
}

#[tokio::test]
async fn a_cost_the_agent_does_not_report_is_shown_unknown_with_a_warning() {
    let h = budgeted("codexish", one_task(), 1, json!({"maxCostUSD": "1.00"})).await;

    let script = done_after(100, 20, None);
    run_until(&h, "codexish", &script, FeaturePhase::Complete).await;

    let status = feature_now(&h, "codexish").await.status.expect("status");
    assert_eq!(status.usage.cost_usd, None);
    assert_eq!(status.usage.attempts_with_unknown_cost, 1);
    let condition = ralph::api::conditions::find(&status.conditions, COST_REPORTED)
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(
        condition,
        Some(("False".to_owned(), REASON_COST_UNKNOWN.to_owned()))
    );
    let warnings = h.events_with_reason(REASON_COST_UNKNOWN).await;
    assert_eq!(
        warnings.len(),
        1,
        "one Warning when the cost becomes unknown"
    );
    let json = serde_json::to_value(&status.usage).expect("json");
    assert!(json.get("costUSD").is_none(), "unknown is not 0: {json}");
    h.stop().await;
}

#[tokio::test]
async fn totals_survive_a_controller_restart_without_counting_twice() {
    let mut h = budgeted("restart", a_then_b(), 1, json!({"maxTokens": 100000})).await;
    let first = h.wait_for_pod("restart-a-a1").await;
    run_scripted(&h, &first, &done_after(100, 20, Some(0.25))).await;
    h.wait_for_pod("restart-b-a1").await;

    h.restart_controller().await;
    h.restart_controller().await;
    let second = h.wait_for_pod("restart-b-a1").await;
    run_scripted(&h, &second, &done_after(10, 5, Some(0.05))).await;
    let feature = h.wait_for_feature_phase("restart", "Complete").await;

    let usage = feature.status.expect("status").usage;
    assert_eq!(
        (usage.tokens(), usage.cost_text()),
        (135, "$0.30".to_owned())
    );
    assert_eq!(h.task_status("restart-a").await.usage.tokens(), 120);
    h.stop().await;
}

#[tokio::test]
async fn raising_a_spent_budget_lets_the_feature_go_on() {
    let h = budgeted(
        "raise",
        json!([{"name": "a"}, {"name": "b"}]),
        1,
        json!({"maxTokens": 100}),
    )
    .await;
    let script = done_after(100, 20, None);
    run_until(&h, "raise", &script, FeaturePhase::LimitReached).await;

    h.patch_feature_spec("raise", json!({"budget": {"maxTokens": 1000}}))
        .await;
    let finished = run_until(&h, "raise", &script, FeaturePhase::Complete).await;

    assert_eq!(finished, ["raise-a-a1", "raise-b-a1"]);
    let usage = feature_now(&h, "raise").await.status.expect("status").usage;
    assert_eq!(usage.tokens(), 240);
    h.stop().await;
}
