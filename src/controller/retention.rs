//! Finished agent Pods stay for `kubectl logs` for a retention time (like a Job's
//! `ttlSecondsAfterFinished`), then a sweep deletes them. A Pod whose result the controller
//! has not recorded yet is never deleted.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use super::call::bounded;
use super::run_view::{finished_at, run_view};
use super::runtime::{SharedWriter, lock};
use super::trim;
use crate::api::Task;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::RunView;

/// True when `pod` finished more than `ttl` before `now` and its Task (if it still exists)
/// no longer waits for its result.
pub fn is_due(pod: &Pod, task: Option<&Task>, now: Timestamp, ttl: Duration) -> bool {
    if !matches!(run_view(Some(pod), true), RunView::Ended { .. }) {
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

/// The agent Pod cache as the sweep sees it: the Pods, their cache's writer (to replace a
/// finished Pod by its slim form), and the Tasks that own them.
pub struct PodCache {
    /// The cached agent Pods.
    pub pods: Store<Pod>,
    /// The Pod cache's writer, shared with its watch.
    pub writer: SharedWriter<Pod>,
    /// The cached Tasks.
    pub tasks: Store<Task>,
}

/// How often finished Pods whose attempt is recorded are replaced by their slim form.
pub const SLIM_PERIOD: Duration = Duration::from_secs(2);

/// The Task that owns `pod`, if it is cached.
fn owner(pod: &Pod, tasks: &Store<Task>) -> Option<Arc<Task>> {
    let namespace = pod.namespace().unwrap_or_default();
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "Task")
        .and_then(|o| tasks.get(&ObjectRef::new(&o.name).within(&namespace)))
}

/// `pod`'s slim form ([`trim::slim_recorded_pod`]) when it has ended and its cached Task
/// has recorded its attempt ([`trim::is_recorded`]); `None` while anything may still read
/// its result, and for a Pod already slim (a slim Pod has no uid).
pub fn slim_if_recorded(pod: &Pod, tasks: &Store<Task>) -> Option<Pod> {
    if pod.metadata.uid.is_none() || !matches!(run_view(Some(pod), true), RunView::Ended { .. }) {
        return None;
    }
    let task = owner(pod, tasks)?;
    trim::is_recorded(pod, &task).then(|| trim::slim_recorded_pod(pod))
}

/// Replaces every cached finished Pod whose attempt is recorded by its slim form, unless
/// the watch brought a newer version of it meanwhile.
fn slim_recorded(cache: &PodCache) {
    for pod in cache.pods.state() {
        let Some(slim) = slim_if_recorded(&pod, &cache.tasks) else {
            continue;
        };
        let mut writer = lock(&cache.writer);
        let current = cache.pods.get(&ObjectRef::from_obj(pod.as_ref()));
        if current.is_some_and(|c| c.metadata.resource_version == pod.metadata.resource_version) {
            writer.apply_watcher_event(&watcher::Event::Apply(slim));
        }
    }
}

/// Every [`SLIM_PERIOD`], slims the cached finished Pods whose attempt is recorded; every
/// `ttl / 4` (between 1 s and 1 min) deletes the due ones; for ever.
pub async fn sweep(client: Client, cache: PodCache, ttl: Duration, api_timeout: Duration) {
    let period = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut last_deletions = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(SLIM_PERIOD.min(period)).await;
        slim_recorded(&cache);
        if last_deletions.elapsed() < period {
            continue;
        }
        last_deletions = tokio::time::Instant::now();
        let now = Timestamp::now();
        for pod in cache.pods.state() {
            let task = owner(&pod, &cache.tasks);
            if !is_due(&pod, task.as_deref(), now, ttl) {
                continue;
            }
            let namespace = pod.namespace().unwrap_or_default();
            let name = pod.name_any();
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let op = format!("delete finished Pod {namespace}/{name}");
            match bounded(api_timeout, op, api.delete(&name, &DeleteParams::default())).await {
                Ok(_) => tracing::debug!(pod = %name, "deleted finished Pod after its retention"),
                Err(error) if error.is_not_found() => {}
                Err(error) => tracing::warn!(%error, "could not delete a finished Pod"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn pod(finished: Option<i64>) -> Pod {
        let state = match finished {
            Some(s) => serde_json::json!({"terminated": {"exitCode": 0,
                "finishedAt": at(s).to_string()}}),
            None => serde_json::json!({"running": {}}),
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "f-t-a1", "creationTimestamp": at(0).to_string()},
            "status": {"containerStatuses": [{"name": "agent", "image": "a", "imageID": "",
                "ready": false, "restartCount": 0, "state": state}]}
        }))
        .expect("pod")
    }

    fn task(phase: &str, holder: &str) -> Task {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "f-t"},
            "spec": {"featureRef": "f"},
            "status": {"phase": phase, "claim": {"lease": "f-t", "holder": holder, "attempt": 1}}
        }))
        .expect("task")
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
}
