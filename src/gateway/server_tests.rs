//! The gateway over real sockets: an upstream served on 127.0.0.1, a client calling the
//! gateway as an agent would.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use super::*;
use crate::engine::attempt::Tokens;

const REAL_KEY: &str = "sk-real-upstream-key";

const STREAM: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n",
);

/// What the test upstream answers, and what it saw.
#[derive(Clone, Copy)]
enum Upstream {
    Stream,
    Status(u16),
    /// Streams `message_start`, then drops the connection.
    Drop,
}

async fn upstream(kind: Upstream) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let (seen, keys) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let key = request
            .headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("(none)")
            .to_owned();
        let _ = seen.send(key);
        async move { answer(kind) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, keys)
}

fn answer(kind: Upstream) -> Response {
    match kind {
        Upstream::Stream => ([(header::CONTENT_TYPE, "text/event-stream")], STREAM).into_response(),
        Upstream::Status(status) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [("retry-after", "30")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        )
            .into_response(),
        Upstream::Drop => {
            let start = STREAM
                .split("event: message_delta")
                .next()
                .unwrap_or_default();
            let chunks = futures::StreamExt::then(
                futures::stream::iter([
                    Ok(Bytes::from(start.to_owned())),
                    Err(std::io::Error::other("the upstream went away")),
                ]),
                |chunk| async move {
                    if chunk.is_err() {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    chunk
                },
            );
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(chunks),
            )
                .into_response()
        }
    }
}

async fn gateway(upstream: String, allowance: Allowance) -> Gateway {
    Gateway::start(GatewayConfig {
        provider: Provider::Anthropic,
        upstream,
        credential: Credential::new(CredentialKind::ApiKey, "the test", REAL_KEY).expect("key"),
        placeholder: "placeholder".to_owned(),
        prices: PriceTable::defaults(),
        allowance,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
    })
    .await
    .expect("the gateway starts")
}

/// POSTs `body` to the gateway's Messages path with `key`; the status and the whole body.
async fn post(gateway: &Gateway, key: &str, body: &str) -> (StatusCode, Result<Bytes, String>) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Body>();
    let request = Request::post(format!("{}/v1/messages", gateway.base_url()))
        .header("x-api-key", key)
        .body(Body::from(body.to_owned()))
        .expect("request");
    let answer = client.request(request).await.expect("the gateway answers");
    let status = answer.status();
    let body = answer.into_body().collect().await;
    (
        status,
        body.map(|b| b.to_bytes()).map_err(|e| e.to_string()),
    )
}

const CALL: &str = r#"{"model":"claude-sonnet-4-5","stream":true,"messages":[]}"#;

#[tokio::test]
async fn a_streamed_answer_passes_unchanged_and_is_metered() {
    let (address, mut keys) = upstream(Upstream::Stream).await;
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "placeholder", CALL).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.expect("whole body"), Bytes::from(STREAM));
    assert_eq!(keys.recv().await.as_deref(), Some(REAL_KEY));
    let metered = gateway.stop().await;
    assert_eq!((metered.calls, metered.tokens), (1, Tokens::new(50, 7)));
    assert!(metered.cost.is_some());
}

#[tokio::test]
async fn an_upstream_error_passes_with_its_status_headers_and_body() {
    let (address, _keys) = upstream(Upstream::Status(429)).await;
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "placeholder", CALL).await;

    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let body = body.expect("body");
    assert!(String::from_utf8_lossy(&body).contains("slow down"));
    assert_eq!(gateway.stop().await.tokens, Tokens::default());
}

#[tokio::test]
async fn a_dropped_stream_reaches_the_agent_as_a_broken_answer_and_counts_what_was_sent() {
    let (address, _keys) = upstream(Upstream::Drop).await;
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "placeholder", CALL).await;

    assert_eq!(status, StatusCode::OK);
    assert!(body.is_err(), "the agent sees the stream break: {body:?}");
    assert_eq!(gateway.stop().await.tokens, Tokens::new(50, 1));
}

#[tokio::test]
async fn a_request_without_the_placeholder_is_refused_and_not_forwarded() {
    let (address, mut keys) = upstream(Upstream::Stream).await;
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "someone-elses-key", CALL).await;

    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8_lossy(&body.expect("body")).contains("authentication_error"));
    assert!(keys.try_recv().is_err(), "nothing reached the upstream");
}

#[tokio::test]
async fn a_malformed_model_call_is_refused_naming_the_problem() {
    let (address, mut keys) = upstream(Upstream::Stream).await;
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "placeholder", "{not json").await;

    assert_eq!(status, StatusCode::BAD_REQUEST);
    let text = String::from_utf8_lossy(&body.expect("body")).into_owned();
    assert!(
        text.contains("invalid_request_error") && text.contains("not JSON"),
        "{text}"
    );
    assert!(keys.try_recv().is_err(), "nothing reached the upstream");
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_bad_gateway_in_the_apis_error_format() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = closed.local_addr().expect("address");
    drop(closed);
    let gateway = gateway(format!("http://{address}"), Allowance::default()).await;

    let (status, body) = post(&gateway, "placeholder", CALL).await;

    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let text = String::from_utf8_lossy(&body.expect("body")).into_owned();
    assert!(text.contains(r#""type":"api_error""#), "{text}");
}

#[tokio::test]
async fn the_call_after_the_allowance_is_spent_is_refused_as_a_billing_error() {
    let (address, _keys) = upstream(Upstream::Stream).await;
    let allowance = Allowance {
        tokens: Some(10),
        cost: None,
    };
    let gateway = gateway(format!("http://{address}"), allowance).await;

    let first = post(&gateway, "placeholder", CALL).await;
    let second = post(&gateway, "placeholder", CALL).await;

    assert_eq!(first.0, StatusCode::OK);
    assert_eq!(second.0, StatusCode::PAYMENT_REQUIRED);
    let text = String::from_utf8_lossy(&second.1.expect("body")).into_owned();
    assert!(
        text.contains("billing_error") && text.contains("57 of 10 tokens"),
        "{text}"
    );
    let metered = gateway.stop().await;
    assert_eq!((metered.calls, metered.refused_calls), (1, 1));
}

#[tokio::test]
async fn a_taken_port_is_an_error_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address");
    let config = GatewayConfig {
        provider: Provider::Anthropic,
        upstream: "http://127.0.0.1:1".to_owned(),
        credential: Credential::new(CredentialKind::ApiKey, "the test", REAL_KEY).expect("key"),
        placeholder: "placeholder".to_owned(),
        prices: PriceTable::defaults(),
        allowance: Allowance::default(),
        listen: address,
    };

    let error = Gateway::start(config).await.err().expect("refused");

    assert!(error.to_string().contains(&address.to_string()), "{error}");
}

#[test]
fn an_empty_credential_is_refused_naming_its_source() {
    let error = Credential::new(CredentialKind::ApiKey, "Secret models key anthropic", "  ")
        .expect_err("refused");
    assert_eq!(
        error.to_string(),
        "the model credential from Secret models key anthropic cannot be used: it is empty"
    );
}

#[test]
fn a_credential_never_shows_in_debug_output() {
    let credential = Credential::new(CredentialKind::ApiKey, "the test", REAL_KEY).expect("key");
    assert!(!format!("{credential:?}").contains(REAL_KEY));
}
