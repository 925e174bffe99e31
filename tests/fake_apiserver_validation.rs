//! The fake API server refuses what a real one refuses: CRDs whose rules are over the cost
//! budget, and custom objects (status writes included) that break their CRD's schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_apiserver;

use fake_apiserver::{assert_mentions, refusal, server};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ralph::api::{Feature, Task};
use serde_json::{Value, json};

fn causes(status: &kube::core::Status) -> Vec<(String, String, String)> {
    status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
        .collect()
}

/// A namespaced CRD for `{plural}.example.com` of kind `kind`, its one version `v1` as
/// `version` describes it (schema, subresources) beyond its name and flags.
fn example_crd(plural: &str, kind: &str, mut version: Value) -> CustomResourceDefinition {
    version["name"] = json!("v1");
    version["served"] = json!(true);
    version["storage"] = json!(true);
    let singular = kind.to_lowercase();
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": singular, "kind": kind},
            "versions": [version]
        }
    }))
    .expect("valid CRD")
}

/// A CRD for `widgets.example.com` whose `spec.items` (of `max_items` strings) carries `rule`.
fn widget_crd(max_items: u64, rule: &str) -> CustomResourceDefinition {
    let version = json!({
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": {
                "type": "array",
                "maxItems": max_items,
                "items": {"type": "string", "maxLength": 253},
                "x-kubernetes-validations": [{"rule": rule}]
            }}}
        }}}
    });
    example_crd("widgets", "Widget", version)
}

#[tokio::test]
async fn a_crd_with_a_quadratic_rule_over_1000_items_is_refused_like_a_real_server() {
    let server = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let crd = widget_crd(1000, "self.all(d, self.exists_one(e, e == d))");
    let status = refusal(crds.create(&PostParams::default(), &crd).await);
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of"
        ),
        "{}",
        status.message
    );
    assert_eq!(causes(&status)[0].0, "FieldValueForbidden");
}

#[tokio::test]
async fn a_crd_with_a_linear_rule_is_accepted() {
    let server = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let crd = widget_crd(1000, "self.all(d, d.size() > 0)");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("accepted");
}

#[tokio::test]
async fn ralphs_crds_install() {
    let server = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    for crd in ralph::api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD installs");
    }
}

fn features(client: &Client) -> Api<Feature> {
    Api::default_namespaced(client.clone())
}

fn tasks(client: &Client) -> Api<Task> {
    Api::default_namespaced(client.clone())
}

fn feature(name: &str, tasks: Value) -> Feature {
    serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": name},
        "spec": {"agent": {"command": ["claude-agent-acp"]}, "tasks": tasks}
    }))
    .expect("valid Feature")
}

fn task(name: &str, spec: Value) -> Task {
    serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("valid Task")
}

#[tokio::test]
async fn a_feature_with_two_tasks_of_one_name_is_refused_as_a_duplicate_map_key() {
    let server = server().await;
    let tasks = json!([{"name": "a"}, {"name": "a"}]);
    let status = refusal(
        features(&server.client())
            .create(&PostParams::default(), &feature("f", tasks))
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        causes(&status),
        [(
            "FieldValueDuplicate".into(),
            "spec.tasks[1]".into(),
            r#"Duplicate value: {"name":"a"}"#.into()
        )]
    );
}

#[tokio::test]
async fn a_dependency_named_twice_is_refused_as_a_duplicate_set_entry() {
    let server = server().await;
    let spec = json!({"featureRef": "f", "dependsOn": ["b", "b"]});
    let status = refusal(
        tasks(&server.client())
            .create(&PostParams::default(), &task("a", spec))
            .await,
    );
    assert_eq!(
        causes(&status),
        [(
            "FieldValueDuplicate".into(),
            "spec.dependsOn[1]".into(),
            r#"Duplicate value: "b""#.into()
        )]
    );
}

#[tokio::test]
async fn a_task_that_depends_on_itself_is_refused_by_its_rule() {
    let server = server().await;
    let spec = json!({"featureRef": "f", "dependsOn": ["a"]});
    let status = refusal(
        tasks(&server.client())
            .create(&PostParams::default(), &task("a", spec))
            .await,
    );
    assert_mentions(&status.message, &["a task must not depend on itself"]);
}

#[tokio::test]
async fn a_field_over_its_bound_is_refused_with_every_cause() {
    let server = server().await;
    let mut bad = feature("f", json!([{"name": "a", "title": "t".repeat(300)}]));
    bad.spec.parallelism = 0;
    let status = refusal(
        features(&server.client())
            .create(&PostParams::default(), &bad)
            .await,
    );
    let mut fields: Vec<String> = causes(&status).into_iter().map(|c| c.1).collect();
    fields.sort();
    assert_eq!(fields, ["spec.parallelism", "spec.tasks[0].title"]);
    assert!(
        status
            .message
            .starts_with("Feature.ralph.dev \"f\" is invalid: [")
    );
}

fn with_budget(budget: Value) -> Feature {
    let mut f = feature("f", json!([{"name": "a"}]));
    f.spec.budget = serde_json::from_value(budget).expect("budget");
    f
}

async fn budget_refusal(budget: Value) -> String {
    let server = server().await;
    let status = refusal(
        features(&server.client())
            .create(&PostParams::default(), &with_budget(budget))
            .await,
    );
    assert_eq!(status.code, 422);
    status.message
}

#[tokio::test]
async fn a_zero_cost_budget_is_refused_with_the_rules_message() {
    let message = budget_refusal(json!({"maxCostUSD": "0.00"})).await;
    assert!(
        message.contains(ralph::api::budget::MAX_COST_USD_RULE_MESSAGE),
        "{message}"
    );
}

#[tokio::test]
async fn a_cost_with_more_than_six_decimals_is_refused() {
    let message = budget_refusal(json!({"maxCostUSD": "1.0000001"})).await;
    assert!(message.contains("spec.budget.maxCostUSD"), "{message}");
}

#[tokio::test]
async fn an_empty_budget_is_refused() {
    let message = budget_refusal(json!({})).await;
    assert!(
        message.contains(ralph::api::budget::EMPTY_BUDGET_MESSAGE),
        "{message}"
    );
}

#[tokio::test]
async fn a_budget_with_a_decimal_cost_and_tokens_is_accepted() {
    let server = server().await;
    features(&server.client())
        .create(
            &PostParams::default(),
            &with_budget(json!({"maxCostUSD": "12.50", "maxTokens": 100000})),
        )
        .await
        .expect("accepted");
}

/// Creates `feature` (named `f`) on a fresh server, then merge-patches its status with
/// `patch`; returns what the server answered to the status write.
async fn write_status(feature: Feature, patch: Value) -> kube::Result<Feature> {
    let server = server().await;
    let api = features(&server.client());
    api.create(&PostParams::default(), &feature)
        .await
        .expect("created");
    api.patch_status("f", &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[tokio::test]
async fn a_status_with_a_decimal_cost_and_unknown_attempts_is_accepted() {
    let patch = json!({"status": {"usage": {"inputTokens": 5, "costUSD": "0.042", "attemptsWithUnknownCost": 2}}});
    let written = write_status(with_budget(json!({"maxTokens": 10})), patch)
        .await
        .expect("accepted");
    let usage = written.status.map(|s| s.usage).unwrap_or_default();
    assert_eq!(usage.cost_text(), "$0.042 + unknown (2 attempts)");
}

#[tokio::test]
async fn a_status_write_that_breaks_the_schema_is_refused() {
    let patch = json!({"status": {"phase": "Bogus"}});
    let status = refusal(write_status(feature("f", json!([{"name": "a"}])), patch).await);
    assert_eq!(causes(&status)[0].1, "status.phase");
    assert_eq!(causes(&status)[0].0, "FieldValueNotSupported");
}

#[tokio::test]
async fn a_valid_status_write_of_a_200_task_feature_is_accepted() {
    let templates: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("t{i}"), "dependsOn": if i > 0 { vec![format!("t{}", i - 1)] } else { vec![] }}))
        .collect();
    let patch = json!({"status": {"phase": "Running", "counts": {"total": 200}}});
    write_status(feature("f", json!(templates)), patch)
        .await
        .expect("status written");
}

/// A `gadgets.example.com` CRD with a status subresource and a root rule that reads both
/// the spec and the status.
fn gadget_crd() -> CustomResourceDefinition {
    let version = json!({
        "subresources": {"status": {}},
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "x-kubernetes-validations": [{
                "rule": "!has(self.status) || self.spec.slots >= self.status.used",
                "message": "status.used must not exceed spec.slots"
            }],
            "properties": {
                "spec": {"type": "object", "properties": {"slots": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"used": {"type": "integer"}}}
            }
        }}
    });
    example_crd("gadgets", "Gadget", version)
}

#[tokio::test]
async fn a_status_write_re_runs_the_rules_that_read_the_spec() {
    let server = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    crds.create(&PostParams::default(), &gadget_crd())
        .await
        .expect("CRD installs");
    let resource = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<kube::api::DynamicObject> =
        Api::namespaced_with(server.client(), "default", &resource);
    let gadget: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"slots": 1}
    }))
    .expect("valid gadget");
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .expect("created");
    let within = json!({"status": {"used": 1}});
    gadgets
        .patch_status("g", &PatchParams::default(), &Patch::Merge(&within))
        .await
        .expect("a status within the spec's bound is accepted");
    let beyond = json!({"status": {"used": 2}});
    let status = refusal(
        gadgets
            .patch_status("g", &PatchParams::default(), &Patch::Merge(&beyond))
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("status.used must not exceed spec.slots"),
        "{}",
        status.message
    );
}
