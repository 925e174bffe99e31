//! Running the controller: caches (one watch per kind, shared by the reconciler and its
//! triggers), leader election, the metrics server, graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::claim::Leases;
use super::context::Context;
use super::events::Events;
use super::feature::{error_policy, reconcile};
use super::leader::{self, ElectionConfig};
use super::metrics::{Metrics, MetricsRegistry};
use super::pod::{ATTEMPT_LABEL, FEATURE_LABEL, PodSettings, SidecarMode};
use super::server::{self, Health, ServerError};
use super::slots::Slots;
use crate::api::{Feature, Task};

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
    /// Limit of every API call.
    pub api_timeout: Duration,
    /// Leader election (namespace of its Lease, and settings); `None` to lead at once.
    pub leader_election: Option<(String, ElectionConfig)>,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`; `None` for nowhere.
    pub metrics_addr: Option<SocketAddr>,
    /// This replica's name, for Events.
    pub instance: String,
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
    /// This replica lost its leadership; it stops so that only the leader reconciles.
    #[error("lost leadership")]
    LeadershipLost,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Decides native sidecars from the setting and the API server's version.
pub async fn sidecar_mode(
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
pub fn supports_native_sidecars(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .unwrap_or(0)
    };
    (number(major), number(minor)) >= (1, 29)
}

/// Runs the controller until `shutdown` completes (or leadership is lost).
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    let metrics = Metrics::default();
    let health = Health::default();
    if let Some(addr) = config.metrics_addr {
        let registry = Arc::new(MetricsRegistry::new(&metrics));
        let (bound, serve) = server::bind(addr, server::router(registry, health.clone())).await?;
        tracing::info!(%bound, "serving /metrics, /healthz, /readyz");
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                tracing::error!(%error, "metrics server stopped");
            }
        });
    }
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));

    let mut leadership = None;
    if let Some((lease_namespace, election)) = &config.leader_election {
        let leases = Leases::new(
            Api::namespaced(client.clone(), lease_namespace),
            config.api_timeout,
        );
        let mut receiver = leader::spawn(leases.clone(), election.clone());
        tokio::select! {
            _ = receiver.wait_for(|leading| *leading) => {}
            () = shutdown.clone() => return Ok(()),
        }
        leadership = Some((receiver, leases, election.clone()));
    }

    let sidecar = sidecar_mode(&client, config.native_sidecars).await?;
    let ns = config.namespace.as_deref();
    let (task_store, task_stream) = cached(api::<Task>(&client, ns), watcher::Config::default());
    let (pod_store, pod_stream) = cached(
        api::<Pod>(&client, ns),
        watcher::Config::default().labels(ATTEMPT_LABEL),
    );
    let (lease_store, lease_stream) = cached(
        api::<Lease>(&client, ns),
        watcher::Config::default().labels(FEATURE_LABEL),
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "ralph-controller".to_owned(),
            instance: Some(config.instance.clone()),
        },
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        tasks: task_store.clone(),
        pods: pod_store.clone(),
        leases: lease_store.clone(),
        pod_settings: PodSettings {
            ralph_image: config.ralph_image.clone(),
            service_account: config.agent_service_account.clone(),
            sidecar,
        },
        slots: Slots::new(config.max_concurrent_attempts),
        events: Events::new(recorder, config.api_timeout),
        metrics: metrics.clone(),
        api_timeout: config.api_timeout,
        applied: Default::default(),
        task_writes: Default::default(),
    });
    {
        let (health, tasks, pods, leases) = (health.clone(), task_store, pod_store, lease_store);
        tokio::spawn(async move {
            let ready = tasks.wait_until_ready().await.is_ok()
                && pods.wait_until_ready().await.is_ok()
                && leases.wait_until_ready().await.is_ok();
            health.set_ready(ready);
        });
    }

    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = {
        let shutdown = shutdown.clone();
        let lost = Arc::clone(&lost);
        let receiver = leadership.as_ref().map(|(r, _, _)| r.clone());
        async move {
            match receiver {
                Some(mut receiver) => tokio::select! {
                    () = shutdown => {}
                    _ = receiver.wait_for(|leading| !*leading) => {
                        lost.store(true, std::sync::atomic::Ordering::Release);
                    }
                },
                None => shutdown.await,
            }
        }
    };

    let features = api::<Feature>(&client, ns);
    let by_feature_label = |labels: &std::collections::BTreeMap<String, String>,
                            namespace: Option<String>| {
        let name = labels.get(FEATURE_LABEL)?;
        Some(ObjectRef::<Feature>::new(name).within(&namespace?))
    };
    Controller::new(features, watcher::Config::default())
        .watches_stream(task_stream, |task: Task| {
            task.namespace()
                .map(|ns| ObjectRef::<Feature>::new(&task.spec.feature_ref).within(&ns))
        })
        .watches_stream(pod_stream, move |pod: Pod| {
            by_feature_label(pod.labels(), pod.namespace())
        })
        .watches_stream(lease_stream, move |lease: Lease| {
            by_feature_label(lease.labels(), lease.namespace())
        })
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        })
        .await;

    if let Some((_, leases, election)) = &leadership {
        leader::resign(leases, election).await;
    }
    if lost.load(std::sync::atomic::Ordering::Acquire) {
        return Err(RunError::LeadershipLost);
    }
    Ok(())
}

/// A cache of `K` and the stream of changed objects that keeps it filled (managedFields
/// dropped to save memory).
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    reflector::Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
        .reflect(writer)
        .touched_objects();
    (reader, stream)
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
