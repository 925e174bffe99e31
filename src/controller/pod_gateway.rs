//! The model gateway in an agent Pod (docs/gateway.md): the sidecar runs it with the
//! credential from the Feature's Secret key (in the sidecar container only); the agent
//! container gets the gateway's URL and a placeholder key, and its runner reads the meter
//! (`--gateway-url`).

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource};

use super::pod::env_var;
use crate::api::AgentSpec;
use crate::api::gateway::{CredentialKindSpec, GatewayCredential, GatewaySpec};
use crate::gateway::Provider;
use crate::gateway::sidecar::{
    CREDENTIAL_SOURCE_VARIABLE, CREDENTIAL_VARIABLE, POD_LISTEN, POD_PLACEHOLDER, PRICES_VARIABLE,
};

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
        let provider = Provider::of_agent(&agent.command)?;
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
    /// and the Feature's prices.
    pub fn sidecar_env(&self) -> Vec<EnvVar> {
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
        if !self.spec.prices.is_empty()
            && let Ok(json) = serde_json::to_string(&self.spec.prices)
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
        assert_eq!(secret_refs(&gateway.sidecar_env()), ["models/anthropic"]);
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
    fn a_gateway_turned_off_is_not_built() {
        assert!(PodGateway::of(&claude_with_gateway(false)).is_none());
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
