//! Model gateway figures (prints, asserts nothing): the latency a gateway adds to a
//! streamed model call (time to first byte and to the last byte, p50/p99, against the same
//! upstream called directly), and the memory it holds while streams pass through it.
//!
//! `cargo bench --bench gateway` (figures in docs/gateway.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Request, header};
use axum::response::Response;
use http_body_util::BodyExt as _;
use ralph::gateway::{
    Allowance, Credential, CredentialKind, Gateway, GatewayConfig, PriceTable, Provider,
};

const CALLS: usize = 400;
const CHUNKS: usize = 60;
const PARALLEL_STREAMS: usize = 10;

type Client =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let upstream = serve_upstream().await;
        let rss_before = rss_kib();
        let gateway = start_gateway(upstream).await;
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let direct = format!("http://{upstream}/v1/messages");
        let through = format!("{}/v1/messages", gateway.base_url());
        let key = gateway.placeholder().to_owned();
        let mut timings = (Vec::new(), Vec::new());
        for _ in 0..20 {
            call(&client, &direct, &key).await;
            call(&client, &through, &key).await;
        }
        for _ in 0..CALLS {
            timings.0.push(call(&client, &direct, &key).await);
            timings.1.push(call(&client, &through, &key).await);
        }
        report("first byte", &timings, |t| t.0);
        report("last byte", &timings, |t| t.1);
        let rss_after_calls = rss_kib();
        let parallel = (0..PARALLEL_STREAMS).map(|_| {
            let (client, through, key) = (client.clone(), through.clone(), key.clone());
            tokio::spawn(async move { call(&client, &through, &key).await })
        });
        let peak = tokio::spawn(async {
            let mut peak = 0;
            for _ in 0..50 {
                peak = peak.max(rss_kib());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            peak
        });
        futures::future::join_all(parallel).await;
        let peak = peak.await.unwrap_or_default();
        let metered = gateway.metered();
        println!(
            "gateway memory (process RSS): {rss_before} KiB before it started, \
             {rss_after_calls} KiB after {} streamed calls (+{} KiB), peak {peak} KiB with \
             {PARALLEL_STREAMS} streams at once; metered {} calls, {} output tokens",
            2 * CALLS,
            rss_after_calls.saturating_sub(rss_before),
            metered.calls,
            metered.tokens.output
        );
    });
}

/// One streamed call: time to the first body byte and to the end, microseconds.
async fn call(client: &Client, url: &str, key: &str) -> Call {
    let request = Request::post(url)
        .header("x-api-key", key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            r#"{"model":"claude-sonnet-4-5","stream":true,"messages":[]}"#,
        ))
        .expect("request");
    let started = Instant::now();
    let answer = client.request(request).await.expect("answer");
    let mut body = answer.into_body();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("frame");
        if frame.data_ref().is_some_and(|data| !data.is_empty()) {
            first.get_or_insert_with(|| micros(started.elapsed()));
        }
    }
    (first.unwrap_or_default(), micros(started.elapsed()))
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// Time to first byte and to the end of one call, microseconds.
type Call = (u64, u64);

fn report(what: &str, timings: &(Vec<Call>, Vec<Call>), pick: fn(&Call) -> u64) {
    let sorted = |calls: &[Call]| {
        let mut values: Vec<u64> = calls.iter().map(pick).collect();
        values.sort_unstable();
        values
    };
    let (direct, through) = (sorted(&timings.0), sorted(&timings.1));
    let at = |values: &[u64], q: f64| values[((values.len() - 1) as f64 * q) as usize];
    println!(
        "{what} ({CALLS} streamed calls of {CHUNKS} events): direct p50 {} us p99 {} us; \
         through the gateway p50 {} us p99 {} us; added p50 {} us p99 {} us",
        at(&direct, 0.5),
        at(&direct, 0.99),
        at(&through, 0.5),
        at(&through, 0.99),
        at(&through, 0.5).saturating_sub(at(&direct, 0.5)),
        at(&through, 0.99).saturating_sub(at(&direct, 0.99)),
    );
}

/// An upstream that streams a Messages answer of [`CHUNKS`] events at once.
async fn serve_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let app = axum::Router::new().fallback(|| async {
        let mut events = vec![Bytes::from(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":2000,\"output_tokens\":1}}}\n\n",
        )];
        for _ in 0..CHUNKS - 2 {
            events.push(Bytes::from(
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"twenty-four characters..\"}}\n\n",
            ));
        }
        events.push(Bytes::from(
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":400}}\n\n",
        ));
        let stream = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
        let mut response = Response::new(Body::from_stream(stream));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        response
    });
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

async fn start_gateway(upstream: SocketAddr) -> Gateway {
    Gateway::start(GatewayConfig {
        provider: Provider::Anthropic,
        upstream: format!("http://{upstream}"),
        credential: Credential::new(CredentialKind::ApiKey, "the bench", "sk-bench")
            .expect("credential"),
        placeholder: ralph::gateway::placeholder_key(),
        prices: PriceTable::defaults(),
        allowance: Allowance::default(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
    })
    .await
    .expect("gateway")
}

/// This process's resident set, KiB (Linux `/proc/self/status`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or_default()
}
