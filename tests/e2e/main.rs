//! End-to-end suite: the whole operator (`ralph controller`, agent Pods, the runner and
//! the scripted ACP agent) against a real cluster.
//!
//! Every test is `#[ignore]`d, so a plain `cargo nextest run` lists them as skipped (never
//! as passed); `--run-ignored all` runs them: against a real cluster when
//! `RALPH_E2E_KUBECONFIG` names a kubeconfig (cluster-admin: it installs the CRDs and creates
//! a namespace per test, always deleted afterwards), else against the in-process fake when
//! `RALPH_E2E_FAKE=1` (scripts/test does that), else they fail naming the variables.
//! `RALPH_E2E_REQUIRED=1` refuses the fake. The API server restart test needs
//! `RALPH_E2E_RESTART_APISERVER` (a shell command) on a real cluster. Agent Pods run on the
//! cluster when `RALPH_E2E_IMAGE` names an image built with `docker build --target e2e`
//! and the cluster has a schedulable node; otherwise (e.g. envtest, a control plane
//! without nodes) the kubelet stand-in runs them on this machine. `RALPH_E2E_FAKE=1`
//! (without a kubeconfig) runs the suite against the in-process fake API server instead,
//! with the stand-in. `RALPH_E2E_TIMEOUT_SECS` bounds each wait (default 300).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../support/fake_apiserver.rs"]
mod fake_apiserver;
#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../support/kubelet_standin.rs"]
mod kubelet_standin;

mod cluster;
mod controller_process;
mod harness;
mod pod_start;
mod real_pods;

use ralph::api::{AttemptOutcome, FeaturePhase};
use serde_json::json;

use harness::{E2e, attempts};

/// A Feature spec of two tasks: "design", then "build".
fn design_then_build() -> serde_json::Value {
    json!({
        "tasks": [
            { "name": "design", "description": "Design it." },
            { "name": "build", "description": "Build it.", "dependsOn": ["design"] },
        ],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn crds_install_and_a_feature_whose_dependents_come_first_is_never_invalid() {
    let mut e2e = E2e::setup("order").await;
    let phases = e2e.record_phases("order");
    let spec = json!({
        "parallelism": 2,
        "tasks": [
            { "name": "docs", "description": "Document it.", "dependsOn": ["build", "design"] },
            { "name": "build", "description": "Build it.", "dependsOn": ["design"] },
            { "name": "design", "description": "Design it." },
        ],
    });
    e2e.apply_scripted("order", "plan.script.yaml", spec).await;
    e2e.wait_for_phase("order", FeaturePhase::Complete).await;
    let seen = phases
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        !seen
            .iter()
            .any(|p| matches!(p, FeaturePhase::Invalid | FeaturePhase::NoPlan)),
        "phases seen: {seen:?}"
    );
    assert!(e2e.events_with_reason("InvalidPlan").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_new_feature_shows_pending_before_its_tasks_exist_and_judges_nothing_then() {
    let mut e2e = E2e::setup("fresh").await;
    let spec = design_then_build();
    let first = e2e
        .first_status(
            "fresh",
            e2e.apply_scripted("fresh", "plan.script.yaml", spec),
        )
        .await;
    assert_eq!(first.phase, FeaturePhase::Pending, "{first:?}");
    assert_eq!((first.counts.total, first.counts.pending), (2, 2));
    assert_eq!(first.observed_generation, None, "{first:?}");
    let progressing = ralph::api::conditions::find(&first.conditions, "Progressing");
    assert_eq!(
        progressing.map(|c| c.reason.as_str()),
        Some("CreatingTasks")
    );
    e2e.wait_for_phase("fresh", FeaturePhase::Complete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_missing_agent_image_is_a_visible_condition_and_claims_nothing() {
    let mut e2e = E2e::setup("imageless").await;
    let mut agent = e2e.scripted_agent("plan.script.yaml");
    if let Some(agent) = agent.as_object_mut() {
        agent.remove("image");
    }
    e2e.apply_one_task_feature("imageless", agent).await;
    let condition = e2e
        .wait_for_condition("imageless", "Configured", "False")
        .await;
    assert_eq!(condition.reason, "MissingAgentImage");
    fake_apiserver::assert_mentions(&condition.message, &["spec.agent.image"]);
    assert_eq!(e2e.events_with_reason("MissingAgentImage").await.len(), 1);
    assert!(e2e.lease_names().await.is_empty());
    assert!(e2e.pod_names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn the_operator_recovers_after_the_api_server_restarts() {
    let mut e2e = E2e::setup("restart").await;
    let spec = design_then_build();
    e2e.apply_scripted("restart", "plan.script.yaml", spec)
        .await;
    let tasks = e2e.tasks();
    e2e.eventually("Task restart-design to be Done", || async {
        let task = tasks.get_opt("restart-design").await.ok().flatten()?;
        (task.status?.phase == ralph::engine::dag::TaskPhase::Done).then_some(())
    })
    .await;
    e2e.restart_api_server().await;
    let feature = e2e.wait_for_phase("restart", FeaturePhase::Complete).await;
    let counts = feature.status.map(|s| s.counts).unwrap_or_default();
    assert_eq!((counts.total, counts.done), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn feature_runs_its_plan_in_dependency_order_to_complete() {
    let mut e2e = E2e::setup("plan").await;
    let spec = json!({
        "parallelism": 2,
        "tasks": [
            { "name": "design", "description": "Design it." },
            { "name": "build", "description": "Build it.", "dependsOn": ["design"] },
            { "name": "docs", "description": "Document it.", "dependsOn": ["design"] },
        ],
    });
    e2e.apply_scripted("plan", "plan.script.yaml", spec).await;

    let feature = e2e.wait_for_phase("plan", FeaturePhase::Complete).await;
    e2e.wait_for_claims_to_end(&["plan-design", "plan-build", "plan-docs"])
        .await;

    let counts = feature.status.map(|s| s.counts).unwrap_or_default();
    assert_eq!((counts.total, counts.done, counts.failed), (3, 3, 0));
    let pods = e2e.pod_names();
    assert_eq!(
        pods.first().map(String::as_str),
        Some("plan-design-a1"),
        "design runs first: {pods:?}"
    );
    for pod in ["plan-build-a1", "plan-docs-a1"] {
        assert!(pods.iter().any(|p| p == pod), "{pod} ran: {pods:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_feature_planned_from_its_spec_waits_for_approval_then_runs_its_plan() {
    let mut e2e = E2e::setup("from-spec").await;
    let spec = json!({
        "parallelism": 2,
        "context": { "spec": { "inline": "Design it, then build it." } },
        "planning": { "approval": "Manual" },
    });
    e2e.apply_scripted("spec", "from-spec.script.yaml", spec)
        .await;
    let waiting = e2e
        .wait_for_phase("spec", FeaturePhase::AwaitingApproval)
        .await;
    let planning = waiting
        .status
        .and_then(|s| s.planning)
        .expect("status.planning");
    assert_eq!(planning.tasks, 2);
    let hash = planning.dag_hash.expect("the plan's hash");
    assert!(
        !e2e.pod_names().iter().any(|p| p.starts_with("spec-design")),
        "a planned task ran before its plan was approved"
    );
    let approve = json!({ "metadata": { "annotations": { "ralph.dev/approve-plan": hash } } });
    e2e.features()
        .patch(
            "spec",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&approve),
        )
        .await
        .expect("approve the plan");

    let feature = e2e.wait_for_phase("spec", FeaturePhase::Complete).await;
    let counts = feature.status.map(|s| s.counts).unwrap_or_default();
    assert_eq!(
        (counts.total, counts.done),
        (3, 3),
        "the planning Task and 2 planned"
    );
    let design = e2e
        .tasks()
        .get("spec-design")
        .await
        .expect("planned Task spec-design");
    assert_eq!(
        kube::ResourceExt::labels(&design).get("ralph.dev/plan"),
        Some(&hash)
    );
    let pods = e2e.pod_names();
    assert_eq!(
        pods.first().map(String::as_str),
        Some("spec-planning-a1"),
        "{pods:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_planned_task_that_fails_for_good_is_re_planned_and_the_revision_completes() {
    let mut e2e = E2e::setup("replan").await;
    let spec = json!({
        "retry": { "maxRetries": 0 },
        "context": { "spec": { "inline": "Design it, then build it." } },
        "planning": { "approval": "Automatic", "replan": "OnFailure", "maxReplans": 1 },
    });
    e2e.apply_scripted("replan", "replan.script.yaml", spec)
        .await;
    let feature = e2e.wait_for_phase("replan", FeaturePhase::Complete).await;
    let planning = feature
        .status
        .as_ref()
        .and_then(|s| s.planning.clone())
        .expect("status.planning");
    assert_eq!((planning.replans, planning.attempts), (1, 2));
    let names: Vec<String> = e2e
        .tasks()
        .list(&Default::default())
        .await
        .expect("Tasks")
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .filter(|n| n.starts_with("replan-"))
        .collect();
    assert!(
        names.contains(&"replan-build-simply".to_owned())
            && !names.contains(&"replan-build".to_owned()),
        "the revision replaced build by build-simply: {names:?}"
    );
    let pods = e2e.pod_names();
    assert!(pods.iter().any(|p| p == "replan-planning-a2"), "{pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_prompt_too_large_for_a_pods_annotations_reaches_the_agent_through_a_config_map() {
    let mut e2e = E2e::setup("bigprompt").await;
    let spec = json!({
        "context": {
            "spec": { "inline": "s".repeat(200 * 1024) },
            "plan": { "inline": "p".repeat(100 * 1024) },
        },
        "tasks": [{ "name": "design", "description": "Design it." }],
    });
    e2e.apply_scripted("big", "plan.script.yaml", spec).await;
    let pods = e2e.pods();
    let mounted = e2e
        .eventually("the attempt Pod", || async {
            let pod = pods.get_opt("big-design-a1").await.ok().flatten()?;
            let volumes = pod.spec?.volumes.unwrap_or_default();
            volumes.into_iter().find(|v| v.name == "prompt")?.config_map
        })
        .await;
    assert_eq!(mounted.name, "big-design-a1-prompt");
    e2e.wait_for_phase("big", FeaturePhase::Complete).await;
    e2e.wait_for_claims_to_end(&["big-design"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn crashed_attempt_is_retried_and_the_retry_completes() {
    let mut e2e = E2e::setup("retry").await;
    let spec = json!({
        "retry": { "maxRetries": 2, "backoffBaseSeconds": 1, "backoffMaxSeconds": 2 },
        "tasks": [{ "name": "flaky", "description": "Sometimes crashes." }],
    });
    e2e.apply_scripted("retry", "retry.script.yaml", spec).await;

    e2e.wait_for_phase("retry", FeaturePhase::Complete).await;
    e2e.wait_for_claims_to_end(&["retry-flaky"]).await;

    let task = e2e
        .tasks()
        .get("retry-flaky")
        .await
        .expect("Task retry-flaky");
    let status = task.status.clone().unwrap_or_default();
    assert_eq!((status.attempt_count, status.retry_count), (2, 1));
    assert_eq!(
        attempts(&task),
        [
            (1, Some(AttemptOutcome::Crashed)),
            (2, Some(AttemptOutcome::Done))
        ]
    );
    let pods = e2e.pod_names();
    assert!(
        pods.iter().any(|p| p == "retry-flaky-a2"),
        "the retry ran in its own Pod: {pods:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn suspend_interrupts_the_running_attempt_and_resume_completes() {
    let mut e2e = E2e::setup("suspend").await;
    let spec = json!({
        "tasks": [{ "name": "slow", "description": "Takes its time." }],
    });
    e2e.apply_scripted("pause", "suspend.script.yaml", spec)
        .await;
    let pods = e2e.pods();
    e2e.eventually("pod pause-slow-a1 to run", || async {
        let pod = pods.get_opt("pause-slow-a1").await.ok().flatten()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    e2e.patch_feature_spec("pause", json!({ "suspend": true }))
        .await;
    e2e.wait_for_phase("pause", FeaturePhase::Suspended).await;
    e2e.eventually("pod pause-slow-a1 to be gone", || async {
        pods.get_opt("pause-slow-a1")
            .await
            .ok()
            .map(|p| p.is_none())
            .filter(|gone| *gone)
    })
    .await;
    let tasks = e2e.tasks();
    let interrupted = e2e
        .eventually("attempt 1 to be recorded", || async {
            let task = tasks.get_opt("pause-slow").await.ok().flatten()?;
            attempts(&task).first().and_then(|(_, outcome)| *outcome)
        })
        .await;
    assert_eq!(interrupted, AttemptOutcome::Interrupted);
    assert!(
        !e2e.pod_names().iter().any(|p| p == "pause-slow-a2"),
        "no attempt starts while suspended: {:?}",
        e2e.pod_names()
    );

    e2e.patch_feature_spec("pause", json!({ "suspend": false }))
        .await;
    e2e.wait_for_phase("pause", FeaturePhase::Complete).await;
    let status = tasks
        .get("pause-slow")
        .await
        .expect("Task")
        .status
        .unwrap_or_default();
    assert_eq!(status.retry_count, 0, "an interruption is not a retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn a_spent_cost_budget_stops_the_feature_with_its_totals() {
    let mut e2e = E2e::setup("budget").await;
    let spec = json!({
        "budget": { "maxCostUSD": "0.50" },
        "tasks": [
            { "name": "one", "description": "First." },
            { "name": "two", "description": "Second.", "dependsOn": ["one"] },
            { "name": "three", "description": "Third.", "dependsOn": ["two"] },
        ],
    });
    e2e.apply_scripted("budget", "budget.script.yaml", spec)
        .await;

    let feature = e2e
        .wait_for_phase("budget", FeaturePhase::LimitReached)
        .await;

    let status = feature.status.unwrap_or_default();
    assert_eq!((status.counts.done, status.counts.pending), (2, 1));
    assert_eq!(status.usage.cost_text(), "$0.60");
    assert_eq!(status.usage.tokens(), 240);
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with("the cost budget is spent: $0.60 reported of maxCostUSD $0.50"),
        "{message}"
    );
    let pods = e2e.pod_names();
    assert!(
        !pods.iter().any(|p| p.starts_with("budget-three")),
        "no attempt starts once the budget is spent: {pods:?}"
    );
}

/// The Secret references of container `name` of `pod` (`NAME/KEY` of its env, `NAME` of its
/// envFrom).
fn secret_references(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> Vec<String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let container = spec
        .containers
        .into_iter()
        .chain(spec.init_containers.unwrap_or_default())
        .find(|container| container.name == name)
        .unwrap_or_else(|| panic!("the agent Pod has a container {name}"));
    let from_env = container
        .env
        .unwrap_or_default()
        .into_iter()
        .filter_map(|var| {
            let key = var.value_from?.secret_key_ref?;
            Some(format!("{}/{}", key.name, key.key))
        });
    let from_sources = container
        .env_from
        .unwrap_or_default()
        .into_iter()
        .filter_map(|source| source.secret_ref.map(|secret| secret.name));
    from_env.chain(from_sources).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn only_the_sidecar_of_an_agent_pod_refers_to_the_model_key() {
    let mut e2e = E2e::setup("gateway").await;
    create_model_secret(&e2e, "anthropic", "sk-ant-e2e").await;
    e2e.apply_one_task_feature("gateway", claude_behind_gateway(&e2e))
        .await;
    let pods = e2e.pods();
    let pod = e2e
        .eventually("the agent Pod", || async {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items.into_iter().next()
        })
        .await;

    assert!(secret_references(&pod, "agent").is_empty());
    assert_eq!(
        secret_references(&pod, "claim-keeper"),
        ["models/anthropic"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "e2e: needs RALPH_E2E_KUBECONFIG or RALPH_E2E_FAKE=1 (run with --run-ignored all)"]
async fn an_empty_model_key_is_a_configuration_problem_before_any_claim() {
    let mut e2e = E2e::setup("gateway-empty").await;
    create_model_secret(&e2e, "anthropic", "").await;
    e2e.apply_one_task_feature("gateway-empty", claude_behind_gateway(&e2e))
        .await;

    let condition = e2e
        .wait_for_condition("gateway-empty", "Configured", "False")
        .await;

    assert_eq!(condition.reason, "GatewayCredentialsMissing");
    fake_apiserver::assert_mentions(&condition.message, &["models", "`anthropic`", "empty"]);
    assert!(e2e.lease_names().await.is_empty());
    assert!(e2e.pod_names().is_empty());
}

/// A claude-agent-acp agent whose gateway reads Secret `models` key `anthropic`.
fn claude_behind_gateway(e2e: &E2e) -> serde_json::Value {
    let mut agent = e2e.scripted_agent("plan.script.yaml");
    agent["command"] = json!(["claude-agent-acp"]);
    agent["gateway"] =
        json!({ "credential": { "secretKeyRef": { "name": "models", "key": "anthropic" } } });
    agent
}

/// Creates Secret `models` holding `key`: `value` in the test's namespace.
async fn create_model_secret(e2e: &E2e, key: &str, value: &str) {
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("models".to_owned()),
            ..Default::default()
        },
        string_data: Some([(key.to_owned(), value.to_owned())].into()),
        ..Default::default()
    };
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(e2e.client.clone(), &e2e.namespace);
    secrets
        .create(&Default::default(), &secret)
        .await
        .expect("create the model Secret");
}
