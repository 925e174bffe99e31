//! The controller-wide limit on running attempts (`--max-concurrent-attempts`), derived on
//! each claim from the caches: a slot is in use by every Running Task whose claim is live
//! (its Lease not shown expired or released), and by every claim this process made whose
//! attempt the Task cache does not show started yet.
//!
//! A claim ends with its attempt (`engine::lifecycle::is_spent`): the Lease of a finished
//! task, or of an attempt whose conclusion is recorded, is left to expire and uses no slot,
//! however fresh. The candidates are the Running Tasks (an index kept by the Task watch),
//! never every cached Lease, so a claim costs the same with 10 or 10,000 finished tasks.
//!
//! The only thing kept beside the caches is the short list of claims this process made that
//! the Task cache does not show as started (the claim → Running write takes a moment, and
//! watches lag behind writes); an entry leaves it as soon as the Task cache records the
//! attempt, the Task is gone from the cache, the claim would have expired, or the claim is
//! given up ([`Slots::forget`]). A Task or Feature deleted while Running gives its slot back
//! when the Task leaves the cache, with no call site involved.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::run_view::claim_view;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::attempt_id;
use crate::sync::lock;

/// The key under which the Task index keeps the Running Tasks.
pub(crate) const RUNNING: &str = "running";

/// The Task index key of `task`: [`RUNNING`] while its status records it Running.
pub(crate) fn running_key(task: &CachedTask) -> Option<String> {
    (task.status.as_ref()?.phase == TaskPhase::Running).then(|| RUNNING.to_owned())
}

/// A claim about to be made.
#[derive(Clone, Debug)]
pub struct NewClaim<'a> {
    /// The Task, `namespace/name` (its Lease has the same name).
    pub key: &'a str,
    /// The attempt the claim is for.
    pub attempt: u32,
    /// When the claim expires unless renewed, Unix ms.
    pub expires_at_ms: i64,
}

/// The caches a slot count is derived from.
#[derive(Clone, Copy)]
pub struct SlotCaches<'a> {
    /// The Tasks whose status records them Running (the Task index under [`RUNNING`]).
    pub running: &'a [Arc<CachedTask>],
    /// Every cached Task.
    pub tasks: &'a Store<CachedTask>,
    /// Every cached claim Lease.
    pub leases: &'a Store<Lease>,
}

/// Slots for running attempts, shared by all Feature reconciles.
#[derive(Clone, Debug)]
pub struct Slots {
    limit: usize,
    /// Claims made by this process (`namespace/task` → attempt, expiry in Unix ms) whose
    /// attempt the Task cache does not show started yet.
    unstarted: Arc<Mutex<HashMap<String, (u32, i64)>>>,
}

impl Slots {
    /// At most `limit` attempts at once (`usize::MAX` for no limit).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            unstarted: Arc::default(),
        }
    }

    /// Takes a slot for `claim` if fewer than the limit are in use; true if it may claim.
    /// Call [`Slots::forget`] when the claim then fails.
    pub fn take(&self, claim: &NewClaim<'_>, caches: SlotCaches<'_>, now_ms: i64) -> bool {
        let mut unstarted = lock(&self.unstarted);
        unstarted.retain(|key, (attempt, expires_at_ms)| {
            now_ms < *expires_at_ms && !recorded_started(caches.tasks, key, *attempt)
        });
        let mut used = live_claims(caches, now_ms);
        used.extend(unstarted.keys().cloned());
        if used.contains(claim.key) {
            return true;
        }
        if used.len() >= self.limit {
            return false;
        }
        unstarted.insert(claim.key.to_owned(), (claim.attempt, claim.expires_at_ms));
        true
    }

    /// The claim for `key` was not made after all.
    pub fn forget(&self, key: &str) {
        let mut unstarted = lock(&self.unstarted);
        unstarted.remove(key);
    }
}

/// True when the Task `namespace/name` is gone from the cache or its status records
/// attempt `attempt` (or a later one) as started.
fn recorded_started(tasks: &Store<CachedTask>, key: &str, attempt: u32) -> bool {
    let Some((namespace, name)) = key.split_once('/') else {
        return true;
    };
    tasks
        .get(&ObjectRef::new(name).within(namespace))
        .is_none_or(|task| {
            task.status
                .as_ref()
                .is_some_and(|s| s.attempt_count >= attempt)
        })
}

/// `namespace/name` of every Running Task whose claim is live: its cached Lease does not
/// show the claim of its current attempt expired, nor the Lease released (no holder). A
/// Lease missing from the cache or naming an earlier attempt is the cache lagging behind
/// the claim: the slot counts.
fn live_claims(caches: SlotCaches<'_>, now_ms: i64) -> BTreeSet<String> {
    caches
        .running
        .iter()
        .filter(|task| {
            task.status
                .as_ref()
                .is_some_and(|s| s.phase == TaskPhase::Running)
        })
        .filter(|task| {
            let namespace = task.namespace().unwrap_or_default();
            let name = task.name_any();
            let Some(lease) = caches.leases.get(&ObjectRef::new(&name).within(&namespace)) else {
                return true;
            };
            let Some(claim) = claim_view(&lease) else {
                return false;
            };
            let attempt = task.status.as_ref().map_or(0, |s| s.attempt_count);
            claim.holder != attempt_id(&name, attempt) || !claim.is_expired(now_ms)
        })
        .map(|task| {
            format!(
                "{}/{}",
                task.namespace().unwrap_or_default(),
                task.name_any()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::api::Task;
    use crate::api::TaskStatus;

    const LEASE_MS: i64 = 60_000;

    fn at(seconds: i64) -> i64 {
        seconds * 1000
    }

    /// The claim Lease of task `task`, held by `holder`, last renewed at `renewed` (s).
    fn lease(task: &str, holder: Option<&str>, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(task.to_owned()),
                namespace: Some("ns".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(60),
                renew_time: Some(MicroTime(
                    Timestamp::from_second(renewed).unwrap_or(Timestamp::UNIX_EPOCH),
                )),
                ..LeaseSpec::default()
            }),
        }
    }

    fn cache<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::runtime::reflector::Lookup + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (reader, mut writer) = store();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            writer.apply_watcher_event(&Event::InitApply(object));
        }
        writer.apply_watcher_event(&Event::InitDone);
        reader
    }

    /// Task `name` in namespace `ns`, in `phase` after `attempts` started attempts.
    fn task(name: &str, phase: TaskPhase, attempts: u32) -> CachedTask {
        let spec = crate::api::TaskSpec {
            feature_ref: "f".to_owned(),
            fields: crate::api::TaskFields::default(),
        };
        let mut task = Task::new(name, spec);
        task.metadata.namespace = Some("ns".to_owned());
        task.status = Some(TaskStatus {
            phase,
            attempt_count: attempts,
            ..TaskStatus::default()
        });
        task.into()
    }

    /// The caches of `tasks` and `leases`, with the Running index as the controller keeps it.
    struct World {
        tasks: Store<CachedTask>,
        leases: Store<Lease>,
        running: Vec<Arc<CachedTask>>,
    }

    impl World {
        fn of(tasks: Vec<CachedTask>, leases: Vec<Lease>) -> Self {
            let tasks = cache(tasks);
            let running = tasks
                .state()
                .into_iter()
                .filter(|t| running_key(t).is_some())
                .collect();
            Self {
                tasks,
                leases: cache(leases),
                running,
            }
        }

        fn caches(&self) -> SlotCaches<'_> {
            SlotCaches {
                running: &self.running,
                tasks: &self.tasks,
                leases: &self.leases,
            }
        }
    }

    fn claim(key: &str, attempt: u32, now_ms: i64) -> NewClaim<'_> {
        NewClaim {
            key,
            attempt,
            expires_at_ms: now_ms + LEASE_MS,
        }
    }

    /// Whether one slot lets task `b` claim its first attempt at `now` (s) in `world`.
    fn b_may_claim(world: &World, now: i64) -> bool {
        Slots::new(1).take(&claim("ns/b", 1, at(now)), world.caches(), at(now))
    }

    fn pending_b() -> CachedTask {
        task("b", TaskPhase::Pending, 0)
    }

    #[test]
    fn a_running_attempt_with_a_live_claim_uses_a_slot() {
        let world = World::of(
            vec![task("a", TaskPhase::Running, 1), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(!b_may_claim(&world, 110));
    }

    #[test]
    fn a_running_attempt_whose_claim_expired_uses_no_slot() {
        let world = World::of(
            vec![task("a", TaskPhase::Running, 1), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(b_may_claim(&world, 200));
    }

    #[test]
    fn a_running_task_whose_claim_was_released_uses_no_slot() {
        let world = World::of(
            vec![task("a", TaskPhase::Running, 1), pending_b()],
            vec![lease("a", None, 100)],
        );
        assert!(b_may_claim(&world, 110));
    }

    #[test]
    fn a_running_task_whose_lease_the_cache_does_not_show_yet_uses_a_slot() {
        let world = World::of(vec![task("a", TaskPhase::Running, 1), pending_b()], vec![]);
        assert!(!b_may_claim(&world, 110));
    }

    #[test]
    fn a_running_task_whose_cached_lease_names_its_previous_attempt_uses_a_slot() {
        let world = World::of(
            vec![task("a", TaskPhase::Running, 2), pending_b()],
            vec![lease("a", Some("a-a1"), 0)],
        );
        assert!(!b_may_claim(&world, 110));
    }

    #[test]
    fn a_finished_tasks_unexpired_claim_uses_no_slot() {
        for phase in [TaskPhase::Done, TaskPhase::Failed, TaskPhase::Blocked] {
            let world = World::of(
                vec![task("a", phase, 1), pending_b()],
                vec![lease("a", Some("a-a1"), 100)],
            );
            assert!(b_may_claim(&world, 110), "{phase:?}");
        }
    }

    #[test]
    fn a_concluded_attempts_unexpired_claim_uses_no_slot_while_its_task_waits_to_retry() {
        let world = World::of(
            vec![task("a", TaskPhase::Pending, 1), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(b_may_claim(&world, 110));
    }

    #[test]
    fn a_claim_not_yet_recorded_as_started_uses_a_slot() {
        let slots = Slots::new(1);
        let world = World::of(
            vec![task("a", TaskPhase::Pending, 0), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(slots.take(&claim("ns/a", 1, at(100)), world.caches(), at(100)));
        assert!(!slots.take(&claim("ns/b", 1, at(101)), world.caches(), at(101)));
    }

    #[test]
    fn a_claim_frees_its_slot_once_the_task_records_its_attempt_concluded() {
        let slots = Slots::new(1);
        let before = World::of(vec![task("a", TaskPhase::Pending, 0), pending_b()], vec![]);
        assert!(slots.take(&claim("ns/a", 1, at(100)), before.caches(), at(100)));
        let after = World::of(
            vec![task("a", TaskPhase::Done, 1), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(slots.take(&claim("ns/b", 1, at(101)), after.caches(), at(101)));
    }

    #[test]
    fn a_claim_never_started_frees_its_slot_when_it_would_have_expired() {
        let slots = Slots::new(1);
        let world = World::of(vec![task("a", TaskPhase::Pending, 0), pending_b()], vec![]);
        assert!(slots.take(&claim("ns/a", 1, at(100)), world.caches(), at(100)));
        assert!(!slots.take(&claim("ns/b", 1, at(159)), world.caches(), at(159)));
        assert!(slots.take(&claim("ns/b", 1, at(160)), world.caches(), at(160)));
    }

    #[test]
    fn taking_twice_for_the_same_claim_uses_one_slot() {
        let slots = Slots::new(1);
        let world = World::of(vec![task("a", TaskPhase::Pending, 0), pending_b()], vec![]);
        assert!(slots.take(&claim("ns/a", 1, at(100)), world.caches(), at(100)));
        assert!(slots.take(&claim("ns/a", 1, at(101)), world.caches(), at(101)));
        assert!(!slots.take(&claim("ns/b", 1, at(101)), world.caches(), at(101)));
    }

    #[test]
    fn a_claim_for_a_deleted_task_frees_its_slot() {
        let slots = Slots::new(1);
        let with_a = World::of(vec![task("a", TaskPhase::Pending, 0), pending_b()], vec![]);
        assert!(slots.take(&claim("ns/a", 1, at(100)), with_a.caches(), at(100)));
        let without_a = World::of(vec![pending_b()], vec![lease("a", Some("a-a1"), 100)]);
        assert!(slots.take(&claim("ns/b", 1, at(101)), without_a.caches(), at(101)));
    }

    #[test]
    fn a_running_task_deleted_gives_its_slot_back_without_any_call() {
        let running = World::of(
            vec![task("a", TaskPhase::Running, 1), pending_b()],
            vec![lease("a", Some("a-a1"), 100)],
        );
        assert!(!b_may_claim(&running, 100));
        let deleted = World::of(vec![pending_b()], vec![lease("a", Some("a-a1"), 100)]);
        assert!(b_may_claim(&deleted, 100));
    }

    #[test]
    fn a_forgotten_claim_frees_its_slot() {
        let slots = Slots::new(1);
        let world = World::of(vec![task("a", TaskPhase::Pending, 0), pending_b()], vec![]);
        assert!(slots.take(&claim("ns/a", 1, at(100)), world.caches(), at(100)));
        slots.forget("ns/a");
        assert!(slots.take(&claim("ns/b", 1, at(100)), world.caches(), at(100)));
    }
}
