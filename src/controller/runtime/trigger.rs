//! Which watch events trigger a reconcile: every Feature change, and of a Task, Pod or Lease
//! only a change a reconcile acts on ([`PredicateFilter`] with [`pod_predicate`],
//! [`lease_predicate`]); the caches follow every change regardless.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;

use crate::controller::act::claim;
use crate::controller::plan::cached::CachedPod;

/// The objects of a watch that trigger a reconcile. With a predicate, a changed object
/// triggers one only when the predicate's value changed (every object of a re-list, and
/// every deletion, still does). This is kube-runtime's `WatchStreamExt::predicate_filter`,
/// kept here because that one keys its memory by `ObjectRef` (this one by a 16-byte hash
/// of namespace and name) and would also hold back a re-listed or deleted object whose
/// value did not change.
pub(super) struct PredicateFilter<K> {
    predicate: Option<fn(&K) -> u64>,
    /// The predicate's last value by object ([`identity`]). Two objects sharing a hash
    /// would also need equal predicate values to miss a trigger.
    seen: HashMap<u64, u64>,
}

impl<K: Lookup> PredicateFilter<K> {
    /// A filter by `predicate`; `None` lets every changed object through.
    pub(super) fn new(predicate: Option<fn(&K) -> u64>) -> Self {
        PredicateFilter {
            predicate,
            seen: HashMap::new(),
        }
    }

    /// The object `event` triggers a reconcile for, if any; an error passes.
    pub(super) fn admit(
        &mut self,
        event: Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Result<K, watcher::Error>> {
        let seen = &mut self.seen;
        match event {
            Ok(watcher::Event::Apply(object)) => match self.predicate {
                Some(value_of) => {
                    let value = value_of(&object);
                    let changed = seen.insert(identity(&object), value) != Some(value);
                    changed.then_some(Ok(object))
                }
                None => Some(Ok(object)),
            },
            Ok(watcher::Event::InitApply(object)) => {
                if let Some(value_of) = self.predicate {
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
        }
    }
}

/// What about an agent Pod a reconcile acts on: its phase, whether it is being deleted, how
/// its containers ended, and a start problem a container waits for. The kubelet's other
/// status updates (conditions, readiness, IPs) trigger nothing.
pub(super) fn pod_predicate(pod: &CachedPod) -> u64 {
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
pub(super) fn lease_predicate(lease: &Lease) -> u64 {
    let spec = lease.spec.as_ref();
    hash_of(&(
        spec.and_then(|s| s.holder_identity.as_deref()),
        spec.and_then(|s| s.lease_transitions),
        spec.and_then(|s| s.lease_duration_seconds),
        claim::is_expired(lease, Timestamp::now()),
    ))
}

/// An object's namespace and name, hashed.
fn identity<K: Lookup>(object: &K) -> u64 {
    hash_of(&(object.namespace().as_deref(), object.name().as_deref()))
}

fn hash_of(value: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = crate::engine::stable_hash::StableHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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
