//! What every reconcile shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;

use super::metrics::Metrics;
use crate::controller::act::events::Events;
use crate::controller::cache::store::Cache;
use crate::controller::plan::pod::PodSettings;
use crate::sync::lock;

/// Field manager of every server-side apply the controller makes.
pub(crate) const FIELD_MANAGER: &str = "ralph-controller";

/// The controller's shared state (one per process).
#[derive(Clone)]
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Limit of every API call, its wait in the client's rate limit included.
    pub api_timeout: Duration,
    /// What reconciles read: the watched objects and what is kept between reconciles.
    pub cache: Cache,
    /// How agent Pods are built.
    pub pod_settings: PodSettings,
    /// Kubernetes Events.
    pub events: Events,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// The Feature generation whose Tasks were last applied, by `namespace/name`.
    pub applied: Arc<Mutex<HashMap<String, i64>>>,
    /// Exhausted agents' rests by namespace (kept in a ConfigMap per namespace).
    pub rests: crate::controller::act::rests::AgentRests,
    /// Checks made before claiming (the agent ServiceAccount exists).
    pub preflight: crate::controller::act::preflight::Preflight,
    /// Task template applies in flight over all Features (each holds a connection).
    pub template_applies: Arc<tokio::sync::Semaphore>,
}

/// Most Task template applies in flight at once over all Features.
pub(crate) const TEMPLATE_APPLIES: usize = 32;

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
