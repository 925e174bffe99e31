use super::{Build, blocked_by, dag, moved, ready, set, subtask_of_a_dependent_parent, task};
use crate::engine::dag::{Dag, PhaseError, TaskPhase, TransitionReason};
use crate::engine::testing::named_cases;

use TaskPhase::{Blocked, Done, Failed, Pending, Running};

/// `c` depends on `b`, which depends on `a`.
fn a_then_b_then_c() -> Dag {
    dag(vec![
        task("a"),
        task("b").after(&["a"]),
        task("c").after(&["b"]),
    ])
}

/// Subtasks `a` and `b` of `p`.
fn two_subtasks_of_p() -> Dag {
    dag(vec![task("p"), task("a").under("p"), task("b").under("p")])
}

#[test]
fn finishing_a_dependency_makes_its_dependent_ready() {
    let mut dag = dag(vec![task("a"), task("b").after(&["a"])]);
    set(&mut dag, "a", Done);
    assert_eq!(ready(&dag), ["b"]);
}

#[test]
fn a_change_with_no_consequence_returns_no_transitions() {
    let mut dag = dag(vec![task("a"), task("b")]);
    assert_eq!(set(&mut dag, "a", Running), []);
}

#[test]
fn parent_becomes_done_when_every_subtask_is_done() {
    let mut dag = two_subtasks_of_p();
    assert_eq!(set(&mut dag, "a", Done), []);
    assert_eq!(
        set(&mut dag, "b", Done),
        [moved("p", Pending, Done, TransitionReason::SubtasksDone)]
    );
}

#[test]
fn parent_fails_when_a_subtask_fails() {
    let mut dag = dag(vec![task("p"), task("a").under("p")]);
    assert_eq!(
        set(&mut dag, "a", Failed),
        [moved(
            "p",
            Pending,
            Failed,
            TransitionReason::SubtaskFailed {
                subtask: "a".to_owned()
            }
        )]
    );
}

#[test]
fn pending_siblings_of_a_failed_subtask_are_blocked() {
    let mut dag = two_subtasks_of_p();
    let transitions = set(&mut dag, "a", Failed);
    assert!(transitions.contains(&moved(
        "b",
        Pending,
        Blocked,
        TransitionReason::AncestorFailed {
            ancestor: "p".to_owned()
        }
    )));
}

#[test]
fn running_sibling_of_a_failed_subtask_keeps_running() {
    let mut dag = two_subtasks_of_p();
    set(&mut dag, "b", Running);
    set(&mut dag, "a", Failed);
    assert_eq!(dag.phase("b"), Some(Running));
}

#[test]
fn dependents_of_a_failed_task_are_blocked_transitively() {
    let mut dag = a_then_b_then_c();
    assert_eq!(
        set(&mut dag, "a", Failed),
        [blocked_by("b", Pending, "a"), blocked_by("c", Pending, "b")]
    );
}

#[test]
fn subtasks_of_a_parent_whose_dependency_failed_are_blocked() {
    let mut dag = subtask_of_a_dependent_parent();
    let transitions = set(&mut dag, "x", Failed);
    assert!(transitions.contains(&blocked_by("c", Pending, "x")));
}

#[test]
fn parent_is_blocked_once_its_subtasks_are_resolved_and_some_blocked() {
    let mut dag = dag(vec![
        task("x"),
        task("p"),
        task("a").under("p"),
        task("b").under("p").after(&["x"]),
    ]);
    set(&mut dag, "a", Done);
    let transitions = set(&mut dag, "x", Failed);
    assert!(transitions.contains(&moved(
        "p",
        Pending,
        Blocked,
        TransitionReason::SubtasksBlocked
    )));
}

#[test]
fn resetting_a_failed_task_unblocks_its_dependents() {
    let mut dag = a_then_b_then_c();
    set(&mut dag, "a", Failed);
    assert_eq!(
        set(&mut dag, "a", Pending),
        [
            moved("b", Blocked, Pending, TransitionReason::Unblocked),
            moved("c", Blocked, Pending, TransitionReason::Unblocked),
        ]
    );
    assert_eq!(ready(&dag), ["a"]);
}

#[test]
fn resetting_a_failed_subtask_reopens_its_parent_and_siblings() {
    let mut dag = two_subtasks_of_p();
    set(&mut dag, "a", Failed);
    let transitions = set(&mut dag, "a", Pending);
    assert_eq!(
        transitions,
        [
            moved("p", Failed, Pending, TransitionReason::SubtaskReopened),
            moved("b", Blocked, Pending, TransitionReason::Unblocked),
        ]
    );
    assert_eq!(ready(&dag), ["a", "b"]);
}

#[test]
fn reopening_a_done_subtask_reopens_its_parent() {
    let mut dag = dag(vec![task("p"), task("a").under("p")]);
    set(&mut dag, "a", Done);
    assert_eq!(
        set(&mut dag, "a", Pending),
        [moved("p", Done, Pending, TransitionReason::SubtaskReopened)]
    );
}

#[test]
fn a_finished_parent_unlocks_tasks_depending_on_it() {
    let mut dag = dag(vec![
        task("p"),
        task("a").under("p"),
        task("after").after(&["p"]),
    ]);
    set(&mut dag, "a", Done);
    assert_eq!(ready(&dag), ["after"]);
}

#[test]
fn setting_a_blocked_task_pending_blocks_it_again() {
    let mut dag = dag(vec![task("a"), task("b").after(&["a"])]);
    set(&mut dag, "a", Failed);
    set(&mut dag, "b", Running);
    assert_eq!(set(&mut dag, "b", Pending), [blocked_by("b", Pending, "a")]);
}

#[test]
fn setting_the_current_phase_changes_nothing() {
    let mut dag = dag(vec![task("a"), task("b").after(&["a"])]);
    set(&mut dag, "a", Failed);
    assert_eq!(set(&mut dag, "a", Failed), []);
}

/// Asserts that setting `name` of a one-task plan (task `a`) to `phase` is refused with
/// `expected`.
fn assert_refused(name: &str, phase: TaskPhase, expected: PhaseError) {
    let mut dag = dag(vec![task("a")]);
    assert_eq!(dag.set_phase(name, phase), Err(expected));
}

named_cases! { assert_refused;
    unknown_task_is_refused("zz", Done, PhaseError::UnknownTask { task: "zz".to_owned() });
    setting_blocked_is_refused("a", Blocked, PhaseError::BlockedIsDerived { task: "a".to_owned() });
}

#[test]
fn setting_a_parent_phase_is_refused() {
    let mut dag = dag(vec![task("p"), task("c").under("p")]);
    let error = dag.set_phase("p", Done).err().map(|e| e.to_string());
    assert_eq!(
        error.as_deref(),
        Some("task \"p\" has subtasks; its phase follows them and cannot be set to Done")
    );
}

#[test]
fn a_refused_change_leaves_the_phase_unchanged() {
    let mut dag = dag(vec![task("p"), task("c").under("p")]);
    let _refused = dag.set_phase("p", Done);
    assert_eq!(dag.phase("p"), Some(Pending));
}
