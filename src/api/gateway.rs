//! The model gateway of a Feature's agent (`spec.agent.gateway`, docs/gateway.md).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretKeySelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::gateway::prices::ModelPrice;

fn enabled() -> bool {
    true
}

/// The model gateway between the agent and its model API: the agent gets the gateway's URL
/// and a placeholder key, the gateway holds the credential, meters every model call and
/// refuses calls once the attempt's share of `spec.budget` is spent. On by default for
/// claude-agent-acp, codex-acp and gemini-cli when a credential is configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// False: no gateway; the agent holds the credential itself and only its own usage
    /// reports are counted (a warning says so).
    #[serde(default = "enabled")]
    pub enabled: bool,

    /// The model API the agent speaks, for an agent ralph does not recognise by its command
    /// (e.g. fast-agent against Anthropic): anthropic, openai or gemini. Default: from the
    /// command (claude-agent-acp, codex-acp, gemini-cli); other agents run without a gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<crate::gateway::Provider>,

    /// The model API the gateway forwards to (a company proxy, a regional endpoint).
    /// Default: the provider's public API.
    #[serde(rename = "baseURL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), pattern(r"^https?://"))]
    pub base_url: Option<String>,

    /// The model credential, on a cluster: a Secret key mounted into the agent Pod's
    /// sidecar only. Locally the credential comes from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<GatewayCredential>,

    /// Prices (US dollars per million tokens, quoted decimal strings) by model name or
    /// name prefix, over the built-in table and the cluster's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, ModelPrice>,
}

impl Default for GatewaySpec {
    fn default() -> Self {
        GatewaySpec {
            enabled: true,
            provider: None,
            base_url: None,
            credential: None,
            prices: BTreeMap::new(),
        }
    }
}

/// Where the gateway's credential comes from, and how it is presented.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayCredential {
    /// The Secret key holding the API key or token.
    pub secret_key_ref: SecretKeySelector,
    /// How it is presented upstream.
    #[serde(default)]
    pub kind: CredentialKindSpec,
}

/// How a credential is presented upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CredentialKindSpec {
    /// The provider's API key header (`x-api-key`; OpenAI: a bearer token; Gemini:
    /// `x-goog-api-key`).
    #[default]
    ApiKey,
    /// `Authorization: Bearer` (e.g. `ANTHROPIC_AUTH_TOKEN`).
    Bearer,
    /// An OAuth access token (`CLAUDE_CODE_OAUTH_TOKEN`).
    Oauth,
}

impl GatewaySpec {
    /// The `ralph runner` flags for this setting (none for the defaults).
    pub fn runner_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if !self.enabled {
            args.extend(["--gateway".to_owned(), "off".to_owned()]);
        }
        if let Some(provider) = self.provider {
            args.extend(["--gateway-provider".to_owned(), provider.name().to_owned()]);
        }
        if let Some(url) = &self.base_url {
            args.extend(["--gateway-upstream".to_owned(), url.clone()]);
        }
        args
    }

    /// The price overrides as a table.
    pub fn price_table(&self) -> crate::gateway::PriceTable {
        crate::gateway::PriceTable::from_entries(self.prices.clone())
    }
}
