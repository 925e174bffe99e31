//! The model APIs the gateway serves: where each lives, how its credential is presented,
//! which requests are model calls, how usage is read, and how a refusal is written.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};

use super::usage::WireUsage;

/// A model API wire format.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Anthropic Messages (claude-agent-acp, Claude Code).
    Anthropic,
    /// OpenAI Responses and Chat Completions (codex-acp).
    Openai,
    /// Gemini generateContent / streamGenerateContent (gemini-cli).
    Gemini,
}

/// How a credential is presented upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    /// The provider's API key header (`x-api-key`, `x-goog-api-key`; OpenAI: bearer).
    ApiKey,
    /// `Authorization: Bearer` (an auth token).
    Bearer,
    /// An OAuth access token (`Authorization: Bearer`, plus Anthropic's OAuth beta header).
    OAuth,
}

/// Where a provider's credential may come from, in order of preference.
pub(crate) struct CredentialSource {
    /// The environment variable (locally) or the `kind` of a Secret key (cluster).
    pub variable: &'static str,
    /// How the value is presented.
    pub kind: CredentialKind,
}

const fn source(variable: &'static str, kind: CredentialKind) -> CredentialSource {
    CredentialSource { variable, kind }
}

const ANTHROPIC_CREDENTIALS: &[CredentialSource] = &[
    source("ANTHROPIC_API_KEY", CredentialKind::ApiKey),
    source("ANTHROPIC_AUTH_TOKEN", CredentialKind::Bearer),
    source("CLAUDE_CODE_OAUTH_TOKEN", CredentialKind::OAuth),
];
const OPENAI_CREDENTIALS: &[CredentialSource] = &[
    source("OPENAI_API_KEY", CredentialKind::ApiKey),
    source("CODEX_API_KEY", CredentialKind::ApiKey),
];
const GEMINI_CREDENTIALS: &[CredentialSource] = &[
    source("GEMINI_API_KEY", CredentialKind::ApiKey),
    source("GOOGLE_API_KEY", CredentialKind::ApiKey),
];

/// Every variable that may hold a model credential: never passed to an agent behind the
/// gateway.
pub const SECRET_VARIABLES: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// Anthropic's header for OAuth access tokens.
const ANTHROPIC_OAUTH_BETA: &str = "oauth-2025-04-20";

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [Provider::Anthropic, Provider::Openai, Provider::Gemini];

    /// `anthropic`, `openai`, `gemini`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::Openai => "openai",
            Provider::Gemini => "gemini",
        }
    }

    /// The provider called `name`.
    pub fn named(name: &str) -> Option<Provider> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The provider of a known agent, from its command's words (`claude-agent-acp`,
    /// `codex-acp`, `gemini --acp`, `npx @google/gemini-cli`).
    pub fn of_agent(command: &[String]) -> Option<Provider> {
        command.iter().find_map(|word| {
            let name = std::path::Path::new(word)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(word);
            if name.starts_with("claude") {
                Some(Provider::Anthropic)
            } else if name.starts_with("codex") {
                Some(Provider::Openai)
            } else if name == "gemini" || word.contains("@google/gemini-cli") {
                Some(Provider::Gemini)
            } else {
                None
            }
        })
    }

    /// The real endpoint, unless configured otherwise.
    pub fn default_upstream(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::Openai => "https://api.openai.com/v1",
            Provider::Gemini => "https://generativelanguage.googleapis.com",
        }
    }

    /// The path the agent's SDK puts before API paths in its base URL (`/v1` for OpenAI's).
    pub fn agent_prefix(self) -> &'static str {
        match self {
            Provider::Openai => "/v1",
            Provider::Anthropic | Provider::Gemini => "",
        }
    }

    /// The variable naming the endpoint for the agent (and, locally, the upstream a user
    /// set, e.g. a company proxy).
    pub fn base_url_variable(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_BASE_URL",
            Provider::Openai => "OPENAI_BASE_URL",
            Provider::Gemini => "GOOGLE_GEMINI_BASE_URL",
        }
    }

    /// The variable the agent finds its (placeholder) key in.
    pub fn key_variable(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::Openai => "OPENAI_API_KEY",
            Provider::Gemini => "GEMINI_API_KEY",
        }
    }

    /// Where a credential for this provider may come from.
    pub(crate) fn credential_sources(self) -> &'static [CredentialSource] {
        match self {
            Provider::Anthropic => ANTHROPIC_CREDENTIALS,
            Provider::Openai => OPENAI_CREDENTIALS,
            Provider::Gemini => GEMINI_CREDENTIALS,
        }
    }

    /// Whether a request is a model call (metered, and refused once the budget is spent).
    pub fn is_model_call(self, method: &Method, path: &str) -> bool {
        method == Method::POST
            && match self {
                Provider::Anthropic => path.ends_with("/messages"),
                Provider::Openai => {
                    path.ends_with("/responses") || path.ends_with("/chat/completions")
                }
                Provider::Gemini => {
                    path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent")
                }
            }
    }

    /// The model a request asks for: its body's `model`, or Gemini's path `models/M:verb`.
    pub fn requested_model(self, path: &str, body: &Value) -> Option<String> {
        match self {
            Provider::Gemini => {
                let (_, tail) = path.rsplit_once("models/")?;
                Some(tail.split(':').next()?.to_owned())
            }
            _ => body.get("model")?.as_str().map(str::to_owned),
        }
    }

    /// The usage one response event or body carries.
    pub(crate) fn usage(self, event: &Value) -> Option<WireUsage> {
        match self {
            Provider::Anthropic => super::anthropic::usage(event),
            Provider::Openai => super::openai::usage(event),
            Provider::Gemini => super::gemini::usage(event),
        }
    }

    /// The key the agent presented: its API-key header, a bearer token, or Gemini's `key`
    /// query parameter.
    pub fn presented_key(self, headers: &HeaderMap, query: Option<&str>) -> Option<String> {
        let header_text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let bearer = header_text("authorization")
            .and_then(|value| value.strip_prefix("Bearer ").map(str::trim));
        let key = match self {
            Provider::Anthropic => header_text("x-api-key").or(bearer),
            Provider::Openai => bearer,
            Provider::Gemini => header_text("x-goog-api-key")
                .or_else(|| query?.split('&').find_map(|pair| pair.strip_prefix("key="))),
        };
        key.map(str::to_owned)
    }

    /// Replaces whatever credential the agent sent with the real one.
    pub fn present(self, headers: &mut HeaderMap, kind: CredentialKind, value: &HeaderValue) {
        for name in ["x-api-key", "x-goog-api-key", "authorization"] {
            headers.remove(name);
        }
        let bearer = || {
            let mut bytes = b"Bearer ".to_vec();
            bytes.extend_from_slice(value.as_bytes());
            HeaderValue::from_bytes(&bytes).ok().map(|mut v| {
                v.set_sensitive(true);
                v
            })
        };
        let (name, value) = match (self, kind) {
            (Provider::Anthropic, CredentialKind::ApiKey) => ("x-api-key", Some(value.clone())),
            (Provider::Gemini, CredentialKind::ApiKey) => ("x-goog-api-key", Some(value.clone())),
            _ => ("authorization", bearer()),
        };
        if let Some(value) = value {
            headers.insert(HeaderName::from_static(name), value);
        }
        if (self, kind) == (Provider::Anthropic, CredentialKind::OAuth) {
            add_anthropic_beta(headers, ANTHROPIC_OAUTH_BETA);
        }
    }

    /// An error answer in the provider's own format.
    pub fn error(self, status: StatusCode, kind: &str, message: &str) -> (StatusCode, Value) {
        let body = match self {
            Provider::Anthropic => json!({
                "type": "error",
                "error": { "type": kind, "message": message },
            }),
            Provider::Openai => json!({
                "error": { "message": message, "type": kind, "code": kind, "param": null },
            }),
            Provider::Gemini => json!({
                "error": { "code": status.as_u16(), "message": message, "status": kind },
            }),
        };
        (status, body)
    }

    /// The answer to a model call refused because the attempt's budget is spent: an error
    /// each agent reports as a usage limit, and does not retry.
    pub fn budget_refusal(self, message: &str) -> (StatusCode, Value) {
        match self {
            Provider::Anthropic => {
                self.error(StatusCode::PAYMENT_REQUIRED, "billing_error", message)
            }
            Provider::Openai => {
                self.error(StatusCode::TOO_MANY_REQUESTS, "insufficient_quota", message)
            }
            Provider::Gemini => {
                let (status, mut body) =
                    self.error(StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED", message);
                body["error"]["details"] = json!([{
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{ "quotaId": "RalphFeatureBudget-PerFeature", "description": message }],
                }]);
                (status, body)
            }
        }
    }
}

/// Adds `beta` to the `anthropic-beta` header (a comma-separated list).
fn add_anthropic_beta(headers: &mut HeaderMap, beta: &str) {
    let existing = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let value = match existing {
        Some(list) if list.split(',').any(|b| b.trim() == beta) => return,
        Some(list) if !list.is_empty() => format!("{list},{beta}"),
        _ => beta.to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(HeaderName::from_static("anthropic-beta"), value);
    }
}

/// Hop-by-hop and framing headers a proxy must not pass on, and the encoding the gateway
/// asks for itself (it reads usage from the bytes).
pub(crate) fn is_unforwarded(name: &HeaderName) -> bool {
    name == header::HOST
        || name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::CONTENT_LENGTH
        || name == header::ACCEPT_ENCODING
        || name == header::UPGRADE
        || name == header::TE
        || name == header::TRAILER
        || name == header::PROXY_AUTHORIZATION
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &[&str]) -> Vec<String> {
        command.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn known_agents_are_recognised_by_their_command() {
        assert_eq!(
            Provider::of_agent(&words(&["/opt/bin/claude-agent-acp"])),
            Some(Provider::Anthropic)
        );
        assert_eq!(
            Provider::of_agent(&words(&["codex-acp"])),
            Some(Provider::Openai)
        );
        assert_eq!(
            Provider::of_agent(&words(&["npx", "@google/gemini-cli", "--acp"])),
            Some(Provider::Gemini)
        );
        assert_eq!(
            Provider::of_agent(&words(&["ralph", "agent", "script"])),
            None
        );
    }

    #[test]
    fn model_calls_are_posts_to_the_generation_paths() {
        assert!(Provider::Anthropic.is_model_call(&Method::POST, "/v1/messages"));
        assert!(!Provider::Anthropic.is_model_call(&Method::POST, "/v1/messages/count_tokens"));
        assert!(Provider::Openai.is_model_call(&Method::POST, "/v1/chat/completions"));
        assert!(Provider::Gemini.is_model_call(
            &Method::POST,
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
        ));
        assert!(!Provider::Openai.is_model_call(&Method::GET, "/v1/responses"));
    }

    #[test]
    fn gemini_names_its_model_in_the_path() {
        let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent";
        assert_eq!(
            Provider::Gemini
                .requested_model(path, &Value::Null)
                .as_deref(),
            Some("gemini-2.5-pro")
        );
    }

    #[test]
    fn the_agents_placeholder_is_replaced_by_the_real_key() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("placeholder"));
        Provider::Anthropic.present(
            &mut headers,
            CredentialKind::ApiKey,
            &HeaderValue::from_static("sk-real"),
        );
        assert_eq!(
            headers.get("x-api-key").map(|v| v.as_bytes()),
            Some(&b"sk-real"[..])
        );
    }

    #[test]
    fn an_oauth_token_is_a_bearer_with_the_oauth_beta() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-beta",
            HeaderValue::from_static("fine-grained-tool-streaming"),
        );
        Provider::Anthropic.present(
            &mut headers,
            CredentialKind::OAuth,
            &HeaderValue::from_static("tok"),
        );
        assert_eq!(
            headers.get("authorization").map(|v| v.as_bytes()),
            Some(&b"Bearer tok"[..])
        );
        assert_eq!(
            headers.get("anthropic-beta").map(|v| v.as_bytes()),
            Some(&b"fine-grained-tool-streaming,oauth-2025-04-20"[..])
        );
        assert!(headers.get("x-api-key").is_none());
    }

    #[test]
    fn gemini_accepts_the_key_as_a_query_parameter() {
        let key = Provider::Gemini.presented_key(&HeaderMap::new(), Some("alt=sse&key=abc"));
        assert_eq!(key.as_deref(), Some("abc"));
    }
}
