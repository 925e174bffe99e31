//! The controller-wide limit on running attempts (`--max-concurrent-attempts`), derived on
//! each claim from the Lease cache: every live (unexpired) claim Lease is a slot in use.
//!
//! The only thing kept beside the cache is the short list of claims this process made that
//! the cache has not shown yet (watches lag behind writes); an entry leaves it as soon as
//! the cache shows the Lease, the Task is gone from the cache, or after [`CACHE_LAG_MS`]. A Task or Feature deleted while
//! Running gives its slot back when its Lease goes (owner reference), with no call site
//! involved.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::claim::is_expired;
use crate::api::Task;
use crate::sync::lock;

/// How long a claim made by this process counts without its Lease in the cache, ms.
const CACHE_LAG_MS: i64 = 10_000;

/// Slots for running attempts, shared by all Feature reconciles.
#[derive(Clone, Debug)]
pub struct Slots {
    limit: usize,
    /// Claims made by this process (`namespace/lease` → when, Unix ms) not yet seen in the cache.
    unseen: Arc<Mutex<HashMap<String, i64>>>,
}

impl Slots {
    /// At most `limit` attempts at once (`usize::MAX` for no limit).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            unseen: Arc::default(),
        }
    }

    /// Takes a slot for the claim Lease `key` (`namespace/name`) if fewer than the limit are
    /// in use; true if it may claim. `held` are the cached claim Leases that name a holder
    /// (the others are free). Call [`Slots::forget`] when the claim then fails.
    pub fn take(
        &self,
        key: &str,
        held: &[Arc<Lease>],
        tasks: &Store<Task>,
        now: Timestamp,
    ) -> bool {
        let mut unseen = lock(&self.unseen);
        let mut used = live_claims(held, now);
        let now_ms = now.as_millisecond();
        unseen.retain(|k, at| {
            !used.contains(k) && now_ms - *at < CACHE_LAG_MS && task_exists(tasks, k)
        });
        used.extend(unseen.keys().cloned());
        if used.contains(key) {
            return true;
        }
        if used.len() >= self.limit {
            return false;
        }
        unseen.insert(key.to_owned(), now_ms);
        true
    }

    /// The claim for `key` was not made after all.
    pub fn forget(&self, key: &str) {
        let mut unseen = lock(&self.unseen);
        unseen.remove(key);
    }
}

/// True when the Task a claim Lease `namespace/name` is for is in the cache.
fn task_exists(tasks: &Store<Task>, key: &str) -> bool {
    let Some((namespace, name)) = key.split_once('/') else {
        return false;
    };
    tasks.get(&ObjectRef::new(name).within(namespace)).is_some()
}

/// `namespace/name` of every unexpired claim Lease of `held`.
fn live_claims(held: &[Arc<Lease>], now: Timestamp) -> BTreeSet<String> {
    held.iter()
        .filter(|lease| !is_expired(lease, now))
        .map(|lease| {
            format!(
                "{}/{}",
                lease.namespace().unwrap_or_default(),
                lease.name_any()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn lease(name: &str, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(format!("{name}-a1")),
                lease_duration_seconds: Some(60),
                renew_time: Some(MicroTime(at(renewed))),
                ..LeaseSpec::default()
            }),
        }
    }

    fn cache<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource + Clone + 'static,
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

    fn task(name: &str) -> Task {
        let spec = crate::api::TaskSpec {
            feature_ref: "f".to_owned(),
            fields: crate::api::TaskFields::default(),
        };
        let mut task = Task::new(name, spec);
        task.metadata.namespace = Some("ns".to_owned());
        task
    }

    /// Tasks `a` and `b` in namespace `ns`.
    fn tasks() -> Store<Task> {
        cache(vec![task("a"), task("b")])
    }

    #[test]
    fn live_claims_in_the_cache_use_the_slots() {
        let slots = Slots::new(1);
        let leases = cache(vec![lease("a", 100)]);
        assert!(!slots.take("ns/b", &leases.state(), &tasks(), at(110)));
    }

    #[test]
    fn an_expired_claim_uses_no_slot() {
        let slots = Slots::new(1);
        let leases = cache(vec![lease("a", 100)]);
        assert!(slots.take("ns/b", &leases.state(), &tasks(), at(200)));
    }

    #[test]
    fn a_claim_not_yet_in_the_cache_uses_a_slot() {
        let slots = Slots::new(1);
        let leases = cache(Vec::new());
        assert!(slots.take("ns/a", &leases.state(), &tasks(), at(100)));
        assert!(!slots.take("ns/b", &leases.state(), &tasks(), at(101)));
    }

    #[test]
    fn taking_twice_for_the_same_claim_uses_one_slot() {
        let slots = Slots::new(1);
        let leases = cache(vec![lease("a", 100)]);
        assert!(slots.take("ns/a", &leases.state(), &tasks(), at(101)));
        assert!(!slots.take("ns/b", &leases.state(), &tasks(), at(101)));
    }

    #[test]
    fn a_deleted_lease_gives_its_slot_back_without_any_call() {
        let slots = Slots::new(1);
        let with = cache(vec![lease("a", 100)]);
        assert!(slots.take("ns/a", &with.state(), &tasks(), at(100)));
        let without = cache(Vec::new());
        assert!(slots.take("ns/b", &without.state(), &tasks(), at(100)));
    }

    #[test]
    fn a_claim_for_a_deleted_task_frees_its_slot_before_its_lease_is_seen() {
        let slots = Slots::new(1);
        let leases = cache(Vec::new());
        assert!(slots.take("ns/a", &leases.state(), &tasks(), at(100)));
        let only_b = cache(vec![task("b")]);
        assert!(slots.take("ns/b", &leases.state(), &only_b, at(101)));
    }

    #[test]
    fn a_forgotten_claim_frees_its_slot() {
        let slots = Slots::new(1);
        let leases = cache(Vec::new());
        assert!(slots.take("ns/a", &leases.state(), &tasks(), at(100)));
        slots.forget("ns/a");
        assert!(slots.take("ns/b", &leases.state(), &tasks(), at(100)));
    }
}
