//! The Feature CRD's pool and model fields refuse bad input with a clear message, as a real
//! API server does (the fake API server applies the generated CRD's schema and rules).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_apiserver;

use fake_apiserver::{assert_mentions, refusal, server};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use ralph::api::Feature;
use serde_json::{Value, json};

async fn create(spec_extra: Value) -> Result<DynamicObject, kube::Error> {
    let server = server().await;
    let mut spec = json!({"agent": {"command": ["claude-agent-acp"]}, "tasks": [{"name": "a"}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    // Sent as plain JSON: the typed Feature could not even hold some of the bad values.
    let feature: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": "f"},
        "spec": spec
    }))
    .expect("a Feature object");
    let client: Client = server.client();
    let features: Api<DynamicObject> =
        Api::default_namespaced_with(client, &ApiResource::erase::<Feature>(&()));
    features.create(&PostParams::default(), &feature).await
}

#[tokio::test]
async fn a_pool_with_fallback_agents_and_a_model_policy_is_accepted() {
    let created = create(json!({
        "fallbackAgents": [{"name": "second-key", "command": ["claude-agent-acp"]}],
        "model": {"strategy": "escalate", "models": ["haiku", "sonnet", "opus"]}
    }))
    .await;
    assert!(created.is_ok(), "{created:?}");
}

#[tokio::test]
async fn a_fallback_agent_named_primary_is_refused_by_its_rule() {
    let status = refusal(
        create(json!({"fallbackAgents": [{"name": "primary", "command": ["codex-acp"]}]})).await,
    );
    assert!(
        status
            .message
            .contains("the pool name primary is spec.agent's"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn two_fallback_agents_of_one_name_are_refused_as_duplicates() {
    let status = refusal(
        create(json!({"fallbackAgents": [
            {"name": "spare", "command": ["codex-acp"]},
            {"name": "spare", "command": ["gemini", "--acp"]}
        ]}))
        .await,
    );
    assert_mentions(
        &status.message,
        &["spec.fallbackAgents[1]", "Duplicate value"],
    );
}

#[tokio::test]
async fn a_model_listed_twice_is_refused_as_a_duplicate() {
    let status =
        refusal(create(json!({"model": {"strategy": "fixed", "models": ["opus", "opus"]}})).await);
    assert_mentions(&status.message, &["spec.model.models[1]"]);
}

#[tokio::test]
async fn a_model_policy_without_models_is_refused() {
    let status = refusal(create(json!({"model": {"strategy": "escalate", "models": []}})).await);
    assert_mentions(&status.message, &["spec.model.models"]);
}

#[tokio::test]
async fn an_unknown_model_strategy_is_refused_naming_the_known_ones() {
    let status =
        refusal(create(json!({"model": {"strategy": "cheapest", "models": ["haiku"]}})).await);
    assert_mentions(&status.message, &["spec.model.strategy", "escalate"]);
}
