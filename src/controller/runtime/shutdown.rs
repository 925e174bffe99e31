//! Graceful shutdown on SIGTERM (what the kubelet sends) or Ctrl+C.

use crate::signals::StopSignals;

/// Completes when the process receives SIGTERM or SIGINT.
pub(crate) async fn signal() {
    match StopSignals::listen() {
        Ok(mut signals) => {
            signals.recv().await;
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl+C stops this process");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
