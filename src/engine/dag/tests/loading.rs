use super::{Build, dag, moved, ready, task};
use crate::engine::dag::{TaskPhase, TransitionReason};

use TaskPhase::{Blocked, Done, Failed, Pending, Running};

#[test]
fn consistent_phases_load_without_transitions() {
    let dag = dag(vec![
        task("a").phase(Done),
        task("b").after(&["a"]).phase(Running),
        task("c").after(&["b"]),
    ]);
    assert_eq!(dag.loaded_transitions(), []);
}

#[test]
fn loading_derives_a_parents_phase_from_its_subtasks() {
    let dag = dag(vec![task("p"), task("a").under("p").phase(Done)]);
    assert_eq!(
        dag.loaded_transitions(),
        [moved("p", Pending, Done, TransitionReason::SubtasksDone)]
    );
}

#[test]
fn loading_blocks_dependents_of_a_failed_task() {
    let dag = dag(vec![task("a").phase(Failed), task("b").after(&["a"])]);
    assert_eq!(dag.phase("b"), Some(Blocked));
}

#[test]
fn loading_unblocks_a_task_nothing_blocks() {
    let dag = dag(vec![task("a").phase(Blocked)]);
    assert_eq!(
        dag.loaded_transitions(),
        [moved("a", Blocked, Pending, TransitionReason::Unblocked)]
    );
    assert_eq!(ready(&dag), ["a"]);
}

#[test]
fn loading_keeps_a_blocked_task_whose_cause_remains() {
    let dag = dag(vec![
        task("a").phase(Failed),
        task("b").after(&["a"]).phase(Blocked),
    ]);
    assert_eq!(dag.loaded_transitions(), []);
}

#[test]
fn loading_resets_a_parent_stored_as_running() {
    let dag = dag(vec![task("p").phase(Running), task("a").under("p")]);
    assert_eq!(dag.phase("p"), Some(Pending));
}

#[test]
fn tree_accessors_describe_the_hierarchy() {
    let dag = dag(vec![
        task("p"),
        task("a").under("p"),
        task("b").under("p"),
        task("x"),
    ]);
    let roots: Vec<&str> = dag.roots().collect();
    let children: Option<Vec<&str>> = dag.children("p").map(Iterator::collect);
    assert_eq!(roots, ["p", "x"]);
    assert_eq!(children, Some(vec!["a", "b"]));
    assert_eq!(dag.parent("a"), Some("p"));
}
