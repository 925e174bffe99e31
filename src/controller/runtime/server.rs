//! The controller's HTTP endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::MetricsRegistry;

/// Readiness shared between the controller and the HTTP server.
#[derive(Clone, Debug, Default)]
pub(crate) struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the controller ready (its caches are filled) or not.
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the controller is ready.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct ServerState {
    registry: Arc<MetricsRegistry>,
    health: Health,
}

/// The router serving the endpoints.
pub(crate) fn router(registry: Arc<MetricsRegistry>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(ServerState { registry, health })
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.registry.encode(),
    )
}

async fn readyz(State(state): State<ServerState>) -> impl IntoResponse {
    if state.health.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// A failure to serve the endpoints.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Serving stopped with an error.
    #[error("metrics server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Binds `addr`; returns the bound address and the serving future.
pub(crate) async fn bind(
    addr: SocketAddr,
    router: Router,
) -> Result<(SocketAddr, impl Future<Output = Result<(), ServerError>>), ServerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;
    let serve = async move {
        axum::serve(listener, router)
            .await
            .map_err(ServerError::Serve)
    };
    Ok((bound, serve))
}
