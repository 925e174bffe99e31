use super::{Build, dag, ready, set, subtask_of_a_dependent_parent, task};
use crate::engine::dag::TaskPhase;

#[test]
fn task_without_dependencies_is_ready() {
    let dag = dag(vec![task("a")]);
    assert_eq!(ready(&dag), ["a"]);
}

#[test]
fn task_waits_until_every_dependency_is_done() {
    let mut dag = dag(vec![task("a"), task("b"), task("c").after(&["a", "b"])]);
    set(&mut dag, "a", TaskPhase::Done);
    assert!(!dag.is_ready("c"));
    set(&mut dag, "b", TaskPhase::Done);
    assert!(dag.is_ready("c"));
}

#[test]
fn running_task_is_not_ready() {
    let mut dag = dag(vec![task("a")]);
    set(&mut dag, "a", TaskPhase::Running);
    assert_eq!(ready(&dag), Vec::<&str>::new());
}

#[test]
fn done_task_is_not_ready() {
    let dag = dag(vec![task("a").phase(TaskPhase::Done)]);
    assert_eq!(ready(&dag), Vec::<&str>::new());
}

#[test]
fn parent_task_is_never_ready_but_its_subtasks_are() {
    let dag = dag(vec![task("p"), task("c").under("p")]);
    assert_eq!(ready(&dag), ["c"]);
}

#[test]
fn subtask_waits_for_its_parents_dependencies() {
    let mut dag = subtask_of_a_dependent_parent();
    assert_eq!(ready(&dag), ["x"]);
    set(&mut dag, "x", TaskPhase::Done);
    assert_eq!(ready(&dag), ["c"]);
}

#[test]
fn subtask_waits_for_its_grandparents_dependencies() {
    let mut dag = dag(vec![
        task("x"),
        task("g").after(&["x"]),
        task("p").under("g"),
        task("c").under("p"),
    ]);
    assert!(!dag.is_ready("c"));
    set(&mut dag, "x", TaskPhase::Done);
    assert!(dag.is_ready("c"));
}

#[test]
fn pending_sibling_of_a_failed_subtask_is_not_ready() {
    let dag = dag(vec![
        task("p"),
        task("a").under("p").phase(TaskPhase::Failed),
        task("b").under("p"),
    ]);
    assert!(!dag.is_ready("b"));
}

#[test]
fn ready_tasks_run_by_priority_lower_first() {
    let dag = dag(vec![
        task("low").priority(5),
        task("high").priority(-1),
        task("mid"),
    ]);
    assert_eq!(ready(&dag), ["high", "mid", "low"]);
}

#[test]
fn equal_priorities_run_in_creation_order() {
    let dag = dag(vec![
        task("third").order(3),
        task("first").order(1),
        task("second").order(2),
    ]);
    assert_eq!(ready(&dag), ["first", "second", "third"]);
}

#[test]
fn equal_priority_and_order_keep_input_order() {
    let dag = dag(vec![task("b"), task("a"), task("c")]);
    assert_eq!(ready(&dag), ["b", "a", "c"]);
}

#[test]
fn ready_count_matches_the_ready_tasks() {
    let dag = dag(vec![task("a"), task("b"), task("c").after(&["a"])]);
    assert_eq!(dag.ready_count(), 2);
}
