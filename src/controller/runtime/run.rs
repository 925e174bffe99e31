//! Running the controller: the metrics server, leader election (re-campaigning after a
//! lost term), caches (one watch per kind, shared by the reconciler and its triggers, with
//! a short reconnect backoff), readiness, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;

use futures::StreamExt;
use futures::future::{FutureExt, Shared};
use futures::stream::BoxStream;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};

use crate::controller::cache::filled::{CachesFilled, Filled};
use kube::runtime::utils::Backoff;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::context::Context;
use super::feature::{error_policy, reconcile};
use super::leader::{self, ElectionConfig};
use super::metrics::{Metrics, MetricsRegistry};
use super::server::{self, Health, ServerError};
use crate::api::{Feature, Task};
use crate::controller::act::claim::{self, Leases};
use crate::controller::act::events::Events;
use crate::controller::cache::descriptions::Descriptions;
use crate::controller::cache::index::{Index, Indexes};
use crate::controller::cache::lease_cache::{self, LeaseCache};
use crate::controller::cache::retention::{self, SharedWriter};
use crate::controller::cache::slots::Slots;
use crate::controller::cache::store::Cache;
use crate::controller::cache::trim;
use crate::controller::plan::pod::{ATTEMPT_LABEL, FEATURE_LABEL, PodSettings, SidecarMode};

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

/// What one run of the reconciler (one term of leadership) is built from.
struct Term<'a> {
    client: &'a Client,
    config: &'a ControllerConfig,
    sidecar: SidecarMode,
    metrics: &'a Metrics,
    health: &'a Health,
}

impl Term<'_> {
    /// Fills fresh caches and reconciles Features until `stop` completes. `/readyz` is
    /// ready once every cache has synced.
    async fn reconcile_until(&self, stop: impl Future<Output = ()> + Send + Sync + 'static) {
        self.health.set_ready(false);
        let caches = Caches::start(self.client, self.config.namespace.as_deref());
        let ctx = Arc::new(self.context(&caches));
        let readiness = tokio::spawn(report_readiness(self.health.clone(), caches.filled.clone()));
        let gauges = tokio::spawn(count_tasks_periodically(Arc::clone(&ctx)));
        let retention = tokio::spawn(retention::sweep(
            self.client.clone(),
            retention::PodCache {
                pods: caches.pods.clone(),
                writer: Arc::clone(&caches.pod_writer),
                index: caches.indexes.pods.clone(),
                retired: caches.retired_pods.clone(),
                tasks: caches.tasks.clone(),
            },
            self.config.finished_pod_ttl,
            self.config.call_limit(),
        ));
        let lease_sweep = tokio::spawn(lease_cache::sweep(caches.lease_cache.clone()));
        run_controller(
            self.client,
            self.config.namespace.as_deref(),
            caches,
            ctx,
            stop,
        )
        .await;
        readiness.abort();
        retention.abort();
        lease_sweep.abort();
        gauges.abort();
    }

    fn context(&self, caches: &Caches) -> Context {
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: "ralph-controller".to_owned(),
                instance: Some(self.config.instance.clone()),
            },
        );
        Context {
            client: self.client.clone(),
            api_timeout: self.config.call_limit(),
            cache: Cache {
                tasks: caches.tasks.clone(),
                pods: caches.pods.clone(),
                leases: caches.leases.clone(),
                lease_cache: caches.lease_cache.clone(),
                filled: caches.filled.clone(),
                indexes: caches.indexes.clone(),
                task_writes: Default::default(),
                slots: Slots::new(self.config.max_concurrent_attempts),
                specs: Default::default(),
                descriptions: caches.descriptions.clone(),
                shapes: Default::default(),
            },
            pod_settings: PodSettings {
                ralph_image: self.config.ralph_image.clone(),
                service_account: self.config.agent_service_account.clone(),
                sidecar: self.sidecar,
                gateway_prices: self.config.gateway_prices.clone(),
            },
            events: Events::new(recorder, self.config.call_limit()),
            metrics: self.metrics.clone(),
            applied: Default::default(),
            rests: Default::default(),
            preflight: Default::default(),
            template_applies: Arc::new(tokio::sync::Semaphore::new(
                super::context::TEMPLATE_APPLIES,
            )),
        }
    }
}

type Touched<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The caches a reconcile reads (Tasks, agent Pods, claim Leases), each with the stream of
/// changed objects that fills it and triggers reconciles.
struct Caches {
    tasks: Store<Task>,
    pods: Store<Pod>,
    leases: Store<Lease>,
    lease_cache: LeaseCache,
    task_changes: Touched<Task>,
    pod_changes: Touched<Pod>,
    lease_changes: Touched<Lease>,
    pod_writer: SharedWriter<Pod>,
    retired_pods: retention::Retired,
    indexes: Indexes,
    filled: CachesFilled,
    descriptions: Descriptions,
}

impl Caches {
    fn start(client: &Client, namespace: Option<&str>) -> Self {
        let indexes = Indexes::default();
        // Standalone Tasks' descriptions are taken before the cache drops them, and
        // forgotten with their Task.
        let descriptions = Descriptions::default();
        let (following, forgetting) = (descriptions.clone(), descriptions.clone());
        let task_cache = cached(
            api::<Task>(client, namespace),
            watcher::Config::default(),
            move |task: &mut Task| {
                following.follow(task);
                trim::trim_task(task);
            },
            move |event| {
                if let watcher::Event::Delete(task) = &event {
                    forgetting.forget(task);
                }
                Some(event)
            },
            vec![indexes.tasks.clone(), indexes.running_tasks.clone()],
            None,
        );
        let tasks = task_cache.store;
        // A finished Pod whose attempt the cached Task already records (e.g. after a
        // restart) is retired at once; the retention sweep retires those recorded later.
        let retired_pods = retention::Retired::default();
        let (retired, recorded_by) = (retired_pods.clone(), tasks.clone());
        let pod_cache = cached(
            api::<Pod>(client, namespace),
            watcher::Config::default().labels(ATTEMPT_LABEL),
            trim::trim_pod,
            move |event| retention::retiring(event, &retired, &recorded_by),
            vec![indexes.pods.clone()],
            Some(pod_predicate),
        );
        // Spent claims whose attempt the cached Task records are retired from the cache.
        let spent_of = tasks.clone();
        let lease_cache = cached(
            api::<Lease>(client, namespace),
            watcher::Config::default().labels(FEATURE_LABEL),
            |lease| trim::trim_metadata(&mut lease.metadata),
            move |event| lease_cache::retiring(event, &spent_of),
            vec![indexes.leases.clone()],
            Some(lease_predicate),
        );
        let leases = lease_cache.store;
        let (lease_cache_writer, restored) = LeaseCache::new(
            leases.clone(),
            lease_cache.writer,
            indexes.leases.clone(),
            tasks.clone(),
        );
        let lease_changes = futures::stream::select(lease_cache.changes, restored.map(Ok)).boxed();
        let filled = CachesFilled {
            tasks: task_cache.filled,
            pods: pod_cache.filled,
            leases: lease_cache.filled,
        };
        // Pods and Leases are listed once the Task cache is filled: each is then judged by
        // its Task as it arrives (10,000 finished Pods and spent Leases after a run are not
        // cached whole first, to be retired by the sweep).
        Self {
            tasks,
            pods: pod_cache.store,
            leases,
            lease_cache: lease_cache_writer,
            task_changes: task_cache.changes,
            pod_changes: once_filled(&filled.tasks, pod_cache.changes),
            lease_changes: once_filled(&filled.tasks, lease_changes),
            pod_writer: pod_cache.writer,
            retired_pods,
            indexes,
            filled,
            descriptions,
        }
    }
}

/// `changes`, not polled (so its watch not started) before `first` is filled.
fn once_filled<K: Send + 'static>(first: &Filled, changes: Touched<K>) -> Touched<K> {
    let first = first.clone();
    futures::stream::once(async move {
        // False: the first cache's watch is gone, and the controller with it.
        first.wait().await;
        changes
    })
    .flatten()
    .boxed()
}

/// How often the tasks-by-phase gauges are set from the Task cache.
const GAUGE_PERIOD: Duration = Duration::from_secs(5);

/// Sets the tasks-by-phase gauges every [`GAUGE_PERIOD`] (a walk over every cached Task,
/// kept out of the reconciles).
async fn count_tasks_periodically(ctx: Arc<Context>) {
    loop {
        super::feature::count_tasks_by_phase(&ctx);
        tokio::time::sleep(GAUGE_PERIOD).await;
    }
}

/// Marks the controller ready once every cache has been filled.
async fn report_readiness(health: Health, filled: CachesFilled) {
    health.set_ready(filled.wait_all().await);
}

/// The Feature reconciler, triggered by Features and by changes of their Tasks, Pods and
/// Leases, until `stop` (in-flight reconciles finish first).
async fn run_controller(
    client: &Client,
    namespace: Option<&str>,
    caches: Caches,
    ctx: Arc<Context>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let by_feature_label = |labels: &BTreeMap<String, String>, namespace: Option<String>| {
        let name = labels.get(FEATURE_LABEL)?;
        Some(ObjectRef::<Feature>::new(name).within(&namespace?))
    };
    // Features are cached without managedFields: with 200 templates those name every field
    // of every template and would be most of the Feature cache.
    let (features, writer) = reflector::store();
    let cached = features.clone();
    let feature_changes = watcher(
        api::<Feature>(client, namespace),
        watcher::Config::default().page_size(trim::FEATURE_LIST_PAGE),
    )
    .backoff(WatchBackoff::default())
    .modify(move |feature| {
        let before = cached.get(&ObjectRef::from_obj(feature));
        trim::trim_feature(feature, before.as_deref());
    })
    .reflect(writer)
    .applied_objects();
    Controller::for_stream(feature_changes, features)
        .watches_stream(caches.task_changes, |task: Task| {
            task.namespace()
                .map(|ns| ObjectRef::<Feature>::new(&task.spec.feature_ref).within(&ns))
        })
        .watches_stream(caches.pod_changes, move |pod: Pod| {
            by_feature_label(pod.labels(), pod.namespace())
        })
        .watches_stream(caches.lease_changes, move |lease: Lease| {
            by_feature_label(lease.labels(), lease.namespace())
        })
        .graceful_shutdown_on(stop)
        .run(timed_reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        })
        .await;
}

/// [`reconcile`], its duration recorded in `ralph_reconcile_duration_seconds`.
async fn timed_reconcile(
    feature: Arc<Feature>,
    ctx: Arc<Context>,
) -> Result<kube::runtime::controller::Action, super::feature::ReconcileError> {
    let started = std::time::Instant::now();
    let result = reconcile(feature, Arc::clone(&ctx)).await;
    ctx.metrics
        .reconcile_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

/// A cache of `K` and the stream of changed objects that keeps it filled (each object
/// trimmed by `trim` to what reconciles read, see [`trim`], and each event passed through
/// `admit`, which may drop it or turn it into another) and the
/// `indexes` over it, reconnecting with [`WatchBackoff`], and the cache's writer. With
/// `predicate`, a changed object triggers a reconcile only when that value changed
/// (every object of a re-list, and every deletion, still does); the cache and indexes
/// follow every change. This is kube-runtime's `WatchStreamExt::predicate_filter`, kept
/// here because that one keys its memory by `ObjectRef` (this one by a 16-byte hash of
/// namespace and name) and would also hold back a re-listed or deleted object whose value
/// did not change.
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
    mut admit: impl FnMut(watcher::Event<K>) -> Option<watcher::Event<K>> + Send + 'static,
    indexes: Vec<Index<K>>,
    predicate: Option<fn(&K) -> u64>,
) -> Cached<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer: SharedWriter<K> = Arc::default();
    let reader = crate::sync::lock(&writer).as_reader();
    let watch_writer = Arc::clone(&writer);
    let (signal, filled) = crate::controller::cache::filled::filled();
    // By a hash of namespace and name, not a reference: 16 bytes per cached object. Two
    // objects sharing a hash would also need equal predicate values to miss a trigger.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let stream = watcher(api, config)
        .backoff(WatchBackoff::default())
        .modify(trim)
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(event) => admit(event).map(Ok),
                Err(error) => Some(Err(error)),
            })
        })
        .inspect(move |event| {
            if let Ok(event) = event {
                // The cache and its indexes change together (others write the cache too).
                let mut writer = crate::sync::lock(&watch_writer);
                writer.apply_watcher_event(event);
                for index in &indexes {
                    index.apply(event);
                }
                if matches!(event, watcher::Event::InitDone) {
                    signal.mark();
                }
            }
        })
        .filter_map(move |event| {
            let trigger = match event {
                Ok(watcher::Event::Apply(object)) => match predicate {
                    Some(value_of) => {
                        let value = value_of(&object);
                        let changed = seen.insert(identity(&object), value) != Some(value);
                        changed.then_some(Ok(object))
                    }
                    None => Some(Ok(object)),
                },
                Ok(watcher::Event::InitApply(object)) => {
                    if let Some(value_of) = predicate {
                        seen.insert(identity(&object), value_of(&object));
                    }
                    Some(Ok(object))
                }
                Ok(watcher::Event::Delete(object)) => {
                    seen.remove(&identity(&object));
                    Some(Ok(object))
                }
                // A re-list names every object again: forget those deleted meanwhile.
                Ok(watcher::Event::Init) => {
                    seen.clear();
                    None
                }
                Ok(watcher::Event::InitDone) => None,
                Err(error) => Some(Err(error)),
            };
            std::future::ready(trigger)
        })
        .boxed();
    Cached {
        store: reader,
        changes: stream,
        writer,
        filled,
    }
}

/// A cache made by [`cached`].
struct Cached<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The objects.
    store: Store<K>,
    /// The changed objects that fill it (nothing is cached before it is polled).
    changes: Touched<K>,
    /// Its writer, shared with whatever else changes the cache.
    writer: SharedWriter<K>,
    /// Whether its first list is in.
    filled: Filled,
}

/// What about an agent Pod a reconcile acts on: its phase, whether it is being deleted, how
/// its containers ended, and a start problem a container waits for. The kubelet's other
/// status updates (conditions, readiness, IPs) trigger nothing.
fn pod_predicate(pod: &Pod) -> u64 {
    let status = pod.status.as_ref();
    let ended: Vec<(&str, Option<i32>)> = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let terminated = c.state.as_ref()?.terminated.as_ref()?;
            Some((c.name.as_str(), Some(terminated.exit_code)))
        })
        .collect();
    hash_of(&(
        status.and_then(|s| s.phase.as_deref()),
        pod.metadata.deletion_timestamp.is_some(),
        ended,
        crate::controller::plan::pod_start::start_problem(pod).map(|problem| problem.reason),
    ))
}

/// What about a claim Lease a reconcile acts on: its holder, fencing token, and whether it
/// has already expired. Renewals (the sidecar's, every few seconds per running attempt)
/// trigger nothing: expiry is a matter of time, which each reconcile schedules from the
/// newest renewal. A write that leaves the Lease expired (a renewal from a skewed clock, a
/// hand edit) triggers at once, since the scheduled wake-up is for the old expiry.
fn lease_predicate(lease: &Lease) -> u64 {
    let spec = lease.spec.as_ref();
    hash_of(&(
        spec.and_then(|s| s.holder_identity.as_deref()),
        spec.and_then(|s| s.lease_transitions),
        spec.and_then(|s| s.lease_duration_seconds),
        claim::is_expired(lease, Timestamp::now()),
    ))
}

/// An object's namespace and name, hashed.
fn identity<K: Resource>(object: &K) -> u64 {
    let meta = object.meta();
    hash_of(&(meta.namespace.as_deref(), meta.name.as_deref()))
}

fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = crate::engine::stable_hash::StableHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Watch reconnect backoff: exponential from 100 ms, capped at 2 s, with jitter, reset on
/// success. kube-runtime's default grows to 30 s, which after an API server outage leaves
/// the caches stale for minutes while the server is already back.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    /// The first delay.
    pub(crate) const MIN: Duration = Duration::from_millis(100);
    /// The longest delay.
    pub(crate) const MAX: Duration = Duration::from_secs(2);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        let jitter = delay.mul_f64(rand::random::<f64>() * 0.2);
        Some(delay + jitter)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
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

    fn claim_lease(renewed: Timestamp) -> Lease {
        Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some("controller-1".into()),
                lease_duration_seconds: Some(30),
                lease_transitions: Some(0),
                renew_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    renewed,
                )),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_renewal_of_a_live_claim_triggers_no_reconcile() {
        let now = Timestamp::now();
        let earlier = now - jiff::SignedDuration::from_secs(5);
        assert_eq!(
            lease_predicate(&claim_lease(earlier)),
            lease_predicate(&claim_lease(now))
        );
    }

    #[test]
    fn a_write_that_leaves_the_claim_expired_triggers_a_reconcile() {
        let now = Timestamp::now();
        let long_ago = now - jiff::SignedDuration::from_secs(3600);
        assert_ne!(
            lease_predicate(&claim_lease(long_ago)),
            lease_predicate(&claim_lease(now))
        );
    }
}
