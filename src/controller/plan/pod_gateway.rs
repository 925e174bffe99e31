//! The model gateway in an agent Pod (docs/gateway.md): the sidecar runs it with the
//! credential from the Feature's Secret key (in the sidecar container only); the agent
//! container gets the gateway's URL and a placeholder key, and its runner reads the meter
//! (`--gateway-url`).

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource};

use super::pod::env_var;
use crate::api::gateway::{CredentialKindSpec, GatewayCredential, GatewaySpec};
use crate::api::{AgentSpec, Feature};
use crate::gateway::sidecar::{
    CREDENTIAL_SOURCE_VARIABLE, CREDENTIAL_VARIABLE, POD_LISTEN, POD_PLACEHOLDER, PRICES_VARIABLE,
};
use crate::gateway::{PriceTable, Provider};

/// Feature condition, present while an agent turns its model gateway off
/// (`gateway.enabled: false`): `False`, reason [`REASON_GATEWAY_OFF`].
pub(crate) const MODEL_GATEWAY: &str = "ModelGateway";
/// `ModelGateway=False`: the agent holds the model key, and only its own reports count.
pub(crate) const REASON_GATEWAY_OFF: &str = "GatewayOff";

/// Sets the [`MODEL_GATEWAY`] condition while an agent of the Feature turns its gateway
/// off, and removes it otherwise.
pub(crate) fn set_gateway_condition(
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
pub(crate) struct PodGateway<'a> {
    provider: Provider,
    spec: &'a GatewaySpec,
    credential: &'a GatewayCredential,
}

impl<'a> PodGateway<'a> {
    /// The gateway `agent` runs behind: when it is on, names a credential, and the agent is
    /// one ralph knows the model API of.
    pub(crate) fn of(agent: &'a AgentSpec) -> Option<PodGateway<'a>> {
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
    pub(crate) fn runner_args(&self) -> Vec<String> {
        vec!["--gateway-url".to_owned(), self.url()]
    }

    /// Sets the agent's base URL and placeholder key variables (over any the Feature set).
    pub(crate) fn agent_env(&self, env: &mut Vec<EnvVar>) {
        let base_url = format!("{}{}", self.url(), self.provider.agent_prefix());
        let set = [
            env_var(self.provider.base_url_variable(), &base_url),
            env_var(self.provider.key_variable(), POD_PLACEHOLDER),
        ];
        env.retain(|e| !set.iter().any(|s| s.name == e.name));
        env.extend(set);
    }

    /// The sidecar's flags.
    pub(crate) fn sidecar_args(&self) -> Vec<String> {
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
    pub(crate) fn sidecar_env(&self, cluster_prices: &PriceTable) -> Vec<EnvVar> {
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
    use std::collections::BTreeMap;

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
    fn a_feature_that_turns_the_gateway_off_has_a_false_model_gateway_condition() {
        let (mut feature, _) =
            crate::controller::plan::budget_share::tests::feature_with_running_share("{}");
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
