//! Models and agent pools on a cluster (the controller against the fake API server, the
//! test standing in for the kubelet): the model strategy and the agent's `<next-model>`
//! pick each attempt's `--model`, an exhausted agent hands its tasks to the next agent of
//! the pool, and its rest is shared by every Feature of the namespace using the same agent,
//! also after a controller restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::harness;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use ralph::api::AttemptOutcome;

use serde_json::json;

use harness::{Harness, assert_mentions, one_task, runner_arg};

/// The spec fields choosing each attempt's model by `strategy` among `models`.
fn models(strategy: &str, models: &[&str]) -> serde_json::Value {
    json!({"model": {"strategy": strategy, "models": models}})
}

fn agent_image(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "agent")?
        .image
        .clone()
}

/// Kubelet stand-in: the runner reported the agent out of quota until `reset_at` (Unix s).
async fn exhaust(h: &Harness, pod: &Pod, reset_at: i64) {
    let name = pod.name_any();
    let result = json!({
        "version": 1,
        "task": runner_arg(pod, "--task").expect("runner --task"),
        "attempt": name,
        "outcome": "exhausted",
        "exitCode": 4,
        "exhaustion": {"message": "You've hit your usage limit", "resetAt": reset_at},
        "timings": {"startedAtMs": 0, "endedAtMs": jiff::Timestamp::now().as_millisecond()}
    });
    h.terminate_agent(&name, 4, "Error", Some(result.to_string()))
        .await;
}

fn in_an_hour() -> i64 {
    jiff::Timestamp::now().as_second() + 3600
}

#[tokio::test]
async fn escalation_gives_the_attempt_after_a_failure_the_next_model_and_records_both() {
    let h =
        Harness::with_feature("esc", one_task(), models("escalate", &["haiku", "sonnet"])).await;
    let first = h.wait_for_pod("esc-a-a1").await;
    assert_eq!(runner_arg(&first, "--model").as_deref(), Some("haiku"));
    h.finish_attempt(&first, json!({"taskFailed": "a"})).await;

    let second = h.wait_for_pod("esc-a-a2").await;
    assert_eq!(runner_arg(&second, "--model").as_deref(), Some("sonnet"));
    let status = h.tasks().get("esc-a").await.expect("task").status;
    let attempts = status.expect("status").attempts;
    let recorded: Vec<_> = attempts
        .iter()
        .map(|a| (a.pool_agent.as_deref(), a.ran_by.requested_model.as_deref()))
        .collect();
    assert_eq!(
        recorded,
        [
            (Some("primary"), Some("haiku")),
            (Some("primary"), Some("sonnet"))
        ]
    );
    h.stop().await;
}

#[tokio::test]
async fn the_agents_next_model_is_honoured_when_the_feature_lists_it() {
    let h = Harness::with_feature("hint", one_task(), models("fixed", &["haiku", "opus"])).await;
    let first = h.wait_for_pod("hint-a-a1").await;
    h.finish_attempt(&first, json!({"nextModel": "opus"})).await;
    let second = h.wait_for_pod("hint-a-a2").await;
    assert_eq!(runner_arg(&second, "--model").as_deref(), Some("opus"));
    h.stop().await;
}

#[tokio::test]
async fn a_next_model_the_feature_does_not_list_is_refused_with_a_warning_event() {
    let h = Harness::with_feature("refuse", one_task(), models("fixed", &["haiku"])).await;
    let first = h.wait_for_pod("refuse-a-a1").await;
    h.finish_attempt(&first, json!({"nextModel": "gpt-9"}))
        .await;
    let second = h.wait_for_pod("refuse-a-a2").await;
    assert_eq!(runner_arg(&second, "--model").as_deref(), Some("haiku"));
    let warnings = h
        .eventually("a ModelHintRefused event", || async {
            let events = h.events_with_reason("ModelHintRefused").await;
            (!events.is_empty()).then_some(events)
        })
        .await;
    let note = warnings[0].note.clone().unwrap_or_default();
    assert_mentions(&note, &["\"gpt-9\"", "spec.models"]);
    h.stop().await;
}

#[tokio::test]
async fn an_exhausted_agent_hands_the_task_to_the_next_agent_of_the_pool() {
    let h = Harness::with_feature("pool", one_task(), json!({"fallbackAgents": [ {"name": "spare", "image": "agent:spare", "command": ["scripted-agent"]} ]})).await;
    let first = h.wait_for_pod("pool-a-a1").await;
    assert_eq!(agent_image(&first).as_deref(), Some("agent:test"));
    exhaust(&h, &first, in_an_hour()).await;

    let second = h.wait_for_pod("pool-a-a2").await;
    assert_eq!(agent_image(&second).as_deref(), Some("agent:spare"));
    let task = h.tasks().get("pool-a").await.expect("task");
    let attempts = task.status.expect("status").attempts;
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Exhausted));
    assert_eq!(attempts[1].pool_agent.as_deref(), Some("spare"));
    h.finish_done_to_complete(&second, "pool").await;
    h.stop().await;
}

#[tokio::test]
async fn an_exhausted_agent_rests_for_every_feature_using_it_also_after_a_restart() {
    let mut h = Harness::with_feature("first", one_task(), json!({})).await;
    let pod = h.wait_for_pod("first-a-a1").await;
    exhaust(&h, &pod, in_an_hour()).await;
    h.wait_for_feature_condition("first", "AgentsAvailable", "PoolExhausted")
        .await;
    let stored = h.config_map("ralph-agent-rests").await;
    assert_eq!(stored.data.map(|d| d.len()), Some(1));

    h.restart_controller().await;
    h.create("second", one_task(), json!({})).await;
    let condition = h
        .wait_for_feature_condition("second", "AgentsAvailable", "PoolExhausted")
        .await;
    assert_mentions(&condition.message, &["primary until"]);
    let pods: Vec<String> = h.agent_pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(pods, ["first-a-a1"]);
    h.stop().await;
}

#[tokio::test]
async fn a_fallback_agent_without_an_image_is_a_configuration_problem_naming_it() {
    let h = Harness::with_feature(
        "noimage",
        one_task(),
        json!({"fallbackAgents": [{"name": "spare", "command": ["scripted-agent"]}]}),
    )
    .await;
    let condition = h
        .wait_for_feature_condition("noimage", "Configured", "MissingAgentImage")
        .await;
    assert!(
        condition
            .message
            .contains("spec.fallbackAgents[spare].image is required"),
        "{}",
        condition.message
    );
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}
