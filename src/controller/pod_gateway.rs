//! The model gateway in an agent Pod (docs/gateway.md): the sidecar runs it with the
//! credential from the Feature's Secret key (in the sidecar container only); the agent
//! container gets the gateway's URL and a placeholder key, and its runner reads the meter
//! (`--gateway-url`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Pod};

use super::pod::{SIDECAR_CONTAINER, env_var};
use super::run_view::run_view;
use crate::api::gateway::{CredentialKindSpec, GatewayCredential, GatewaySpec};
use crate::api::{AgentSpec, Feature, Task};
use crate::engine::budget::Allowance;
use crate::engine::lifecycle::RunView;
use crate::gateway::sidecar::{
    CREDENTIAL_SOURCE_VARIABLE, CREDENTIAL_VARIABLE, POD_LISTEN, POD_PLACEHOLDER, PRICES_VARIABLE,
};
use crate::gateway::{PriceTable, Provider};

/// Annotation on agent Pods: the share of the Feature's budget the attempt's gateway
/// enforces (JSON), read back while the attempt runs to share the rest.
pub const BUDGET_SHARE_ANNOTATION: &str = "ralph.dev/budget-share";

/// The share of the Feature's budget a new attempt may spend (as `ralph run` gives it,
/// `Budget::share`): what the ended attempts (`tasks`, and Pods not ingested yet) and the
/// running attempts' shares (their Pods' annotations) leave, split over the attempts
/// `spec.parallelism` still lets start. `None` without a budget.
pub(super) fn budget_share(
    feature: &Feature,
    tasks: &[Arc<Task>],
    pods: &BTreeMap<String, Arc<Pod>>,
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
fn running_shares(pods: &BTreeMap<String, Arc<Pod>>) -> Vec<Allowance> {
    pods.values()
        .filter(|pod| run_view(Some(pod), true, None) == RunView::Running)
        .filter_map(|pod| {
            let annotations = pod.metadata.annotations.as_ref()?;
            serde_json::from_str(annotations.get(BUDGET_SHARE_ANNOTATION)?).ok()
        })
        .collect()
}

/// Whether the running attempts' shares and what the ended ones spent hold the whole
/// budget: then no attempt starts until one ends (`Budget::leased_out`).
pub(super) fn budget_leased_out(
    feature: &Feature,
    tasks: &[Arc<Task>],
    pods: &BTreeMap<String, Arc<Pod>>,
) -> bool {
    let budget = super::budget::budget(feature);
    let leased = running_shares(pods);
    !budget.is_unlimited()
        && !leased.is_empty()
        && budget.leased_out(&super::budget::spent(tasks, pods), &leased)
}

/// Gives a new attempt's gateway its share of the budget, when its agent runs behind one.
pub(super) fn add_to_attempt_pod(
    pod: &mut Pod,
    scope: &super::task::TaskScope<'_>,
    agent: &AgentSpec,
    namespace: &str,
) {
    if PodGateway::of(agent).is_none() {
        return;
    }
    let ctx = scope.ctx;
    let key = super::index::feature_key(namespace, &kube::ResourceExt::name_any(scope.feature));
    let pods: BTreeMap<String, Arc<Pod>> = ctx
        .indexes
        .pods
        .objects(&ctx.pods, &key)
        .into_iter()
        .filter_map(|pod| pod.metadata.name.clone().map(|name| (name, pod)))
        .collect();
    let tasks: Vec<Arc<Task>> = scope.siblings.values().cloned().collect();
    if let Some(share) = budget_share(scope.feature, &tasks, &pods) {
        add_budget_share(pod, &share);
    }
}

/// Gives the attempt's gateway `share`: the sidecar's flags, and the Pod's annotation.
pub(super) fn add_budget_share(pod: &mut Pod, share: &Allowance) {
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

/// Feature condition, present while an agent turns its model gateway off
/// (`gateway.enabled: false`): `False`, reason [`REASON_GATEWAY_OFF`].
pub const MODEL_GATEWAY: &str = "ModelGateway";
/// `ModelGateway=False`: the agent holds the model key, and only its own reports count.
pub const REASON_GATEWAY_OFF: &str = "GatewayOff";

/// Sets the [`MODEL_GATEWAY`] condition while an agent of the Feature turns its gateway
/// off, and removes it otherwise.
pub fn set_gateway_condition(
    feature: &Feature,
    list: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let spec = &feature.spec;
    let off: Vec<&str> = std::iter::once(("spec.agent", &spec.agent))
        .chain(
            spec.fallback_agents
                .iter()
                .map(|a| (a.name.as_str(), &a.agent)),
        )
        .filter(|(_, agent)| agent.gateway.as_ref().is_some_and(|g| !g.enabled))
        .map(|(name, _)| name)
        .collect();
    if off.is_empty() {
        list.retain(|c| c.type_ != MODEL_GATEWAY);
        return;
    }
    let message = format!(
        "the model gateway is off for {} (gateway.enabled: false): the agent holds the model \
         key itself, and only the usage it reports is counted (it may under-report; \
         spec.budget may stop late)",
        off.join(", ")
    );
    let condition = crate::api::conditions::condition(
        MODEL_GATEWAY,
        crate::api::conditions::STATUS_FALSE,
        REASON_GATEWAY_OFF,
        message,
        feature.metadata.generation,
        now,
    );
    crate::api::conditions::set_condition(list, condition);
}

/// The gateway of one agent's Pods.
pub(super) struct PodGateway<'a> {
    provider: Provider,
    spec: &'a GatewaySpec,
    credential: &'a GatewayCredential,
}

impl<'a> PodGateway<'a> {
    /// The gateway `agent` runs behind: when it is on, names a credential, and the agent is
    /// one ralph knows the model API of.
    pub fn of(agent: &'a AgentSpec) -> Option<PodGateway<'a>> {
        let spec = agent.gateway.as_ref().filter(|spec| spec.enabled)?;
        let credential = spec.credential.as_ref()?;
        let provider = spec
            .provider
            .or_else(|| Provider::of_agent(&agent.command))?;
        Some(PodGateway {
            provider,
            spec,
            credential,
        })
    }

    fn url(&self) -> String {
        format!("http://{POD_LISTEN}")
    }

    /// The runner's flags: read the sidecar's meter at the end.
    pub fn runner_args(&self) -> Vec<String> {
        vec!["--gateway-url".to_owned(), self.url()]
    }

    /// Sets the agent's base URL and placeholder key variables (over any the Feature set).
    pub fn agent_env(&self, env: &mut Vec<EnvVar>) {
        let base_url = format!("{}{}", self.url(), self.provider.agent_prefix());
        let set = [
            env_var(self.provider.base_url_variable(), &base_url),
            env_var(self.provider.key_variable(), POD_PLACEHOLDER),
        ];
        env.retain(|e| !set.iter().any(|s| s.name == e.name));
        env.extend(set);
    }

    /// The sidecar's flags.
    pub fn sidecar_args(&self) -> Vec<String> {
        let kind = match self.credential.kind {
            CredentialKindSpec::ApiKey => "api-key",
            CredentialKindSpec::Bearer => "bearer",
            CredentialKindSpec::Oauth => "oauth",
        };
        let mut args = vec![
            "--gateway".to_owned(),
            self.provider.name().to_owned(),
            "--gateway-placeholder".to_owned(),
            POD_PLACEHOLDER.to_owned(),
            "--gateway-credential-kind".to_owned(),
            kind.to_owned(),
        ];
        if let Some(url) = &self.spec.base_url {
            args.extend(["--gateway-upstream".to_owned(), url.clone()]);
        }
        args
    }

    /// The sidecar's variables: the credential from the Secret key, where it comes from,
    /// and the prices (the cluster's, the Feature's over them).
    pub fn sidecar_env(&self, cluster_prices: &PriceTable) -> Vec<EnvVar> {
        let reference = &self.credential.secret_key_ref;
        let mut env = vec![
            EnvVar {
                name: CREDENTIAL_VARIABLE.to_owned(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(reference.clone()),
                    ..EnvVarSource::default()
                }),
            },
            env_var(
                CREDENTIAL_SOURCE_VARIABLE,
                &format!("Secret {} key {}", reference.name, reference.key),
            ),
        ];
        let prices = cluster_prices.clone().with(&self.spec.price_table());
        if !prices.is_empty()
            && let Ok(json) = serde_json::to_string(&prices)
        {
            env.push(env_var(PRICES_VARIABLE, &json));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::SecretKeySelector;

    use super::*;
    use crate::api::agent::ClientFs;

    fn claude_with_gateway(enabled: bool) -> AgentSpec {
        AgentSpec {
            image: Some("ghcr.io/example/claude:1".to_owned()),
            command: vec!["claude-agent-acp".to_owned()],
            args: Vec::new(),
            env: vec![env_var("ANTHROPIC_BASE_URL", "https://proxy.example")],
            env_from: Vec::new(),
            resources: None,
            idle_timeout_seconds: 600,
            total_timeout_seconds: 3600,
            client_fs: ClientFs::Auto,
            confinement: crate::api::agent::Confinement::BestEffort,
            gateway: Some(GatewaySpec {
                enabled,
                credential: Some(GatewayCredential {
                    secret_key_ref: SecretKeySelector {
                        name: "models".to_owned(),
                        key: "anthropic".to_owned(),
                        optional: None,
                    },
                    kind: CredentialKindSpec::ApiKey,
                }),
                ..GatewaySpec::default()
            }),
        }
    }

    fn secret_refs(env: &[EnvVar]) -> Vec<String> {
        env.iter()
            .filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .map(|r| format!("{}/{}", r.name, r.key))
            .collect()
    }

    #[test]
    fn only_the_sidecar_gets_the_secret_key() {
        let agent = claude_with_gateway(true);
        let gateway = PodGateway::of(&agent).expect("a gateway");
        let mut agent_env = agent.env.clone();
        gateway.agent_env(&mut agent_env);
        assert!(secret_refs(&agent_env).is_empty());
        assert_eq!(
            secret_refs(&gateway.sidecar_env(&PriceTable::default())),
            ["models/anthropic"]
        );
    }

    #[test]
    fn the_agent_gets_the_gateways_url_and_the_placeholder_over_its_own() {
        let agent = claude_with_gateway(true);
        let mut env = agent.env.clone();
        PodGateway::of(&agent)
            .expect("a gateway")
            .agent_env(&mut env);
        let value = |name: &str| {
            env.iter()
                .filter(|e| e.name == name)
                .map(|e| e.value.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(value("ANTHROPIC_BASE_URL"), ["http://127.0.0.1:4100"]);
        assert_eq!(value("ANTHROPIC_API_KEY"), [POD_PLACEHOLDER]);
    }

    #[test]
    fn an_agent_ralph_does_not_know_gets_a_gateway_when_its_provider_is_named() {
        let mut agent = claude_with_gateway(true);
        agent.command = vec!["fast-agent".to_owned(), "go".to_owned()];
        assert!(PodGateway::of(&agent).is_none());
        if let Some(gateway) = agent.gateway.as_mut() {
            gateway.provider = Some(Provider::Anthropic);
        }
        assert!(PodGateway::of(&agent).is_some());
    }

    #[test]
    fn a_gateway_turned_off_is_not_built() {
        assert!(PodGateway::of(&claude_with_gateway(false)).is_none());
    }

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
    fn feature_with_running_share(share: &str) -> (Feature, BTreeMap<String, Arc<Pod>>) {
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
        let pods = BTreeMap::from([("f-a-a1".to_owned(), Arc::new(running))]);
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

    #[test]
    fn a_feature_that_turns_the_gateway_off_has_a_false_model_gateway_condition() {
        let (mut feature, _) = feature_with_running_share("{}");
        feature.spec.agent = claude_with_gateway(false);
        let mut list = Vec::new();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        set_gateway_condition(&feature, &mut list, now.clone());
        assert_eq!(
            list.iter()
                .map(|c| (c.status.as_str(), c.reason.as_str()))
                .collect::<Vec<_>>(),
            [("False", "GatewayOff")]
        );
        feature.spec.agent = claude_with_gateway(true);
        set_gateway_condition(&feature, &mut list, now);
        assert!(list.is_empty());
    }

    #[test]
    fn the_sidecar_gets_the_cluster_prices_with_the_features_over_them() {
        let mut agent = claude_with_gateway(true);
        if let Some(gateway) = agent.gateway.as_mut() {
            let price = |dollars: u64| crate::gateway::prices::ModelPrice {
                input: crate::engine::budget::MicroUsd(dollars * 1_000_000),
                output: crate::engine::budget::MicroUsd(dollars * 1_000_000),
                cache_read: None,
                cache_write: None,
            };
            gateway.prices = BTreeMap::from([("m-1".to_owned(), price(2))]);
        }
        let cluster = PriceTable::parse(
            "m-1: {input: \"1\", output: \"1\"}\nm-2: {input: \"3\", output: \"3\"}",
        )
        .expect("cluster prices");
        let env = PodGateway::of(&agent)
            .expect("a gateway")
            .sidecar_env(&cluster);
        let json = env
            .iter()
            .find(|e| e.name == PRICES_VARIABLE)
            .and_then(|e| e.value.clone())
            .expect("prices given");
        let given = PriceTable::parse(&json).expect("readable");
        assert_eq!(given.price("m-1").map(|p| p.input.0), Some(2_000_000));
        assert_eq!(given.price("m-2").map(|p| p.input.0), Some(3_000_000));
    }

    #[test]
    fn the_sidecar_is_told_the_provider_and_the_placeholder() {
        let agent = claude_with_gateway(true);
        let args = PodGateway::of(&agent).expect("a gateway").sidecar_args();
        assert_eq!(
            args[..4],
            [
                "--gateway",
                "anthropic",
                "--gateway-placeholder",
                POD_PLACEHOLDER
            ]
        );
    }
}
