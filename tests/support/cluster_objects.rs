//! The cluster side of the tables that run one scenario in both modes: the Feature `hello`
//! (namespace `ns`, generation 1) of one task `t`, and its Task object `hello-t`, as the
//! controller reads them. Include with
//! `#[path = "support/cluster_objects.rs"] mod cluster_objects;`.

use ralph::api::{Feature, Task};
use ralph::controller::plan::cached::CachedTask;
use serde_json::{Value, json};

/// The Feature `hello` of the task `t`, its agent `agent:1` running `agent`, with the
/// `spec` fields given (they may replace the agent and the tasks).
pub fn hello_feature(spec: Value) -> Feature {
    let mut full = json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "tasks": [{"name": "t"}]
    });
    if let (Some(full), Some(spec)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(spec.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": "hello", "namespace": "ns", "generation": 1},
        "spec": full
    }))
    .expect("valid feature")
}

/// The Task object `hello-t` of [`hello_feature`] with this `status` (`null`: none), as
/// the controller caches it.
pub fn hello_task(status: Value) -> CachedTask {
    let task: Task = serde_json::from_value(json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": "hello-t", "namespace": "ns", "generation": 1},
        "spec": {"featureRef": "hello"},
        "status": status
    }))
    .expect("valid task");
    task.into()
}
