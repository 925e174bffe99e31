//! The model gateway in a local attempt: the runner starts it before the agent, holds the
//! credential it finds in its own environment, gives the agent the gateway's URL and a
//! placeholder key instead, and records what the gateway metered as the attempt's usage.
//! In an agent Pod the sidecar runs the gateway; the runner only reads its meter
//! (`--gateway-url`).

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::json;

use crate::engine::attempt::{AttemptResult, Misconfiguration, OutcomeClass};
use crate::gateway::{
    Credential, Gateway, GatewayConfig, GatewayError, Metered, PriceTable, Provider,
    SECRET_VARIABLES, placeholder_key,
};

use super::config::RunnerConfig;

pub use super::config::{GatewayMode, GatewaySettings};

/// The gateway an attempt runs with, and what the agent's environment becomes.
pub(super) struct AgentGateway {
    /// The local gateway, when the runner started one.
    pub local: Option<Gateway>,
    /// Variables the agent gets (the gateway's URL and the placeholder key).
    pub env: Vec<(String, String)>,
    /// Variables taken out of the agent's environment.
    pub removed: Vec<String>,
}

impl AgentGateway {
    /// No gateway: the agent's environment stays as it is.
    fn none() -> AgentGateway {
        AgentGateway {
            local: None,
            env: Vec::new(),
            removed: Vec::new(),
        }
    }
}

/// Starts the gateway the attempt needs, if any; a credential that cannot be used or a
/// port that cannot be bound is a misconfiguration.
pub(super) async fn open(config: &RunnerConfig) -> Result<AgentGateway, Misconfiguration> {
    let settings = &config.gateway;
    if settings.mode == GatewayMode::Off || settings.remote.is_some() {
        return Ok(AgentGateway::none());
    }
    let provider = settings
        .provider
        .or_else(|| Provider::of_agent(&config.agent_command));
    let Some(provider) = provider else {
        return Ok(AgentGateway::none());
    };
    let Some(credential) = credential_from_env(provider)? else {
        return Ok(AgentGateway::none());
    };
    let upstream = settings
        .upstream
        .clone()
        .or_else(|| env_value(provider.base_url_variable()))
        .unwrap_or_else(|| provider.default_upstream().to_owned());
    let gateway = Gateway::start(GatewayConfig {
        provider,
        upstream,
        credential,
        placeholder: placeholder_key(),
        prices: settings.prices.clone().unwrap_or_else(PriceTable::defaults),
        allowance: settings.allowance,
        listen: settings
            .listen
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
    })
    .await
    .map_err(misconfigured)?;
    config.events.emit(
        "gateway",
        json!({"provider": provider.name(), "address": gateway.address().to_string(), "allowance": settings.allowance}),
    );
    Ok(AgentGateway {
        env: gateway.agent_env(),
        local: Some(gateway),
        removed: SECRET_VARIABLES.iter().map(|v| (*v).to_owned()).collect(),
    })
}

/// The first credential variable of `provider` set in the runner's environment; a set
/// but empty one is an error naming it.
fn credential_from_env(provider: Provider) -> Result<Option<Credential>, Misconfiguration> {
    for source in provider.credential_sources() {
        let Some(value) = std::env::var_os(source.variable) else {
            continue;
        };
        let value = value.to_string_lossy();
        let source_name = format!("the environment variable {}", source.variable);
        return Credential::new(source.kind, &source_name, &value)
            .map(Some)
            .map_err(misconfigured);
    }
    Ok(None)
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

fn misconfigured(error: GatewayError) -> Misconfiguration {
    let fix = match &error {
        GatewayError::Credential { .. } => {
            "set the variable to the model API key (or unset it to run without the gateway)"
        }
        GatewayError::Bind { .. } => "free a port on 127.0.0.1 for the model gateway",
        GatewayError::Upstream { .. } => {
            "set the provider's base URL (e.g. ANTHROPIC_BASE_URL) to an http:// or https:// URL"
        }
        GatewayError::Tls(_) => "install the system's CA certificates (ca-certificates)",
    };
    Misconfiguration {
        problem: error.to_string(),
        fix: fix.to_owned(),
        reason: Some("GatewayMisconfigured".to_owned()),
    }
}

/// Records what the gateway metered as the attempt's usage, keeps the agent's own report
/// beside it, and ends the attempt `limitReached` when the gateway refused a model call
/// and the agent gave no task verdict.
pub(super) fn apply(result: &mut AttemptResult, metered: Metered) {
    result.reported_usage = Some(std::mem::replace(&mut result.usage, metered.usage()));
    result.model_calls = Some(metered.calls);
    let verdict = result.sigils.task_done.is_some() || result.sigils.task_failed.is_some();
    if let Some(refusal) = metered.refusal
        && !verdict
        && result.outcome != OutcomeClass::Cancelled
    {
        result.outcome = OutcomeClass::LimitReached;
        result.crash = None;
        result.exhaustion = None;
        result.budget_refusal = Some(refusal);
    }
}

/// Reads the meter of the gateway at `base` (the agent Pod's sidecar).
pub(super) async fn remote_metered(base: &str) -> Result<Metered, String> {
    let url = format!(
        "{}{}",
        base.trim_end_matches('/'),
        crate::gateway::USAGE_PATH
    );
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|problem| format!("the gateway URL {url} is not a URL: {problem}"))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<axum::body::Body>();
    let answer = client
        .get(uri)
        .await
        .map_err(|problem| format!("cannot read the gateway's meter at {url}: {problem}"))?;
    let body = http_body_util::BodyExt::collect(answer.into_body())
        .await
        .map_err(|problem| format!("cannot read the gateway's meter at {url}: {problem}"))?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|problem| format!("the gateway's meter at {url} is not readable: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::{Tokens, Usage};

    fn finished_with_report() -> AttemptResult {
        AttemptResult {
            usage: Usage {
                tokens: Tokens::new(10, 1),
                cost_usd: None,
            },
            ..AttemptResult::new("t", None, OutcomeClass::Finished)
        }
    }

    fn metered(refusal: Option<&str>) -> Metered {
        Metered {
            calls: 3,
            tokens: Tokens::new(900, 40),
            refusal: refusal.map(str::to_owned),
            ..Metered::default()
        }
    }

    #[test]
    fn the_metered_usage_is_the_attempts_and_the_agents_report_is_kept() {
        let mut result = finished_with_report();
        apply(&mut result, metered(None));
        assert_eq!(result.usage.tokens, Tokens::new(900, 40));
        assert_eq!(
            result.reported_usage.map(|u| u.tokens),
            Some(Tokens::new(10, 1))
        );
        assert_eq!(result.model_calls, Some(3));
        assert_eq!(result.outcome, OutcomeClass::Finished);
    }

    #[test]
    fn a_refused_call_without_a_verdict_ends_the_attempt_limit_reached() {
        let mut result = finished_with_report();
        apply(
            &mut result,
            metered(Some("the token budget of this attempt is spent")),
        );
        assert_eq!(result.outcome, OutcomeClass::LimitReached);
        assert!(result.budget_refusal.is_some());
    }

    #[test]
    fn a_verdict_given_before_the_refusal_stands() {
        let mut result = finished_with_report();
        result.sigils.task_done = Some("t".to_owned());
        apply(&mut result, metered(Some("spent")));
        assert_eq!(result.outcome, OutcomeClass::Finished);
    }
}
