//! Before any claim: the Secret key each agent's model gateway holds the credential in
//! (`spec.agent.gateway.credential.secretKeyRef`) exists and is not empty; otherwise the
//! Feature is `Configured=False` (reason `GatewayCredentialsMissing`) naming the Secret and
//! the key, and no attempt starts.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use crate::api::Feature;
use crate::api::conditions;
use crate::controller::client::call::bounded;
use crate::controller::plan::problem::Problem;
use crate::controller::runtime::context::Context;

/// The Secret keys the Feature's agents' gateways read, as (Secret, key, field).
fn credential_keys(feature: &Feature) -> Vec<(String, String, String)> {
    let primary = std::iter::once(("spec.agent".to_owned(), &feature.spec.agent));
    let fallbacks = feature
        .spec
        .fallback_agents
        .iter()
        .map(|named| (format!("spec.fallbackAgents[{}]", named.name), &named.agent));
    primary
        .chain(fallbacks)
        .filter_map(|(field, agent)| {
            let gateway = agent.gateway.as_ref().filter(|gateway| gateway.enabled)?;
            let reference = &gateway.credential.as_ref()?.secret_key_ref;
            let field = format!("{field}.gateway.credential.secretKeyRef");
            Some((reference.name.clone(), reference.key.clone(), field))
        })
        .collect()
}

/// The problem with one Secret as read (`None`: it does not exist) for `key`.
pub(crate) fn secret_problem(
    namespace: &str,
    (name, key, field): &(String, String, String),
    secret: Option<&Secret>,
) -> Option<Problem> {
    let problem = |message: String| Problem {
        reason: conditions::REASON_GATEWAY_CREDENTIALS_MISSING,
        message: format!("{message}; no attempt starts until it is fixed"),
    };
    let Some(secret) = secret else {
        return Some(problem(format!(
            "the model credential Secret {namespace}/{name} ({field}) does not exist: create it \
             (kubectl create secret generic {name} -n {namespace} --from-literal={key}=...) or \
             fix the name"
        )));
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
        .or_else(|| {
            let data = secret.string_data.as_ref()?;
            data.get(key).map(|text| text.clone().into_bytes())
        });
    match value {
        None => Some(problem(format!(
            "the model credential Secret {namespace}/{name} has no key `{key}` ({field}): add it, \
             or name the key it has"
        ))),
        Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Some(problem(format!(
            "the key `{key}` of the model credential Secret {namespace}/{name} ({field}) is \
             empty: put the model API key in it"
        ))),
        Some(_) => None,
    }
}

/// The first problem with the Feature's model credential Secrets (read live, remembered
/// per generation for a short while); `None` when they are fine or none is named.
pub(crate) async fn configuration_problem(feature: &Feature, ctx: &Context) -> Option<Problem> {
    let namespace = feature.namespace().unwrap_or_default();
    for reference in credential_keys(feature) {
        let remembered = format!(
            "gateway Secret {namespace}/{} key {} of Feature {}@{}",
            reference.0,
            reference.1,
            feature.name_any(),
            feature.metadata.generation.unwrap_or_default()
        );
        let problem = ctx
            .preflight
            .remembered(remembered, async {
                let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
                let op = format!("get Secret {namespace}/{}", reference.0);
                match bounded(ctx.api_timeout, op, secrets.get_opt(&reference.0)).await {
                    Ok(secret) => Some(secret_problem(&namespace, &reference, secret.as_ref())),
                    Err(error) => {
                        tracing::warn!(%error, secret = %reference.0, "cannot read the model credential Secret");
                        None
                    }
                }
            })
            .await;
        if problem.is_some() {
            return problem;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn reference() -> (String, String, String) {
        (
            "models".to_owned(),
            "anthropic".to_owned(),
            "spec.agent.gateway.credential.secretKeyRef".to_owned(),
        )
    }

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(
                key.to_owned(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[test]
    fn a_missing_secret_is_named_with_its_field() {
        let problem = secret_problem("team", &reference(), None).expect("a problem");
        assert_eq!(problem.reason, "GatewayCredentialsMissing");
        assert!(
            problem.message.contains("team/models"),
            "{}",
            problem.message
        );
        assert!(
            problem.message.contains("spec.agent.gateway"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn a_missing_key_is_named() {
        let problem =
            secret_problem("team", &reference(), Some(&secret("openai", "sk"))).expect("a problem");
        assert!(
            problem.message.contains("no key `anthropic`"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn an_empty_key_is_named() {
        let problem =
            secret_problem("team", &reference(), Some(&secret("anthropic", " "))).expect("problem");
        assert!(problem.message.contains("`anthropic`") && problem.message.contains("empty"));
    }

    #[test]
    fn a_key_holding_a_value_is_fine() {
        assert!(secret_problem("team", &reference(), Some(&secret("anthropic", "sk-1"))).is_none());
    }
}
