//! Fixtures for the controller's unit tests.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec, Volume};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::AgentSpec;
use crate::api::agent::{ClientFs, Confinement};
use crate::controller::plan::decide::FeaturePlan;
use crate::controller::plan::pod::{PodSettings, SidecarMode};
use crate::controller::plan::problem::Problem;
use crate::engine::lifecycle::Action;

/// The example agent image of the Pod tests.
pub(super) const AGENT_IMAGE: &str = "ghcr.io/example/claude:1";

/// An agent running `claude-agent-acp` from [`AGENT_IMAGE`], with the spec's defaults.
pub(super) fn agent_spec() -> AgentSpec {
    AgentSpec {
        image: Some(AGENT_IMAGE.to_owned()),
        command: vec!["claude-agent-acp".to_owned()],
        args: vec![],
        env: vec![],
        env_from: vec![],
        resources: None,
        idle_timeout_seconds: 600,
        total_timeout_seconds: 3600,
        client_fs: ClientFs::Auto,
        confinement: Confinement::BestEffort,
        gateway: None,
    }
}

/// The controller's Pod settings with an example ralph image and `sidecar`.
pub(super) fn pod_settings(sidecar: SidecarMode) -> PodSettings {
    PodSettings {
        ralph_image: "ghcr.io/ralph/ralph:0.1".to_owned(),
        service_account: "ralph-agent".to_owned(),
        sidecar,
        gateway_prices: Default::default(),
    }
}

/// The entry `name` of the environment of container `container` of `pod`.
pub(super) fn env_entry<'a>(pod: &'a Pod, container_name: &str, name: &str) -> Option<&'a EnvVar> {
    container(pod, container_name)
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
}

/// A `ralph.dev/v1alpha1` object of `kind` with this metadata and spec.
pub(super) fn object<K: DeserializeOwned>(kind: &str, metadata: Value, spec: Value) -> K {
    let value = json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    });
    serde_json::from_value(value).unwrap_or_else(|error| panic!("invalid {kind}: {error}"))
}

/// The tasks `plan` claims, by name.
pub(super) fn claimed(plan: &FeaturePlan) -> Vec<String> {
    plan.tasks
        .iter()
        .filter(|t| t.actions.iter().any(|a| matches!(a, Action::Claim { .. })))
        .map(|t| t.task_id.clone())
        .collect()
}

/// The spec of a built Pod (the builder always sets one).
pub(super) fn pod_spec(pod: &Pod) -> &PodSpec {
    pod.spec
        .as_ref()
        .unwrap_or_else(|| panic!("the Pod has no spec"))
}

/// The container or init container `name` of `pod`.
pub(super) fn container<'a>(pod: &'a Pod, name: &str) -> &'a Container {
    let spec = pod_spec(pod);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The volume `name` of `pod`.
pub(super) fn volume<'a>(pod: &'a Pod, name: &str) -> &'a Volume {
    pod_spec(pod)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// Status and reason of the condition `type_` among `conditions`.
pub(super) fn condition_state<'a>(conditions: &'a [Condition], type_: &str) -> (&'a str, &'a str) {
    let condition = crate::api::conditions::find(conditions, type_)
        .unwrap_or_else(|| panic!("no {type_} condition"));
    (condition.status.as_str(), condition.reason.as_str())
}

/// Asserts that `problem` has `reason` and a message naming each of `named`.
pub(super) fn assert_problem(problem: Option<Problem>, reason: &str, named: &[&str]) {
    let problem = problem.unwrap_or_else(|| panic!("no problem; expected {reason}"));
    assert_eq!(problem.reason, reason);
    for name in named {
        assert!(problem.message.contains(name), "{}", problem.message);
    }
}

/// The arguments of the container `name` of `pod`.
pub(super) fn args(pod: &Pod, name: &str) -> Vec<String> {
    container(pod, name).args.clone().unwrap_or_default()
}
