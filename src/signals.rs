//! Stopping on SIGTERM (what the kubelet and `kill` send) or SIGINT (Ctrl+C), the same way
//! in the controller, the runner and `ralph run`.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which stop signal arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopSignal {
    /// SIGTERM.
    Terminate,
    /// SIGINT (Ctrl+C).
    Interrupt,
}

impl StopSignal {
    /// The signal's name, e.g. `SIGTERM`.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Interrupt => "SIGINT",
        }
    }
}

/// Listens for SIGTERM and SIGINT; while it exists they no longer end the process.
#[derive(Debug)]
pub(crate) struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    /// Starts listening.
    pub(crate) fn listen() -> std::io::Result<Self> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next stop signal. Cancel-safe: no signal is lost when the wait is
    /// dropped.
    pub(crate) async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.terminate.recv() => StopSignal::Terminate,
            _ = self.interrupt.recv() => StopSignal::Interrupt,
        }
    }
}
