//! The gateway in an agent Pod: `ralph sidecar --gateway PROVIDER …` runs it beside the
//! claim keeper, with the credential from a Secret key that only the sidecar container
//! gets (`RALPH_GATEWAY_CREDENTIAL`). The agent container gets the gateway's URL and the
//! placeholder; its runner reads the meter at the end (`ralph runner --gateway-url`).

use std::net::SocketAddr;

use super::{
    Allowance, Credential, CredentialKind, Gateway, GatewayConfig, GatewayError, PriceTable,
    Provider,
};
use crate::engine::budget::MicroUsd;

/// The variable holding the credential in the sidecar container (from the Secret key).
pub const CREDENTIAL_VARIABLE: &str = "RALPH_GATEWAY_CREDENTIAL";
/// The variable naming where the credential comes from (`Secret NAME key KEY`).
pub const CREDENTIAL_SOURCE_VARIABLE: &str = "RALPH_GATEWAY_CREDENTIAL_SOURCE";
/// The variable holding the Feature's price overrides (JSON).
pub const PRICES_VARIABLE: &str = "RALPH_GATEWAY_PRICES";
/// Where the sidecar's gateway listens in the Pod's network namespace.
pub const POD_LISTEN: &str = "127.0.0.1:4100";

/// The gateway options of `ralph sidecar`.
#[derive(Debug, Clone, clap::Args)]
pub struct SidecarGatewayArgs {
    /// Run the model gateway for this API (anthropic, openai, gemini).
    #[arg(long = "gateway", value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// Where it listens.
    #[arg(long = "gateway-listen", default_value = POD_LISTEN)]
    pub listen: SocketAddr,
    /// The model API it forwards to [default: the provider's public API].
    #[arg(long = "gateway-upstream")]
    pub upstream: Option<String>,
    /// How the credential is presented: api-key, bearer, oauth.
    #[arg(long = "gateway-credential-kind", value_parser = parse_kind, default_value = "api-key")]
    pub kind: CredentialKind,
    /// The key the agent was given, and must present.
    #[arg(long = "gateway-placeholder")]
    pub placeholder: Option<String>,
    /// The attempt's share of the Feature's token budget.
    #[arg(long = "gateway-budget-tokens")]
    pub budget_tokens: Option<u64>,
    /// The attempt's share of the Feature's cost budget, US dollars.
    #[arg(long = "gateway-budget-cost", value_parser = |t: &str| MicroUsd::parse(t).map_err(|e| e.to_string()))]
    pub budget_cost: Option<MicroUsd>,
}

/// The provider `name` names, or an error naming the known ones.
pub(crate) fn parse_provider(name: &str) -> Result<Provider, String> {
    Provider::named(name).ok_or_else(|| {
        format!("unknown model API provider `{name}` (expected anthropic, openai or gemini)")
    })
}

fn parse_kind(name: &str) -> Result<CredentialKind, String> {
    match name {
        "api-key" | "apiKey" => Ok(CredentialKind::ApiKey),
        "bearer" => Ok(CredentialKind::Bearer),
        "oauth" => Ok(CredentialKind::OAuth),
        _ => Err(format!(
            "unknown credential kind `{name}` (expected api-key, bearer or oauth)"
        )),
    }
}

/// Starts the sidecar's gateway when `--gateway` is given; the credential, its source and
/// the prices come from the container's environment.
pub async fn start(args: &SidecarGatewayArgs) -> Result<Option<Gateway>, GatewayError> {
    let Some(provider) = args.provider else {
        return Ok(None);
    };
    let source = std::env::var(CREDENTIAL_SOURCE_VARIABLE)
        .unwrap_or_else(|_| format!("the environment variable {CREDENTIAL_VARIABLE}"));
    let value = std::env::var(CREDENTIAL_VARIABLE).unwrap_or_default();
    let credential = Credential::new(args.kind, &source, &value)?;
    let prices = match std::env::var(PRICES_VARIABLE) {
        Ok(json) => PriceTable::defaults().with(&PriceTable::parse(&json).map_err(|error| {
            GatewayError::Credential {
                origin: PRICES_VARIABLE.to_owned(),
                problem: error.to_string(),
            }
        })?),
        Err(_) => PriceTable::defaults(),
    };
    let gateway = Gateway::start(GatewayConfig {
        provider,
        upstream: args
            .upstream
            .clone()
            .unwrap_or_else(|| provider.default_upstream().to_owned()),
        credential,
        placeholder: args
            .placeholder
            .clone()
            .unwrap_or_else(|| POD_PLACEHOLDER.to_owned()),
        prices,
        allowance: Allowance {
            tokens: args.budget_tokens,
            cost: args.budget_cost,
        },
        listen: args.listen,
    })
    .await?;
    Ok(Some(gateway))
}

/// The key an agent container gets. Only the Pod's own containers reach the gateway on its
/// loopback address, so it need not be secret; it is never a real key.
pub const POD_PLACEHOLDER: &str = "ralph-gateway-placeholder";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_provider_is_refused_naming_the_known_ones() {
        let error = parse_provider("mistral").expect_err("refused");
        assert!(error.contains("anthropic, openai or gemini"), "{error}");
    }

    #[test]
    fn the_known_providers_are_accepted_by_name() {
        assert_eq!(parse_provider("openai"), Ok(Provider::Openai));
    }
}
