//! The gateway's HTTP side: checks the agent's placeholder key, refuses model calls once
//! the allowance is spent, forwards everything else to the upstream with the real
//! credential, and streams the answer back unchanged while the usage tap reads it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;

use super::meter::Meter;
use super::provider::{CredentialKind, Provider, is_unforwarded};
use super::tap::UsageTap;

/// Largest request body the gateway takes (agents send whole conversations: ~100 KB to a
/// few MB).
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// The HTTP client to the upstream (TLS, or plain HTTP for a local endpoint).
pub(crate) type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

/// What every request of one gateway shares.
pub(crate) struct Shared {
    pub provider: Provider,
    /// The upstream base URL without a trailing `/`.
    pub upstream: String,
    pub credential: (CredentialKind, HeaderValue),
    pub placeholder: String,
    pub meter: Arc<Meter>,
    pub client: Upstream,
}

/// `GET /_ralph/usage`: what the gateway metered so far.
pub(crate) async fn usage(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.meter.metered()).into_response()
}

/// Every other request: a call of the provider's API.
pub(crate) async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let provider = shared.provider;
    let path = parts.uri.path().to_owned();
    let presented = provider.presented_key(&parts.headers, parts.uri.query());
    if presented.as_deref() != Some(shared.placeholder.as_str()) {
        tracing::warn!(provider = provider.name(), %path, "refused a request without the gateway's key");
        return error(
            provider,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "the ralph model gateway answers only the agent it runs for: present the key it \
             gave the agent (its API key variable)",
        );
    }
    let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return error(
            provider,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the request body is larger than the ralph model gateway takes (64 MiB), or it \
             could not be read",
        );
    };
    let model_call = provider.is_model_call(&parts.method, &path);
    let mut requested_model = None;
    if model_call {
        let document = match serde_json::from_slice::<Value>(&body) {
            Ok(document) => document,
            Err(problem) => {
                let message = format!("the model call's body is not JSON: {problem}");
                return error(
                    provider,
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &message,
                );
            }
        };
        requested_model = provider.requested_model(&path, &document);
        if let Err(why) = shared.meter.admit() {
            tracing::info!(provider = provider.name(), %path, "refused a model call: {why}");
            let (status, body) = provider.budget_refusal(&format!("ralph: {why}"));
            return (status, axum::Json(body)).into_response();
        }
    }
    let upstream = match upstream_request(&shared, &parts.method, &parts.uri, &parts.headers, body)
    {
        Ok(request) => request,
        Err(problem) => {
            return error(provider, StatusCode::BAD_GATEWAY, "api_error", &problem);
        }
    };
    let answer = match shared.client.request(upstream).await {
        Ok(answer) => answer,
        Err(problem) => {
            tracing::warn!(provider = provider.name(), %path, "the upstream did not answer: {problem}");
            let message =
                format!("the ralph model gateway could not reach the model API: {problem}");
            return error(provider, StatusCode::BAD_GATEWAY, "api_error", &message);
        }
    };
    tracing::debug!(provider = provider.name(), method = %parts.method, %path, status = answer.status().as_u16(), "forwarded");
    let tap = model_call.then(|| {
        let events = is_event_stream(answer.headers());
        UsageTap::new(provider, requested_model, shared.meter.clone(), events)
    });
    pass_back(answer, tap)
}

/// The request to send upstream: the same method, path (after the agent's prefix) and
/// query, the agent's headers without hop-by-hop ones and its placeholder, the real
/// credential, and no compression (the tap reads the bytes).
fn upstream_request(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<axum::http::Request<Body>, String> {
    let provider = shared.provider;
    let path = uri.path();
    let path = path.strip_prefix(provider.agent_prefix()).unwrap_or(path);
    let query = uri
        .query()
        .map(|query| {
            query
                .split('&')
                .filter(|pair| !pair.starts_with("key="))
                .collect::<Vec<_>>()
                .join("&")
        })
        .filter(|query| !query.is_empty())
        .map(|query| format!("?{query}"))
        .unwrap_or_default();
    let target = format!("{}{path}{query}", shared.upstream);
    let mut request = axum::http::Request::builder()
        .method(method.clone())
        .uri(&target)
        .body(Body::from(body))
        .map_err(|problem| {
            format!(
                "cannot address the model API at {}: {problem}",
                shared.upstream
            )
        })?;
    let forwarded = request.headers_mut();
    for (name, value) in headers {
        if !is_unforwarded(name) {
            forwarded.append(name.clone(), value.clone());
        }
    }
    forwarded.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let (kind, value) = &shared.credential;
    provider.present(forwarded, *kind, value);
    Ok(request)
}

/// The upstream's answer as it comes, chunk by chunk, through the tap when there is one.
fn pass_back(
    answer: axum::http::Response<hyper::body::Incoming>,
    tap: Option<UsageTap>,
) -> Response {
    let (parts, body) = answer.into_parts();
    let body = match tap {
        None => Body::new(body),
        Some(mut tap) => Body::from_stream(body.into_data_stream().map(move |chunk| {
            if let Ok(bytes) = &chunk {
                tap.feed(bytes);
            }
            chunk
        })),
    };
    let mut response = Response::new(body);
    *response.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if name != header::TRANSFER_ENCODING && name != header::CONNECTION {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    response
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// An error answer in the provider's format.
fn error(provider: Provider, status: StatusCode, kind: &str, message: &str) -> Response {
    let (status, body) = provider.error(status, kind, message);
    (status, axum::Json(body)).into_response()
}
