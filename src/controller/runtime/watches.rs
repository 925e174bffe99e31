//! The watches of one term: one per kind, each filling a cache (trimmed to what reconciles
//! read, indexed by Feature) and yielding the changed objects that trigger reconciles, with
//! a short reconnect backoff. Pods and Leases are watched once the Task cache is filled.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::trigger::{PredicateFilter, lease_predicate, pod_predicate};
use crate::api::{Feature, Task};
use crate::controller::cache::descriptions::Descriptions;
use crate::controller::cache::filled::{CachesFilled, Filled};
use crate::controller::cache::index::{Index, Indexes};
use crate::controller::cache::lease_cache::{self, LeaseCache};
use crate::controller::cache::retention::{self, SharedWriter};
use crate::controller::cache::trim;
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::plan::pod::{ATTEMPT_LABEL, FEATURE_LABEL};

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

/// The changed objects of a watch (each triggers a reconcile).
pub(super) type Touched<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The caches a reconcile reads (Tasks, agent Pods, claim Leases), each with the stream of
/// changed objects that fills it and triggers reconciles.
pub(super) struct Caches {
    pub(super) tasks: Store<CachedTask>,
    pub(super) pods: Store<CachedPod>,
    pub(super) leases: Store<Lease>,
    pub(super) lease_cache: LeaseCache,
    pub(super) task_changes: Touched<CachedTask>,
    pub(super) pod_changes: Touched<CachedPod>,
    pub(super) lease_changes: Touched<Lease>,
    pub(super) pod_writer: SharedWriter<CachedPod>,
    pub(super) retired_pods: retention::Retired,
    pub(super) indexes: Indexes,
    pub(super) filled: CachesFilled,
    pub(super) descriptions: Descriptions,
}

impl Caches {
    /// Starts the watches of Tasks, agent Pods and claim Leases (each polled by the
    /// reconciler's triggers).
    pub(super) fn start(client: &Client, namespace: Option<&str>) -> Self {
        let indexes = Indexes::default();
        // Standalone Tasks' descriptions are taken before the cache drops them, and
        // forgotten with their Task.
        let descriptions = Descriptions::default();
        let (following, forgetting) = (descriptions.clone(), descriptions.clone());
        let task_cache = cached(
            api::<Task>(client, namespace),
            watcher::Config::default(),
            move |task: Task| {
                following.follow(&task);
                CachedTask::from(task)
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
            CachedPod::from,
            move |event| retention::retiring(event, &retired, &recorded_by),
            vec![indexes.pods.clone()],
            Some(pod_predicate),
        );
        // Spent claims whose attempt the cached Task records are retired from the cache.
        let spent_of = tasks.clone();
        let lease_cache = cached(
            api::<Lease>(client, namespace),
            watcher::Config::default().labels(FEATURE_LABEL),
            |mut lease: Lease| {
                trim::trim_metadata(&mut lease.metadata);
                lease
            },
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

/// The Features and the stream of changed Features that fills their cache. Features are
/// cached trimmed ([`trim::trim_feature`]): without managedFields (with 200 templates
/// those name every field of every template and would be most of the Feature cache) and
/// without their templates' texts.
pub(super) fn features(
    client: &Client,
    namespace: Option<&str>,
) -> (
    Store<Feature>,
    impl Stream<Item = Result<Feature, watcher::Error>> + Send + 'static,
) {
    let (features, writer) = reflector::store();
    let cached = features.clone();
    let changes = watcher(
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
    (features, changes)
}

/// A cache of `K` and the stream of changed objects that keeps it filled (each watched
/// object turned by `keep` into what reconciles read, see [`trim`], and each event passed through
/// `admit`, which may drop it or turn it into another) and the
/// `indexes` over it, reconnecting with [`WatchBackoff`], and the cache's writer. With
/// `predicate`, a changed object triggers a reconcile only when that value changed
/// ([`PredicateFilter`]); the cache and indexes follow every change.
fn cached<W, K>(
    api: Api<W>,
    config: watcher::Config,
    mut keep: impl FnMut(W) -> K + Send + 'static,
    mut admit: impl FnMut(watcher::Event<K>) -> Option<watcher::Event<K>> + Send + 'static,
    indexes: Vec<Index<K>>,
    predicate: Option<fn(&K) -> u64>,
) -> Cached<K>
where
    W: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    W::DynamicType: Default,
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer: SharedWriter<K> = Arc::default();
    let reader = crate::sync::lock(&writer).as_reader();
    let watch_writer = Arc::clone(&writer);
    let (signal, filled) = crate::controller::cache::filled::filled();
    let mut triggers = PredicateFilter::new(predicate);
    let stream = watcher(api, config)
        .backoff(WatchBackoff::default())
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(event) => admit(kept(event, &mut keep)).map(Ok),
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
        .filter_map(move |event| std::future::ready(triggers.admit(event)))
        .boxed();
    Cached {
        store: reader,
        changes: stream,
        writer,
        filled,
    }
}

/// `event` with its object turned by `keep` into what the cache holds.
fn kept<W, K>(event: watcher::Event<W>, keep: &mut impl FnMut(W) -> K) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(keep(object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(keep(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(keep(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A cache made by [`cached`].
struct Cached<K: Lookup + Clone + 'static>
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
