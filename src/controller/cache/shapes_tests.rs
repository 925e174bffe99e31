use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::api::Task;
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::Snapshot;
use crate::controller::testing;
use crate::engine::dag::TaskPhase;
use crate::engine::selection::Rests;

const KEY: &str = "ns/big";

fn feature(generation: i64) -> Feature {
    let metadata = serde_json::json!({
        "name": "big", "namespace": "ns", "uid": "f-uid", "generation": generation
    });
    let spec = serde_json::json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "parallelism": 10,
        "tasks": []
    });
    testing::object("Feature", metadata, spec)
}

/// A standalone Task `name` of Feature `big`, created at second `created`.
fn task(name: &str, depends_on: &[&str], created: u32) -> Arc<CachedTask> {
    let metadata = serde_json::json!({
        "name": name, "namespace": "ns", "uid": format!("{name}-uid"), "generation": 1,
        "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z"),
    });
    let spec = serde_json::json!({"featureRef": "big", "dependsOn": depends_on});
    Arc::new(testing::object::<Task>("Task", metadata, spec).into())
}

/// a, b and c, independent.
fn independent() -> Vec<Arc<CachedTask>> {
    vec![task("a", &[], 1), task("b", &[], 2), task("c", &[], 3)]
}

fn layout(shapes: &Shapes, feature: &Feature, tasks: &[Arc<CachedTask>]) -> Layout {
    shapes
        .layout(KEY, feature, tasks)
        .unwrap_or_else(|errors| panic!("invalid: {errors}"))
}

fn planned(feature: &Feature, tasks: &[Arc<CachedTask>], shapes: &Shapes) -> Vec<String> {
    let (leases, pods, rests) = (BTreeMap::new(), BTreeMap::new(), Rests::new());
    let plan = plan_kept(
        &Snapshot {
            feature,
            tasks,
            leases: &leases,
            pods: &pods,
            now_ms: 1_000,
            start_limit: usize::MAX,
            rests: &rests,
            planning_only: None,
            plan_waits: None,
        },
        shapes,
    );
    plan.tasks
        .iter()
        .filter(|t| !t.actions.is_empty())
        .map(|t| t.task_id.clone())
        .collect()
}

#[test]
fn the_same_tasks_reuse_the_kept_shape() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let first = layout(&shapes, &f, &independent());
    let mut again = independent();
    again.reverse();
    let second = layout(&shapes, &f, &again);
    assert!(second.shape.is_same(&first.shape));
    // Positions follow the plan order whatever order the cache lists the Tasks in.
    let names: Vec<_> = second
        .task_at
        .iter()
        .map(|&i| again[i as usize].metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
}

#[test]
fn a_phase_change_alone_reuses_the_kept_shape() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let first = layout(&shapes, &f, &independent());
    let mut tasks = independent();
    Arc::make_mut(&mut tasks[0]).status = Some(crate::api::TaskStatus {
        phase: TaskPhase::Done,
        ..Default::default()
    });
    assert!(layout(&shapes, &f, &tasks).shape.is_same(&first.shape));
}

#[test]
fn an_added_task_is_laid_out_and_planned() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let first = layout(&shapes, &f, &independent());
    let mut tasks = independent();
    tasks.push(task("d", &[], 4));
    let second = layout(&shapes, &f, &tasks);
    assert!(!second.shape.is_same(&first.shape));
    assert_eq!(second.shape.position("d"), Some(3));
    assert_eq!(planned(&f, &tasks, &shapes), ["a", "b", "c", "d"]);
}

#[test]
fn a_deleted_task_is_no_longer_planned() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    layout(&shapes, &f, &independent());
    let tasks = vec![task("a", &[], 1), task("c", &[], 3)];
    let second = layout(&shapes, &f, &tasks);
    assert_eq!(second.shape.len(), 2);
    assert_eq!(second.shape.position("b"), None);
    assert_eq!(planned(&f, &tasks, &shapes), ["a", "c"]);
}

#[test]
fn a_task_deleted_and_another_added_in_its_place_is_laid_out_again() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let first = layout(&shapes, &f, &independent());
    let tasks = vec![task("a", &[], 1), task("b", &[], 2), task("e", &[], 5)];
    let second = layout(&shapes, &f, &tasks);
    assert!(!second.shape.is_same(&first.shape));
    assert_eq!(second.shape.position("e"), Some(2));
}

#[test]
fn a_depends_on_edit_takes_effect_at_once() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    assert_eq!(planned(&f, &independent(), &shapes), ["a", "b", "c"]);
    let edited = vec![task("a", &[], 1), task("b", &["a"], 2), task("c", &[], 3)];
    assert_eq!(planned(&f, &edited, &shapes), ["a", "c"]);
}

#[test]
fn a_task_re_created_under_the_same_name_is_laid_out_again() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let first = layout(&shapes, &f, &independent());
    let mut tasks = independent();
    Arc::make_mut(&mut tasks[1]).metadata.uid = Some("b-second-uid".to_owned());
    assert!(!layout(&shapes, &f, &tasks).shape.is_same(&first.shape));
}

#[test]
fn a_new_generation_of_the_feature_is_laid_out_again() {
    let shapes = Shapes::kept_from(1);
    let first = layout(&shapes, &feature(1), &independent());
    let second = layout(&shapes, &feature(2), &independent());
    assert!(!second.shape.is_same(&first.shape));
}

#[test]
fn an_invalid_task_set_is_reported_every_time_and_not_kept() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    let cycle = vec![task("a", &["b"], 1), task("b", &["a"], 2)];
    assert!(shapes.layout(KEY, &f, &cycle).is_err());
    assert!(shapes.layout(KEY, &f, &cycle).is_err());
    assert!(shapes.is_empty());
}

#[test]
fn a_task_that_turns_the_kept_shape_invalid_is_reported() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    layout(&shapes, &f, &independent());
    let mut tasks = independent();
    tasks.push(task("d", &["missing"], 4));
    let errors = shapes.layout(KEY, &f, &tasks).err().map(|e| e.to_string());
    assert!(errors.is_some_and(|e| e.contains("missing")));
}

#[test]
fn a_small_feature_keeps_no_shape() {
    let shapes = Shapes::kept_from(4);
    layout(&shapes, &feature(1), &independent());
    assert!(shapes.is_empty());
}

#[test]
fn only_so_many_features_are_kept() {
    let (shapes, f) = (Shapes::kept_from(1), feature(1));
    for i in 0..KEPT + 5 {
        shapes
            .layout(&format!("ns/f{i}"), &f, &independent())
            .unwrap_or_else(|errors| panic!("invalid: {errors}"));
    }
    assert_eq!(shapes.len(), KEPT);
}
