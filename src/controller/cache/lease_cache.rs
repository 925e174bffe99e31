//! Spent claim Leases out of the controller's cache. A task's claim Lease is not deleted
//! after its attempt (that would be one more write per attempt): it stays, spent
//! ([`is_spent_by_recorded_attempt`]), until its Task goes. Once the Task records the
//! attempt's end, nothing reads that Lease from the cache, so it is retired from it, like a
//! finished Pod ([`super::retention`]): an update of it becomes a cache delete, a re-list
//! leaves it out, and a sweep retires those whose attempt was recorded since the watch
//! brought them. No table is kept: 10,000 spent Leases cost the cache about 18 MiB, and
//! nothing of them.
//!
//! The task's next claim (a retry, a re-run after a spec change) finds no cached Lease and
//! creates one; the create fails (409), one live read shows the spent Lease, and it is taken
//! over with the resourceVersion precondition, raising the fencing token
//! ([`crate::controller::act::claim::Leases::create_or_take_over`]). A Lease found really held that way is
//! put back in the cache ([`LeaseCache::restore`]), and its Feature reconciled, as if the
//! watch had brought it.
//!
//! Kept: a Lease with no holder (released), one whose Task is not cached or is another Task
//! of the same name (uid), one held by an attempt the Task does not record as started or
//! has not concluded, and any Lease not owned by a Task (leader election).

use futures::channel::mpsc;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::index::Index;
use super::retention::SharedWriter;
use super::retention::{
    RETIRE_PERIOD, owning_task, remove_if_unchanged, retire_event, retire_from_cache,
};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::run_view::holder;
use crate::engine::lifecycle::is_spent_by_recorded_attempt;
use crate::sync::lock;

/// True when nothing reads `lease` from the cache any more: it is the claim of a cached
/// Task (its owner, same uid), spent by an attempt that Task records as started and
/// concluded.
pub(crate) fn is_retirable(lease: &Lease, tasks: &Store<CachedTask>) -> bool {
    let Some(holder) = holder(lease).filter(|h| !h.is_empty()) else {
        return false;
    };
    let Some(task) = owning_task(
        lease.metadata.namespace.as_deref(),
        lease.owner_references(),
        tasks,
    ) else {
        return false;
    };
    let Some(status) = task.status.as_ref() else {
        return false;
    };
    is_spent_by_recorded_attempt(
        task.name_any().as_str(),
        status.phase,
        status.attempt_count,
        holder,
    )
}

/// The watch event that caches `event`'s Lease, with retirable Leases ([`is_retirable`])
/// left out ([`retire_event`]).
pub(crate) fn retiring(event: Event<Lease>, tasks: &Store<CachedTask>) -> Option<Event<Lease>> {
    retire_event(event, |lease| is_retirable(lease, tasks))
}

/// The claim Lease cache as the sweep and the claim path change it: the Leases, their
/// cache's writer and index, and the Tasks that own them.
#[derive(Clone)]
pub struct LeaseCache {
    leases: Store<Lease>,
    writer: SharedWriter<Lease>,
    index: Index<Lease>,
    tasks: Store<CachedTask>,
    restored: mpsc::UnboundedSender<Lease>,
}

/// Leases put back in the cache ([`LeaseCache::restore`]): their Features are reconciled.
pub(crate) type Restored = mpsc::UnboundedReceiver<Lease>;

impl LeaseCache {
    /// The cache `leases`, written through `writer` (shared with its watch) and kept in
    /// step with `index`; retirement reads `tasks`. Also the stream of restored Leases.
    pub fn new(
        leases: Store<Lease>,
        writer: SharedWriter<Lease>,
        index: Index<Lease>,
        tasks: Store<CachedTask>,
    ) -> (Self, Restored) {
        let (restored, receiver) = mpsc::unbounded();
        let cache = Self {
            leases,
            writer,
            index,
            tasks,
            restored,
        };
        (cache, receiver)
    }

    /// Retires every cached Lease that became retirable since the watch brought it, unless
    /// the watch brought a newer version of it meanwhile. Returns how many it retired.
    pub fn retire_spent(&self) -> usize {
        retire_from_cache(&self.leases, &self.writer, &self.index, |lease| {
            is_retirable(lease, &self.tasks)
        })
    }

    /// Drops `gone` from the cache: the API server answered that it does not exist (it was
    /// deleted behind a lagging watch, or put back by [`Self::restore`] just after its
    /// deletion). A newer version the watch brought meanwhile stays.
    pub fn forget_gone(&self, gone: &Lease) {
        remove_if_unchanged(&self.leases, &self.writer, &self.index, gone, |_| true);
    }

    /// Puts `live` (just read from the API server) back in the cache when the cache has no
    /// version of it (it was retired), and has its Feature reconciled.
    pub fn restore(&self, live: Lease) {
        {
            let mut writer = lock(&self.writer);
            if self.leases.get(&ObjectRef::from_obj(&live)).is_some() {
                return;
            }
            let event = Event::Apply(live.clone());
            writer.apply_watcher_event(&event);
            self.index.apply(&event);
        }
        // The receiver goes only with the controller's term, when nothing reconciles.
        let _ = self.restored.unbounded_send(live);
    }
}

/// Every [`RETIRE_PERIOD`], retires the cached Leases spent since the watch brought them;
/// for ever.
pub(crate) async fn sweep(cache: LeaseCache) {
    loop {
        tokio::time::sleep(RETIRE_PERIOD).await;
        let retired = cache.retire_spent();
        if retired > 0 {
            tracing::debug!(retired, "spent claim Leases retired from the cache");
        }
    }
}

#[cfg(test)]
#[path = "lease_cache_tests.rs"]
mod tests;
