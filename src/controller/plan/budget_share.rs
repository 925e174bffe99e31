//! The share of a Feature's budget each attempt's model gateway enforces (as `ralph run`
//! gives it, `Budget::share`), written on the agent Pod and read back from the running
//! ones.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::pod::SIDECAR_CONTAINER;
use super::pod_gateway::PodGateway;
use super::run_view::run_view;
use crate::api::{AgentSpec, Feature};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::engine::budget::Allowance;
use crate::engine::lifecycle::RunView;

/// Annotation on agent Pods: the share of the Feature's budget the attempt's gateway
/// enforces (JSON), read back while the attempt runs to share the rest.
pub(crate) const BUDGET_SHARE_ANNOTATION: &str = "ralph.dev/budget-share";

/// The share of the Feature's budget a new attempt may spend (as `ralph run` gives it,
/// `Budget::share`): what the ended attempts (`tasks`, and Pods not ingested yet) and the
/// running attempts' shares (their Pods' annotations) leave, split over the attempts
/// `spec.parallelism` still lets start. `None` without a budget.
pub(crate) fn budget_share(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
    pods: &BTreeMap<String, Arc<CachedPod>>,
) -> Option<Allowance> {
    let budget = super::budget::budget(feature);
    if budget.is_unlimited() {
        return None;
    }
    let spent = super::budget::spent(tasks, pods);
    let leased = running_shares(pods);
    let running = u32::try_from(leased.len()).unwrap_or(u32::MAX);
    let free = feature.spec.parallelism.saturating_sub(running).max(1);
    Some(budget.share(&spent, &leased, free))
}

/// The shares the running attempts' gateways hold (their Pods' annotations).
fn running_shares(pods: &BTreeMap<String, Arc<CachedPod>>) -> Vec<Allowance> {
    pods.values()
        .filter(|pod| run_view(Some(pod), true, None) == RunView::Running)
        .filter_map(|pod| serde_json::from_str(pod.budget_share.as_deref()?).ok())
        .collect()
}

/// Whether the running attempts' shares and what the ended ones spent hold the whole
/// budget: then no attempt starts until one ends (`Budget::leased_out`).
pub(crate) fn budget_leased_out(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
    pods: &BTreeMap<String, Arc<CachedPod>>,
) -> bool {
    let budget = super::budget::budget(feature);
    let leased = running_shares(pods);
    !budget.is_unlimited()
        && !leased.is_empty()
        && budget.leased_out(&super::budget::spent(tasks, pods), &leased)
}

/// Gives a new attempt's gateway its share of the budget, when its agent runs behind one:
/// `spent_by` gives the Feature's Tasks and its agent Pods by name (read only then).
pub(crate) fn add_to_attempt_pod(
    pod: &mut Pod,
    feature: &Feature,
    agent: &AgentSpec,
    spent_by: impl FnOnce() -> (Vec<Arc<CachedTask>>, BTreeMap<String, Arc<CachedPod>>),
) {
    if PodGateway::of(agent).is_none() {
        return;
    }
    let (tasks, pods) = spent_by();
    if let Some(share) = budget_share(feature, &tasks, &pods) {
        add_budget_share(pod, &share);
    }
}

/// Gives the attempt's gateway `share`: the sidecar's flags, and the Pod's annotation.
pub(crate) fn add_budget_share(pod: &mut Pod, share: &Allowance) {
    if let Ok(json) = serde_json::to_string(share) {
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(BUDGET_SHARE_ANNOTATION.to_owned(), json);
    }
    let mut args = Vec::new();
    if let Some(tokens) = share.tokens {
        args.extend(["--gateway-budget-tokens".to_owned(), tokens.to_string()]);
    }
    if let Some(cost) = share.cost {
        args.extend(["--gateway-budget-cost".to_owned(), cost.to_string()]);
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let sidecar = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
        .find(|container| container.name == SIDECAR_CONTAINER);
    if let Some(sidecar) = sidecar {
        sidecar.args.get_or_insert_with(Vec::new).extend(args);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_share_reaches_the_sidecar_and_the_annotation() {
        let mut pod = Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: SIDECAR_CONTAINER.to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Pod::default()
        };
        let share = Allowance {
            tokens: Some(2_500),
            cost: None,
        };
        add_budget_share(&mut pod, &share);
        let args = pod.spec.as_ref().map(|s| s.containers[0].args.clone());
        assert_eq!(
            args,
            Some(Some(vec![
                "--gateway-budget-tokens".to_owned(),
                "2500".to_owned()
            ]))
        );
        let annotation = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BUDGET_SHARE_ANNOTATION))
            .cloned();
        assert_eq!(annotation.as_deref(), Some(r#"{"tokens":2500}"#));
    }

    /// A Feature of parallelism 4 and maxTokens 1000, and one running Pod holding `share`.
    pub(crate) fn feature_with_running_share(
        share: &str,
    ) -> (Feature, BTreeMap<String, Arc<CachedPod>>) {
        let spec = serde_json::json!({
            "agent": { "command": ["claude-agent-acp"] },
            "parallelism": 4,
            "budget": { "maxTokens": 1000 },
            "tasks": [],
        });
        let mut feature = Feature::new("f", serde_json::from_value(spec).expect("spec"));
        feature.metadata.namespace = Some("team".to_owned());
        let running = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("f-a-a1".to_owned()),
                annotations: Some(BTreeMap::from([(
                    BUDGET_SHARE_ANNOTATION.to_owned(),
                    share.to_owned(),
                )])),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".to_owned()),
                ..Default::default()
            }),
            ..Pod::default()
        };
        let pods = BTreeMap::from([("f-a-a1".to_owned(), Arc::new(CachedPod::from(running)))]);
        (feature, pods)
    }

    #[test]
    fn running_attempts_shares_are_left_out_of_a_new_share() {
        let (feature, pods) = feature_with_running_share(r#"{"tokens":250}"#);
        let share = budget_share(&feature, &[], &pods).expect("a budget");
        assert_eq!(share.tokens, Some(250));
    }

    #[test]
    fn no_attempt_starts_while_running_shares_hold_the_whole_budget() {
        let (feature, pods) = feature_with_running_share(r#"{"tokens":1000}"#);
        assert!(budget_leased_out(&feature, &[], &pods));
        let (feature, pods) = feature_with_running_share(r#"{"tokens":400}"#);
        assert!(!budget_leased_out(&feature, &[], &pods));
    }
}
