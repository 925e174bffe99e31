//! The model gateway: a small HTTP proxy on 127.0.0.1 between an agent and its model API.
//! The agent gets the gateway's URL and a placeholder key; the gateway holds the real
//! credential, forwards each call, streams the answer back unchanged, meters the usage each
//! answer reports on the wire ([`Meter`]), and refuses model calls once the attempt's share
//! of the Feature's budget ([`Allowance`]) is spent. See docs/gateway.md.

mod anthropic;
mod gemini;
pub(crate) mod meter;
mod openai;
pub(crate) mod prices;
pub(crate) mod provider;
mod server;
pub mod sidecar;
mod tap;
mod usage;

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use axum::http::HeaderValue;
use axum::routing::get;
use axum::serve::ListenerExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use meter::{Allowance, Meter, Metered};
pub use prices::PriceTable;
pub use provider::{CredentialKind, Provider, SECRET_VARIABLES};

/// Longest wait for a connection to the model API.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The path that answers what the gateway metered (JSON [`Metered`]).
pub const USAGE_PATH: &str = "/_ralph/usage";

/// The real credential the gateway presents upstream. Its value never appears in `Debug`
/// output or logs.
#[derive(Clone)]
pub struct Credential {
    /// How it is presented.
    pub kind: CredentialKind,
    /// Where it came from (a variable or `Secret NAME key KEY`), for messages.
    pub source: String,
    value: HeaderValue,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The credential `value` read from `source`; an empty value or one that cannot be sent
    /// in a header is refused, naming the source.
    pub fn new(
        kind: CredentialKind,
        source: &str,
        value: &str,
    ) -> Result<Credential, GatewayError> {
        let problem = |problem: &str| GatewayError::Credential {
            origin: source.to_owned(),
            problem: problem.to_owned(),
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(problem("it is empty"));
        }
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| problem("it holds characters an HTTP header cannot carry"))?;
        value.set_sensitive(true);
        Ok(Credential {
            kind,
            source: source.to_owned(),
            value,
        })
    }
}

/// What one gateway serves.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// The API it speaks.
    pub provider: Provider,
    /// The real endpoint's base URL (a company proxy, a regional endpoint).
    pub upstream: String,
    /// The credential presented upstream.
    pub credential: Credential,
    /// The key the agent is given, and must present.
    pub placeholder: String,
    /// Prices of the models.
    pub prices: PriceTable,
    /// The attempt's share of the Feature's budget.
    pub allowance: Allowance,
    /// Where to listen (`127.0.0.1:0`: any free port).
    pub listen: SocketAddr,
}

/// Why a gateway cannot start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The listening address is taken or not allowed.
    #[error(
        "the model gateway cannot listen on {address}: {source} (free the port or choose another)"
    )]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The credential cannot be used.
    #[error("the model credential from {origin} cannot be used: {problem}")]
    Credential {
        /// Where it came from.
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The upstream URL is not an http(s) URL.
    #[error("the model API base URL {url:?} is not an http:// or https:// URL")]
    Upstream {
        /// The URL given.
        url: String,
    },
    /// The system's TLS root certificates cannot be loaded.
    #[error("the model gateway cannot load the system's TLS root certificates: {0}")]
    Tls(std::io::Error),
}

/// A running gateway; stops when [`Gateway::stop`] is called or it is dropped.
pub struct Gateway {
    address: SocketAddr,
    meter: Arc<Meter>,
    placeholder: String,
    provider: Provider,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Binds the listening address and starts serving.
    pub async fn start(config: GatewayConfig) -> Result<Gateway, GatewayError> {
        let upstream = config.upstream.trim_end_matches('/').to_owned();
        if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
            return Err(GatewayError::Upstream {
                url: config.upstream,
            });
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| GatewayError::Bind {
                address: config.listen,
                source,
            })?;
        let address = listener.local_addr().map_err(|source| GatewayError::Bind {
            address: config.listen,
            source,
        })?;
        let meter = Arc::new(Meter::new(config.prices, config.allowance));
        let shared = Arc::new(server::Shared {
            provider: config.provider,
            upstream,
            credential: (config.credential.kind, config.credential.value),
            placeholder: config.placeholder.clone(),
            meter: meter.clone(),
            client: upstream_client()?,
        });
        let app = axum::Router::new()
            .route(USAGE_PATH, get(server::usage))
            .fallback(server::forward)
            .with_state(shared);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        // Small SSE events must not wait for Nagle's algorithm (up to 40 ms per event).
        let listener = listener.tap_io(|stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY on a gateway connection: {error}");
            }
        });
        let task = tokio::spawn(async move {
            let serve =
                axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
            if let Err(error) = serve.await {
                tracing::warn!("the model gateway stopped: {error}");
            }
        });
        tracing::info!(provider = config.provider.name(), %address, "model gateway listening");
        Ok(Gateway {
            address,
            meter,
            placeholder: config.placeholder,
            provider: config.provider,
            stop,
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` plus the path the agent's SDK expects in its base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.address, self.provider.agent_prefix())
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What the agent gets instead of the key.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The environment that points the agent at the gateway: its base URL and placeholder
    /// key variables.
    pub fn agent_env(&self) -> Vec<(String, String)> {
        vec![
            (
                self.provider.base_url_variable().to_owned(),
                self.base_url(),
            ),
            (
                self.provider.key_variable().to_owned(),
                self.placeholder.clone(),
            ),
        ]
    }

    /// What was metered so far.
    pub fn metered(&self) -> Metered {
        self.meter.metered()
    }

    /// Stops serving (answers in flight are cut).
    pub async fn stop(mut self) -> Metered {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.meter.metered()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A fresh placeholder key: random, so only the agent given it can use the gateway.
pub fn placeholder_key() -> String {
    let bytes: [u8; 16] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("ralph-gateway-{hex}")
}

fn upstream_client() -> Result<server::Upstream, GatewayError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(GatewayError::Tls)?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod server_tests;
