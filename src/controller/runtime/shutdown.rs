//! Graceful shutdown on SIGTERM (what the kubelet sends) or Ctrl+C.

use crate::signals::StopSignals;

/// Completes when the process receives SIGTERM or SIGINT from now on: the handlers are
/// installed by the call, not when the future is first polled (a signal in between would
/// kill the process unheard).
pub(crate) fn signal() -> impl std::future::Future<Output = ()> {
    let listening = StopSignals::listen();
    async move {
        match listening {
            Ok(mut signals) => {
                signals.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl+C stops this process");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sigterm_before_the_first_poll_is_heard() {
        let stopped = signal();
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).expect("raise SIGTERM");
        tokio::time::timeout(std::time::Duration::from_secs(10), stopped)
            .await
            .expect("the SIGTERM sent before the first poll was heard");
    }
}
