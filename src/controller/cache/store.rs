//! The caches a reconcile reads, together: the watched objects (trimmed, indexed by
//! Feature), what the controller keeps between reconciles, and the read-your-writes
//! overlay.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::Store;

use super::descriptions::Descriptions;
use super::filled::CachesFilled;
use super::index::Indexes;
use super::lease_cache::LeaseCache;
use super::planning_writes::PlanningWrites;
use super::shapes::Shapes;
use super::slots::Slots;
use super::spec_cache::SpecCache;
use super::task_writes::TaskWrites;
use crate::controller::plan::cached::{CachedPod, CachedTask};

/// The controller's read model (one per process; clones share it).
#[derive(Clone)]
pub struct Cache {
    /// Task objects in the watched namespaces.
    pub tasks: Store<CachedTask>,
    /// Agent Pods (label `ralph.dev/attempt`).
    pub pods: Store<CachedPod>,
    /// Claim Leases (label `ralph.dev/feature`); spent ones are retired from it.
    pub leases: Store<Lease>,
    /// The claim Lease cache as the claim path changes it (a Lease read live put back).
    pub lease_cache: LeaseCache,
    /// Whether the Task, Pod and Lease caches have been filled by their first lists.
    pub filled: CachesFilled,
    /// The caches' objects by Feature (and the held claim Leases).
    pub indexes: Indexes,
    /// Task status writes the Task cache has not shown yet (read-your-writes).
    pub task_writes: TaskWrites,
    /// `status.planning` writes the Feature cache has not shown yet (read-your-writes).
    pub planning_writes: PlanningWrites,
    /// Controller-wide limit on running attempts.
    pub slots: Slots,
    /// Whole Feature specs (prompt texts) read on demand; the Feature cache keeps none.
    pub specs: SpecCache,
    /// Standalone Tasks' prompt texts, kept from the Task watch while they may run.
    pub descriptions: Descriptions,
    /// Each Feature's validated task structure, kept between its reconciles.
    pub shapes: Arc<Shapes>,
}
