//! What every reconcile shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::reflector::Store;

use super::metrics::Metrics;
use crate::api::Task;
use crate::controller::act::events::Events;
use crate::controller::cache::slots::Slots;
use crate::controller::plan::pod::PodSettings;
use crate::sync::lock;

/// Field manager of every server-side apply the controller makes.
pub const FIELD_MANAGER: &str = "ralph-controller";

/// The controller's shared state (one per process).
#[derive(Clone)]
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Cache of Task objects in the watched namespaces.
    pub tasks: Store<Task>,
    /// Cache of agent Pods (label `ralph.dev/attempt`).
    pub pods: Store<Pod>,
    /// Cache of claim Leases (label `ralph.dev/feature`); spent ones are retired from it.
    pub leases: Store<Lease>,
    /// The claim Lease cache as the claim path changes it (a Lease read live put back).
    pub lease_cache: crate::controller::cache::lease_cache::LeaseCache,
    /// Whether the Task, Pod and Lease caches have been filled by their first lists.
    pub filled: crate::controller::cache::filled::CachesFilled,
    /// How agent Pods are built.
    pub pod_settings: PodSettings,
    /// Controller-wide limit on running attempts.
    pub slots: Slots,
    /// Kubernetes Events.
    pub events: Events,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// Limit of every API call, its wait in the client's rate limit included.
    pub api_timeout: Duration,
    /// The Feature generation whose Tasks were last applied, by `namespace/name`.
    pub applied: Arc<Mutex<HashMap<String, i64>>>,
    /// Task status writes the Task cache has not shown yet (read-your-writes).
    pub task_writes: crate::controller::cache::task_writes::TaskWrites,
    /// Exhausted agents' rests by namespace (kept in a ConfigMap per namespace).
    pub rests: crate::controller::act::rests::AgentRests,
    /// The caches' objects by Feature (and the held claim Leases).
    pub indexes: crate::controller::cache::index::Indexes,
    /// Checks made before claiming (the agent ServiceAccount exists).
    pub preflight: crate::controller::act::preflight::Preflight,
    /// Task template applies in flight over all Features (each holds a connection).
    pub template_applies: Arc<tokio::sync::Semaphore>,
    /// Whole Feature specs (prompt texts) read on demand; the Feature cache keeps none.
    pub specs: crate::controller::cache::spec_cache::SpecCache,
    /// Standalone Tasks' prompt texts, kept from the Task watch while they may run.
    pub descriptions: crate::controller::cache::descriptions::Descriptions,
    /// Each Feature's validated task structure, kept between its reconciles.
    pub shapes: Arc<crate::controller::cache::shapes::Shapes>,
}

/// Most Task template applies in flight at once over all Features.
pub const TEMPLATE_APPLIES: usize = 32;

impl Context {
    /// The Feature generation whose Tasks this process last applied.
    pub fn applied_generation(&self, feature: &str) -> Option<i64> {
        let applied = lock(&self.applied);
        applied.get(feature).copied()
    }

    /// Records that the Tasks of this Feature generation were applied.
    pub fn set_applied_generation(&self, feature: &str, generation: i64) {
        let mut applied = lock(&self.applied);
        applied.insert(feature.to_owned(), generation);
    }
}
