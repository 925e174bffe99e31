//! Running the controller: its settings, the metrics server, and leader election
//! (re-campaigning after a lost term) around the terms of reconciling
//! ([`super::term`]), until graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{FutureExt, Shared};
use kube::{Api, Client};

use super::leader::{self, ElectionConfig};
use super::metrics::{Metrics, MetricsRegistry};
use super::server::{self, Health, ServerError};
use super::term::Term;
use crate::controller::act::claim::Leases;
use crate::controller::plan::pod::SidecarMode;

/// Whether agent Pods use native sidecars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeSidecars {
    /// Native when the API server is Kubernetes 1.29 or newer.
    Auto,
    /// Always native.
    Always,
    /// Never native.
    Never,
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Namespace to watch; `None` for all namespaces.
    pub namespace: Option<String>,
    /// The controller's image (the `ralph` binary for agent Pods).
    pub ralph_image: String,
    /// Service account of agent Pods (used by their sidecar only).
    pub agent_service_account: String,
    /// Native sidecar choice.
    pub native_sidecars: NativeSidecars,
    /// Controller-wide limit on running attempts.
    pub max_concurrent_attempts: usize,
    /// How long the API server may take to answer a request.
    pub api_timeout: Duration,
    /// How long a request may wait in the client's rate limit before it is sent (zero for
    /// an unthrottled client): each call's limit is this plus `api_timeout`.
    pub queue_wait: Duration,
    /// Leader election; `None` to lead at once.
    pub leader_election: Option<LeaderElection>,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`; `None` for nowhere.
    pub metrics_addr: Option<SocketAddr>,
    /// This replica's name, for Events.
    pub instance: String,
    /// How long finished agent Pods are kept (for `kubectl logs`) before they are deleted.
    pub finished_pod_ttl: Duration,
    /// Cluster-wide model prices for agent Pods' gateways (a Feature's own win).
    pub gateway_prices: crate::gateway::PriceTable,
}

impl ControllerConfig {
    /// The limit of one API call of the controller's client, its wait for a token included.
    pub fn call_limit(&self) -> Duration {
        self.api_timeout.saturating_add(self.queue_wait)
    }
}

/// Leader election: where its Lease is, its timings, and the client that renews it.
#[derive(Clone)]
pub struct LeaderElection {
    /// Namespace of the election Lease.
    pub namespace: String,
    /// Lease name, identity and timings.
    pub election: ElectionConfig,
    /// A client of its own (as kube-controller-manager's elections have), so renewals never
    /// queue behind the reconciles' requests in the controller client's rate limit.
    pub client: Client,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("namespace", &self.namespace)
            .field("election", &self.election)
            .finish_non_exhaustive()
    }
}

/// Why the controller stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics server could not start or failed.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The API server's version could not be read (for `--native-sidecars auto`).
    #[error("cannot read the API server version: {0}")]
    Version(#[source] kube::Error),
}

/// Decides native sidecars from the setting and the API server's version.
pub(crate) async fn sidecar_mode(
    client: &Client,
    setting: NativeSidecars,
) -> Result<SidecarMode, RunError> {
    match setting {
        NativeSidecars::Always => Ok(SidecarMode::Native),
        NativeSidecars::Never => Ok(SidecarMode::Plain),
        NativeSidecars::Auto => {
            let info = client
                .apiserver_version()
                .await
                .map_err(RunError::Version)?;
            Ok(if supports_native_sidecars(&info.major, &info.minor) {
                SidecarMode::Native
            } else {
                SidecarMode::Plain
            })
        }
    }
}

/// Native sidecars are on by default from Kubernetes 1.29 (minor versions may carry a `+`).
pub(crate) fn supports_native_sidecars(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .unwrap_or(0)
    };
    (number(major), number(minor)) >= (1, 29)
}

/// Runs the controller until `shutdown` completes. With leader election it reconciles
/// only while it leads; losing leadership (e.g. during an API server outage) stops the
/// reconciling and starts a new campaign: the process never exits for it.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    let metrics = Metrics::default();
    let health = Health::default();
    if let Some(addr) = config.metrics_addr {
        serve_endpoints(addr, &metrics, &health).await?;
    }
    let shutdown: Shutdown =
        (Box::pin(shutdown) as Pin<Box<dyn Future<Output = ()> + Send + Sync>>).shared();
    let sidecar = tokio::select! {
        mode = sidecar_mode(&client, config.native_sidecars) => mode?,
        () = shutdown.clone() => return Ok(()),
    };
    let term = Term {
        client: &client,
        config: &config,
        sidecar,
        metrics: &metrics,
        health: &health,
    };
    match &config.leader_election {
        None => term.reconcile_until(shutdown).await,
        Some(leader) => {
            let leases = Leases::new(
                Api::namespaced(leader.client.clone(), &leader.namespace),
                config.api_timeout,
            );
            lead_while_elected(&term, leases.clone(), &leader.election, shutdown).await;
            leader::resign(&leases, &leader.election).await;
        }
    }
    Ok(())
}

/// Completes when the controller is asked to stop (shared by every term).
type Shutdown = Shared<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>;

/// Serves `/metrics`, `/healthz` and `/readyz` in the background.
async fn serve_endpoints(
    addr: SocketAddr,
    metrics: &Metrics,
    health: &Health,
) -> Result<(), ServerError> {
    let registry = Arc::new(MetricsRegistry::new(metrics));
    let (bound, serve) = server::bind(addr, server::router(registry, health.clone())).await?;
    tracing::info!(%bound, "serving /metrics, /healthz, /readyz");
    tokio::spawn(async move {
        if let Err(error) = serve.await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    Ok(())
}

/// Campaigns, reconciles for each term of leadership, and campaigns again after losing it,
/// until `shutdown`. A standby replica is ready (it has no caches to fill).
async fn lead_while_elected(
    term: &Term<'_>,
    leases: Leases,
    election: &ElectionConfig,
    shutdown: Shutdown,
) {
    let campaign = leader::spawn(leases, election.clone());
    let mut leading = campaign.leading();
    loop {
        term.health.set_ready(true);
        tokio::select! {
            _ = leading.wait_for(|leading| *leading) => {}
            () = shutdown.clone() => return,
        }
        let mut lost = campaign.leading();
        let end_of_term = {
            let shutdown = shutdown.clone();
            async move {
                tokio::select! {
                    () = shutdown => {}
                    _ = lost.wait_for(|leading| !*leading) => {}
                }
            }
        };
        term.reconcile_until(end_of_term).await;
        if shutdown.peek().is_some() {
            return;
        }
        tracing::warn!("not leading any more: reconciling stopped until this replica leads again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_sidecars_from_kubernetes_1_29() {
        assert!(supports_native_sidecars("1", "29"));
        assert!(supports_native_sidecars("1", "33+"));
        assert!(!supports_native_sidecars("1", "28"));
        assert!(!supports_native_sidecars("", ""));
    }
}
