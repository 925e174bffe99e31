//! What every task action shares within one Feature reconcile.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;

use crate::api::Feature;
use crate::controller::plan::cached::CachedTask;
use crate::controller::runtime::context::Context;
use crate::engine::prompt::FeatureText;

/// Everything a task's actions need besides the plan.
pub struct TaskScope<'a> {
    /// Shared controller state.
    pub ctx: &'a Context,
    /// The task's Feature.
    pub feature: &'a Feature,
    /// All Tasks of the feature, by name (for prompts: parent and blockers).
    pub siblings: &'a BTreeMap<String, Arc<CachedTask>>,
    /// Claim Leases by name.
    pub leases: &'a BTreeMap<String, Arc<Lease>>,
    /// The feature's spec and plan texts, resolved once per reconcile when needed.
    pub texts: &'a FeatureText,
    /// The feature's knowledge (seeded and learned), read when an attempt starts.
    pub knowledge: &'a [crate::engine::memory::KnowledgeEntry],
    /// The current time, Unix ms.
    pub now_ms: i64,
}
