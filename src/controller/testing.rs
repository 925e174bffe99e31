//! Fixtures for the controller's unit tests.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::controller::decide::FeaturePlan;
use crate::engine::lifecycle::Action;

/// A `ralph.dev/v1alpha1` object of `kind` with this metadata and spec.
pub fn object<K: DeserializeOwned>(kind: &str, metadata: Value, spec: Value) -> K {
    let value = json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    });
    serde_json::from_value(value).unwrap_or_else(|error| panic!("invalid {kind}: {error}"))
}

/// The tasks `plan` claims, by name.
pub fn claimed(plan: &FeaturePlan) -> Vec<String> {
    plan.tasks
        .iter()
        .filter(|t| t.actions.iter().any(|a| matches!(a, Action::Claim { .. })))
        .map(|t| t.task_id.clone())
        .collect()
}
