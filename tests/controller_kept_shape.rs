//! The controller keeps each Feature's validated DAG structure between reconciles
//! (src/controller/shapes.rs): a change of the Tasks' structure while the Feature runs
//! still reaches the plan at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::harness;

use kube::api::{Patch, PatchParams};
use serde_json::json;

use harness::Harness;

/// Creates the standalone Task `name` of Feature `feature` with `extra` spec fields.
async fn standalone(h: &Harness, name: &str, feature: &str, extra: serde_json::Value) {
    let mut spec = json!({"featureRef": feature, "title": format!("Task {name}")});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    h.create_task(name, spec).await;
}

#[tokio::test]
async fn a_standalone_task_added_to_a_running_feature_is_planned() {
    let h = Harness::start().await;
    standalone(&h, "first", "grow", json!({})).await;
    h.create("grow", json!([]), json!({"parallelism": 2})).await;
    let first = h.wait_for_pod("first-a1").await;
    standalone(&h, "second", "grow", json!({})).await;
    let second = h.wait_for_pod("second-a1").await;
    h.finish_done(&first).await;
    h.finish_done_to_complete(&second, "grow").await;
    h.stop().await;
}

#[tokio::test]
async fn a_depends_on_edit_of_a_standalone_task_reorders_a_running_feature() {
    let h = Harness::start().await;
    for name in ["x", "y", "z"] {
        standalone(&h, name, "edit", json!({})).await;
    }
    h.create("edit", json!([]), json!({"parallelism": 1})).await;
    let x = h.wait_for_pod("x-a1").await;
    // y would run next (plan order); made to wait for z, z runs first.
    let depends = json!({"spec": {"dependsOn": ["z"]}});
    h.tasks()
        .patch("y", &PatchParams::default(), &Patch::Merge(&depends))
        .await
        .expect("edit dependsOn of y");
    h.finish_done(&x).await;
    let z = h.wait_for_pod("z-a1").await;
    assert!(
        !h.has_pod("y-a1").await,
        "y started before its new dependency z"
    );
    h.finish_done(&z).await;
    let y = h.wait_for_pod("y-a1").await;
    h.finish_done_to_complete(&y, "edit").await;
    h.stop().await;
}

#[tokio::test]
async fn a_dependency_on_a_task_that_does_not_exist_makes_a_running_feature_invalid() {
    let h = Harness::start().await;
    standalone(&h, "p", "broken", json!({})).await;
    standalone(&h, "q", "broken", json!({})).await;
    h.create("broken", json!([]), json!({"parallelism": 1}))
        .await;
    h.wait_for_pod("p-a1").await;
    let depends = json!({"spec": {"dependsOn": ["missing"]}});
    h.tasks()
        .patch("q", &PatchParams::default(), &Patch::Merge(&depends))
        .await
        .expect("edit dependsOn of q");
    let feature = h.wait_for_feature_phase("broken", "Invalid").await;
    let message = feature.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains("missing"), "{message}");
    h.stop().await;
}
