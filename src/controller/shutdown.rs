//! Graceful shutdown on SIGTERM (what the kubelet sends) or Ctrl+C.

/// Completes when the process receives SIGTERM or SIGINT.
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl+C stops this process");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
