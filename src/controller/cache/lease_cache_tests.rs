use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use serde_json::json;

use super::*;
use crate::api::Task;
use crate::controller::cache::index::Indexes;
use crate::controller::cache::retention::SharedWriter;
use crate::controller::plan::cached::CachedTask;

const TASK_UID: &str = "task-uid";

/// A claim Lease of Task `ns/f-t` held by `holder`, owned by the Task with `owner_uid`.
fn lease_owned_by(holder: Option<&str>, owner_uid: Option<&str>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("f-t".to_owned()),
            namespace: Some("ns".to_owned()),
            resource_version: Some("1".to_owned()),
            labels: Some([("ralph.dev/feature".to_owned(), "f".to_owned())].into()),
            owner_references: owner_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "ralph.dev/v1alpha1".to_owned(),
                    kind: "Task".to_owned(),
                    name: "f-t".to_owned(),
                    uid: uid.to_owned(),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(60),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

fn lease(holder: &str) -> Lease {
    lease_owned_by(Some(holder), Some(TASK_UID))
}

/// A Task cache holding `ns/f-t` in `phase` with `attempts` started.
fn tasks(phase: &str, attempts: u32) -> Store<CachedTask> {
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "f-t", "namespace": "ns", "uid": TASK_UID},
        "spec": {"featureRef": "f"},
        "status": {"phase": phase, "attemptCount": attempts}
    }))
    .expect("task");
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(CachedTask::from(task)));
    store
}

fn no_tasks() -> Store<CachedTask> {
    reflector::store::<CachedTask>().0
}

// --- The rule ----------------------------------------------------------------------

#[test]
fn a_done_tasks_claim_by_its_last_attempt_is_retired() {
    assert!(is_retirable(&lease("f-t-a1"), &tasks("Done", 1)));
}

#[test]
fn the_claim_of_a_task_waiting_for_its_retry_is_retired() {
    assert!(is_retirable(&lease("f-t-a2"), &tasks("Pending", 2)));
}

#[test]
fn an_earlier_attempts_claim_is_retired_while_a_later_one_runs() {
    assert!(is_retirable(&lease("f-t-a1"), &tasks("Running", 2)));
}

#[test]
fn the_running_attempts_claim_is_kept() {
    assert!(!is_retirable(&lease("f-t-a2"), &tasks("Running", 2)));
}

#[test]
fn a_claim_for_an_attempt_not_recorded_as_started_is_kept() {
    assert!(!is_retirable(&lease("f-t-a2"), &tasks("Pending", 1)));
    assert!(!is_retirable(&lease("f-t-a2"), &tasks("Done", 1)));
}

#[test]
fn a_claim_whose_task_is_not_cached_is_kept() {
    assert!(!is_retirable(&lease("f-t-a1"), &no_tasks()));
}

#[test]
fn a_claim_owned_by_an_earlier_task_of_the_same_name_is_kept() {
    let old = lease_owned_by(Some("f-t-a1"), Some("an-earlier-uid"));
    assert!(!is_retirable(&old, &tasks("Done", 1)));
}

#[test]
fn a_lease_no_task_owns_is_kept() {
    let election = lease_owned_by(Some("f-t-a1"), None);
    assert!(!is_retirable(&election, &tasks("Done", 1)));
}

#[test]
fn a_released_lease_is_kept() {
    let released = lease_owned_by(None, Some(TASK_UID));
    assert!(!is_retirable(&released, &tasks("Done", 1)));
}

#[test]
fn a_task_without_status_keeps_its_claim() {
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "f-t", "namespace": "ns", "uid": TASK_UID},
        "spec": {"featureRef": "f"}
    }))
    .expect("task");
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(CachedTask::from(task)));
    assert!(!is_retirable(&lease("f-t-a1"), &store));
}

// --- The watch ---------------------------------------------------------------------

#[test]
fn an_update_of_a_spent_claim_removes_it_from_the_cache() {
    let event = retiring(Event::Apply(lease("f-t-a1")), &tasks("Done", 1));
    assert!(matches!(event, Some(Event::Delete(_))));
}

#[test]
fn a_relist_leaves_a_spent_claim_out() {
    let event = retiring(Event::InitApply(lease("f-t-a1")), &tasks("Done", 1));
    assert!(event.is_none());
}

#[test]
fn an_update_of_a_live_claim_is_cached() {
    let event = retiring(Event::Apply(lease("f-t-a1")), &tasks("Running", 1));
    assert!(matches!(event, Some(Event::Apply(_))));
    let event = retiring(Event::InitApply(lease("f-t-a1")), &tasks("Running", 1));
    assert!(matches!(event, Some(Event::InitApply(_))));
}

#[test]
fn a_deleted_claim_leaves_the_cache() {
    let event = retiring(Event::Delete(lease("f-t-a1")), &tasks("Done", 1));
    assert!(matches!(event, Some(Event::Delete(_))));
}

// --- The sweep and the claim path ---------------------------------------------------

/// A Lease cache holding `cached`, with its index, over `tasks`.
fn cache_of(cached: Vec<Lease>, tasks: Store<CachedTask>) -> (LeaseCache, Restored, Indexes) {
    let (store, writer) = reflector::store::<Lease>();
    let writer: SharedWriter<Lease> = Arc::new(std::sync::Mutex::new(writer));
    let indexes = Indexes::default();
    for lease in cached {
        let event = Event::Apply(lease);
        lock(&writer).apply_watcher_event(&event);
        indexes.leases.apply(&event);
    }
    let (cache, restored) = LeaseCache::new(store, writer, indexes.leases.clone(), tasks);
    (cache, restored, indexes)
}

fn cached_names(cache: &LeaseCache, indexes: &Indexes) -> (usize, usize) {
    let indexed = indexes.leases.objects(&cache.leases, "ns/f").len();
    (cache.leases.state().len(), indexed)
}

#[test]
fn the_sweep_retires_a_claim_whose_attempt_was_recorded_since_it_was_cached() {
    let (cache, _restored, indexes) = cache_of(vec![lease("f-t-a1")], tasks("Done", 1));
    assert_eq!(cache.retire_spent(), 1);
    assert_eq!(cached_names(&cache, &indexes), (0, 0));
}

#[test]
fn the_sweep_keeps_a_live_claim() {
    let (cache, _restored, indexes) = cache_of(vec![lease("f-t-a1")], tasks("Running", 1));
    assert_eq!(cache.retire_spent(), 0);
    assert_eq!(cached_names(&cache, &indexes), (1, 1));
}

#[tokio::test]
async fn a_lease_read_live_goes_back_in_the_cache_and_reconciles_its_feature() {
    let (cache, mut restored, indexes) = cache_of(Vec::new(), tasks("Pending", 0));
    cache.restore(lease("f-t-a1"));
    assert_eq!(cached_names(&cache, &indexes), (1, 1));
    let sent = restored.next().await.expect("a restored Lease");
    assert_eq!(holder(&sent), Some("f-t-a1"));
}

#[test]
fn a_lease_read_live_does_not_replace_the_version_the_watch_cached() {
    let mut newer = lease("f-t-a2");
    newer.metadata.resource_version = Some("2".to_owned());
    let (cache, _restored, _indexes) = cache_of(vec![newer], tasks("Running", 2));
    cache.restore(lease("f-t-a1"));
    let cached = cache.leases.state();
    assert_eq!(cached.len(), 1);
    assert_eq!(holder(&cached[0]), Some("f-t-a2"));
}

#[test]
fn a_lease_the_api_server_no_longer_has_leaves_the_cache() {
    let (cache, _restored, indexes) = cache_of(vec![lease("f-t-a1")], tasks("Running", 1));
    cache.forget_gone(&lease("f-t-a1"));
    assert_eq!(cached_names(&cache, &indexes), (0, 0));
}

#[test]
fn a_newer_version_the_watch_brought_stays_when_an_older_one_is_gone() {
    let mut newer = lease("f-t-a2");
    newer.metadata.resource_version = Some("2".to_owned());
    let (cache, _restored, indexes) = cache_of(vec![newer], tasks("Running", 2));
    cache.forget_gone(&lease("f-t-a1"));
    assert_eq!(cached_names(&cache, &indexes), (1, 1));
}
