//! Finished agent Pods stay for `kubectl logs` for a retention time (like a Job's
//! `ttlSecondsAfterFinished`), then a sweep deletes them. A Pod whose result the controller
//! has not recorded yet is never deleted.
//!
//! Once its Task records the attempt's end, nothing reads a finished Pod from the cache: it
//! is retired from it ([`Retired`]: its name and when it finished, about 100 bytes instead
//! of a cached Pod's 4 to 8 KiB), until the sweep deletes it. 10,000 finished Pods kept for
//! an hour cost the controller about 1 MiB.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DeleteParams;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::{Api, Client};

use super::index::Index;
use super::trim;
use crate::controller::client::call::bounded;
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::plan::run_view::{finished_at, run_view};
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::RunView;
use crate::sync::lock;

/// The writer of a cache, shared by its watch and whatever else changes the cache (the
/// retention sweep retires finished Pods whose attempt is recorded).
pub(crate) type SharedWriter<K> = Arc<Mutex<kube::runtime::reflector::store::Writer<K>>>;

/// Finished agent Pods whose attempt is recorded, out of the Pod cache until deleted: for
/// each (namespace, name), when it finished.
#[derive(Clone, Default)]
pub struct Retired(Arc<Mutex<HashMap<(String, String), Timestamp>>>);

impl Retired {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Timestamp>> {
        lock(&self.0)
    }

    fn key(pod: &CachedPod) -> (String, String) {
        (pod.namespace().unwrap_or_default(), pod.name_any())
    }

    /// Retires `pod` when it has ended and its cached Task has recorded its attempt
    /// ([`trim::is_recorded`]); true when it is (or was already) retired. A Pod whose
    /// Task is not cached, or whose result may still be read, stays cached.
    pub fn retire_if_recorded(&self, pod: &CachedPod, tasks: &Store<CachedTask>) -> bool {
        if !matches!(run_view(Some(pod), true, None), RunView::Ended { .. }) {
            return false;
        }
        let recorded = owning_task(
            pod.metadata.namespace.as_deref(),
            pod.owner_references(),
            tasks,
        )
        .is_some_and(|task| trim::is_recorded(pod, &task));
        if recorded {
            let finished = finished_at(pod)
                .or_else(|| pod.creation_timestamp().map(|t| t.0))
                .unwrap_or_else(Timestamp::now);
            self.entries().insert(Self::key(pod), finished);
        }
        recorded
    }

    /// Forgets `pod` (it was deleted).
    pub fn forget(&self, pod: &CachedPod) {
        self.entries().remove(&Self::key(pod));
    }

    /// The retired Pods finished at least `ttl` before `now`, as (namespace, name).
    pub fn due(&self, now: Timestamp, ttl: Duration) -> Vec<(String, String)> {
        self.entries()
            .iter()
            .filter(|(_, at)| now.duration_since(**at).as_secs_f64() >= ttl.as_secs_f64())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// How many Pods are retired.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// True when no Pod is retired.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn forget_named(&self, key: &(String, String)) {
        self.entries().remove(key);
    }
}

/// The watch event that caches `event`'s Pod, with finished Pods whose attempt is recorded
/// retired instead ([`Retired::retire_if_recorded`], [`retire_event`]); a deletion forgets it.
pub fn retiring(
    event: Event<CachedPod>,
    retired: &Retired,
    tasks: &Store<CachedTask>,
) -> Option<Event<CachedPod>> {
    if let Event::Delete(pod) = &event {
        retired.forget(pod);
    }
    retire_event(event, |pod| retired.retire_if_recorded(pod, tasks))
}

/// `event` as the cache takes it when objects that `retire` says are done with stay out of
/// it: an update of one becomes a deletion from the cache, a re-list leaves it out.
pub fn retire_event<K>(event: Event<K>, retire: impl FnOnce(&K) -> bool) -> Option<Event<K>> {
    let done_with = match &event {
        Event::Apply(object) | Event::InitApply(object) => retire(object),
        _ => false,
    };
    match event {
        Event::Apply(object) if done_with => Some(Event::Delete(object)),
        Event::InitApply(_) if done_with => None,
        event => Some(event),
    }
}

/// True when `pod` finished more than `ttl` before `now` and its Task (if it still exists)
/// no longer waits for its result.
pub fn is_due(pod: &CachedPod, task: Option<&CachedTask>, now: Timestamp, ttl: Duration) -> bool {
    if !matches!(run_view(Some(pod), true, None), RunView::Ended { .. }) {
        return false;
    }
    let awaited = task.and_then(|t| t.status.as_ref()).is_some_and(|s| {
        s.phase == TaskPhase::Running
            && s.claim.as_ref().is_some_and(|c| c.holder == pod.name_any())
    });
    if awaited {
        return false;
    }
    let finished = finished_at(pod).or_else(|| pod.creation_timestamp().map(|t| t.0));
    finished.is_some_and(|at| now.duration_since(at).as_secs_f64() >= ttl.as_secs_f64())
}

/// The agent Pod cache as the sweep sees it: the Pods, their cache's writer and index (to
/// retire a Pod), the retired Pods, and the Tasks that own them.
pub struct PodCache {
    /// The cached agent Pods.
    pub pods: Store<CachedPod>,
    /// The Pod cache's writer, shared with its watch.
    pub writer: SharedWriter<CachedPod>,
    /// The Pod index the watch keeps with the cache.
    pub index: Index<CachedPod>,
    /// The retired Pods.
    pub retired: Retired,
    /// The cached Tasks.
    pub tasks: Store<CachedTask>,
}

/// How often finished Pods whose attempt was recorded meanwhile are retired from the cache.
pub const RETIRE_PERIOD: Duration = Duration::from_secs(2);

/// The cached Task that owns `object` (an agent Pod, a claim Lease): the Task its owner
/// reference names, with the same uid (not a later Task of that name).
pub fn owning_task(
    namespace: Option<&str>,
    owners: &[OwnerReference],
    tasks: &Store<CachedTask>,
) -> Option<Arc<CachedTask>> {
    let namespace = namespace?;
    let owner = owners.iter().find(|o| o.kind == "Task")?;
    let task = tasks.get(&ObjectRef::new(&owner.name).within(namespace))?;
    (task.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some(task)
}

/// Retires every cached finished Pod whose attempt was recorded since the watch brought it,
/// unless the watch brought a newer version of it meanwhile.
fn retire_recorded(cache: &PodCache) {
    retire_from_cache(&cache.pods, &cache.writer, &cache.index, |pod| {
        cache.retired.retire_if_recorded(pod, &cache.tasks)
    });
}

/// Removes from the cache `store` (and `index`, through the cache's `writer`) every object
/// `retire` says is done with, unless the watch brought a newer version of it meanwhile.
/// Returns how many it removed.
pub fn retire_from_cache<K>(
    store: &Store<K>,
    writer: &SharedWriter<K>,
    index: &Index<K>,
    mut retire: impl FnMut(&K) -> bool,
) -> usize
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut retired = 0;
    for object in store.state() {
        if remove_if_unchanged(store, writer, index, &object, &mut retire) {
            retired += 1;
        }
    }
    retired
}

/// Removes `object` from the cache `store` (written through `writer`, kept in step with
/// `index`) when `remove` says so, unless the watch brought a newer version of it
/// meanwhile (then `remove` is not asked); true if removed.
pub fn remove_if_unchanged<K>(
    store: &Store<K>,
    writer: &SharedWriter<K>,
    index: &Index<K>,
    object: &K,
    remove: impl FnOnce(&K) -> bool,
) -> bool
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut writer = lock(writer);
    let current = store.get(&ObjectRef::from_obj(object));
    let unchanged =
        current.is_some_and(|c| Lookup::resource_version(&*c) == Lookup::resource_version(object));
    if !unchanged || !remove(object) {
        return false;
    }
    let event = Event::Delete(object.clone());
    writer.apply_watcher_event(&event);
    index.apply(&event);
    true
}

/// Every [`RETIRE_PERIOD`], retires the cached finished Pods whose attempt is recorded;
/// every `ttl / 4` (between 1 s and 1 min) deletes the due ones, cached or retired; for
/// ever.
pub async fn sweep(client: Client, cache: PodCache, ttl: Duration, api_timeout: Duration) {
    let period = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut last_deletions = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(RETIRE_PERIOD.min(period)).await;
        retire_recorded(&cache);
        if last_deletions.elapsed() < period {
            continue;
        }
        last_deletions = tokio::time::Instant::now();
        let now = Timestamp::now();
        let cached = cache.pods.state().into_iter().filter(|pod| {
            let task = owning_task(
                pod.metadata.namespace.as_deref(),
                pod.owner_references(),
                &cache.tasks,
            );
            is_due(pod, task.as_deref(), now, ttl)
        });
        let mut due: Vec<(String, String)> = cached
            .map(|pod| (pod.namespace().unwrap_or_default(), pod.name_any()))
            .collect();
        due.extend(cache.retired.due(now, ttl));
        for key in due {
            let (namespace, name) = &key;
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let op = format!("delete finished Pod {namespace}/{name}");
            match bounded(api_timeout, op, api.delete(name, &DeleteParams::default())).await {
                Ok(_) => {
                    cache.retired.forget_named(&key);
                    tracing::debug!(pod = %name, "deleted finished Pod after its retention");
                }
                Err(error) if error.is_not_found() => cache.retired.forget_named(&key),
                Err(error) => tracing::warn!(%error, "could not delete a finished Pod"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Task;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn pod(finished: Option<i64>) -> CachedPod {
        let state = match finished {
            Some(s) => serde_json::json!({"terminated": {"exitCode": 0,
                "finishedAt": at(s).to_string()}}),
            None => serde_json::json!({"running": {}}),
        };
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "f-t-a1", "creationTimestamp": at(0).to_string()},
            "status": {"containerStatuses": [{"name": "agent", "image": "a", "imageID": "",
                "ready": false, "restartCount": 0, "state": state}]}
        }))
        .expect("pod");
        pod.into()
    }

    fn task(phase: &str, holder: &str) -> CachedTask {
        let task: Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "f-t"},
            "spec": {"featureRef": "f"},
            "status": {"phase": phase, "claim": {"lease": "f-t", "holder": holder, "attempt": 1}}
        }))
        .expect("task");
        task.into()
    }

    #[test]
    fn a_finished_pod_is_kept_until_its_retention_ends() {
        let pod = pod(Some(100));
        assert!(!is_due(&pod, None, at(100 + 3599), HOUR));
        assert!(is_due(&pod, None, at(100 + 3600), HOUR));
    }

    #[test]
    fn a_running_pod_is_never_due() {
        assert!(!is_due(&pod(None), None, at(1_000_000), HOUR));
    }

    #[test]
    fn a_pod_whose_result_is_not_recorded_yet_is_kept() {
        let running = task("Running", "f-t-a1");
        assert!(!is_due(&pod(Some(0)), Some(&running), at(1_000_000), HOUR));
        let done = task("Done", "f-t-a1");
        assert!(is_due(&pod(Some(0)), Some(&done), at(1_000_000), HOUR));
    }

    fn owned_pod(finished: Option<i64>) -> CachedPod {
        let mut pod = pod(finished);
        pod.metadata.namespace = Some("ns".to_owned());
        pod.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "ralph.dev/v1alpha1".to_owned(),
                kind: "Task".to_owned(),
                name: "f-t".to_owned(),
                uid: "tu".to_owned(),
                ..Default::default()
            },
        ]);
        pod
    }

    /// A Task cache holding `f-t` with `status`.
    fn tasks_with(status: serde_json::Value) -> Store<CachedTask> {
        let task: Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "f-t", "namespace": "ns", "uid": "tu"},
            "spec": {"featureRef": "f"},
            "status": status
        }))
        .expect("task");
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Apply(CachedTask::from(task)));
        store
    }

    fn recorded_done() -> Store<CachedTask> {
        tasks_with(serde_json::json!({"phase": "Done", "attemptCount": 1,
            "attempts": [{"number": 1, "pod": "f-t-a1", "outcome": "done"}]}))
    }

    fn awaiting_result() -> Store<CachedTask> {
        tasks_with(serde_json::json!({"phase": "Running", "attemptCount": 1,
            "claim": {"lease": "f-t", "holder": "f-t-a1", "attempt": 1},
            "attempts": [{"number": 1, "pod": "f-t-a1"}]}))
    }

    #[test]
    fn an_update_of_a_finished_pod_whose_attempt_is_recorded_removes_it_from_the_cache() {
        let retired = Retired::default();
        let event = retiring(
            Event::Apply(owned_pod(Some(100))),
            &retired,
            &recorded_done(),
        );
        assert!(matches!(event, Some(Event::Delete(_))));
        assert_eq!(retired.len(), 1);
    }

    #[test]
    fn a_relist_leaves_out_a_finished_pod_whose_attempt_is_recorded() {
        let retired = Retired::default();
        let event = retiring(
            Event::InitApply(owned_pod(Some(100))),
            &retired,
            &recorded_done(),
        );
        assert!(event.is_none());
        assert_eq!(retired.len(), 1);
    }

    #[test]
    fn a_finished_pod_whose_result_is_awaited_stays_cached() {
        let retired = Retired::default();
        let event = retiring(
            Event::Apply(owned_pod(Some(100))),
            &retired,
            &awaiting_result(),
        );
        assert!(matches!(event, Some(Event::Apply(_))));
        assert!(retired.is_empty());
    }

    #[test]
    fn a_finished_pod_whose_task_is_not_cached_stays_cached() {
        let retired = Retired::default();
        let (no_tasks, _writer) = kube::runtime::reflector::store::<CachedTask>();
        let event = retiring(Event::Apply(owned_pod(Some(100))), &retired, &no_tasks);
        assert!(matches!(event, Some(Event::Apply(_))));
        assert!(retired.is_empty());
    }

    #[test]
    fn a_running_pod_of_a_recorded_attempt_stays_cached() {
        let retired = Retired::default();
        let event = retiring(Event::Apply(owned_pod(None)), &retired, &recorded_done());
        assert!(matches!(event, Some(Event::Apply(_))));
        assert!(retired.is_empty());
    }

    #[test]
    fn a_deleted_pod_is_forgotten() {
        let retired = Retired::default();
        let tasks = recorded_done();
        retiring(Event::Apply(owned_pod(Some(100))), &retired, &tasks);
        let event = retiring(Event::Delete(owned_pod(Some(100))), &retired, &tasks);
        assert!(matches!(event, Some(Event::Delete(_))));
        assert!(retired.is_empty());
    }

    #[test]
    fn a_retired_pod_is_due_when_its_retention_ends() {
        let retired = Retired::default();
        retired.retire_if_recorded(&owned_pod(Some(100)), &recorded_done());
        assert!(retired.due(at(100 + 3599), HOUR).is_empty());
        assert_eq!(
            retired.due(at(100 + 3600), HOUR),
            vec![("ns".to_owned(), "f-t-a1".to_owned())]
        );
    }
}
