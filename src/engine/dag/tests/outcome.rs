use super::{Build, dag, set, task};
use crate::engine::dag::{FeatureOutcome, OutcomeInputs, PhaseCounts, TaskPhase};

use crate::engine::testing::named_cases;
use TaskPhase::{Done, Failed, Running};

fn no_limits() -> OutcomeInputs {
    OutcomeInputs::default()
}

/// Asserts the outcome of a feature whose one task is ready, under `inputs`.
fn assert_outcome_of_a_ready_task(inputs: OutcomeInputs, expected: Option<FeatureOutcome>) {
    assert_eq!(dag(vec![task("a")]).outcome(inputs), expected);
}

#[test]
fn feature_without_tasks_has_no_plan() {
    assert_eq!(
        dag(vec![]).outcome(no_limits()),
        Some(FeatureOutcome::NoPlan)
    );
}

#[test]
fn feature_with_every_task_done_is_complete() {
    let dag = dag(vec![task("a").phase(Done), task("b").phase(Done)]);
    assert_eq!(dag.outcome(no_limits()), Some(FeatureOutcome::Complete));
}

#[test]
fn feature_with_all_resolved_and_one_failed_has_failed() {
    let mut dag = dag(vec![task("a"), task("b").after(&["a"]), task("c")]);
    set(&mut dag, "c", Done);
    set(&mut dag, "a", Failed);
    assert_eq!(dag.outcome(no_limits()), Some(FeatureOutcome::Failed));
}

#[test]
fn feature_with_a_failure_and_a_running_task_is_still_in_progress() {
    let mut dag = dag(vec![task("a"), task("b")]);
    set(&mut dag, "b", Running);
    set(&mut dag, "a", Failed);
    assert_eq!(dag.outcome(no_limits()), None);
}

named_cases! { assert_outcome_of_a_ready_task;
    feature_with_ready_tasks_is_in_progress(no_limits(), None);
    suspended_feature_is_suspended
        (OutcomeInputs { suspended: true, ..no_limits() }, Some(FeatureOutcome::Suspended));
    feature_at_its_iteration_limit_has_reached_it
        (OutcomeInputs { iterations_used: 3, max_iterations: Some(3), ..no_limits() }, Some(FeatureOutcome::LimitReached));
    feature_below_its_iteration_limit_continues
        (OutcomeInputs { iterations_used: 2, max_iterations: Some(3), ..no_limits() }, None);
    feature_with_a_spent_budget_has_reached_its_limit
        (OutcomeInputs { budget_reached: true, ..no_limits() }, Some(FeatureOutcome::LimitReached));
}

#[test]
fn a_reached_limit_waits_for_the_running_attempts_to_finish() {
    let inputs = OutcomeInputs {
        budget_reached: true,
        ..no_limits()
    };
    let mut dag = dag(vec![task("a"), task("b")]);
    set(&mut dag, "a", Running);
    assert_eq!(dag.outcome(inputs), None);
    set(&mut dag, "a", Done);
    assert_eq!(dag.outcome(inputs), Some(FeatureOutcome::LimitReached));
}

#[test]
fn completion_wins_over_a_reached_limit() {
    let inputs = OutcomeInputs {
        budget_reached: true,
        suspended: true,
        ..no_limits()
    };
    assert_eq!(
        dag(vec![task("a").phase(Done)]).outcome(inputs),
        Some(FeatureOutcome::Complete)
    );
}

#[test]
fn counts_cover_every_phase_and_the_ready_tasks() {
    let mut dag = dag(vec![
        task("a"),
        task("b").after(&["a"]),
        task("c"),
        task("d"),
        task("e").after(&["d"]),
        task("f"),
    ]);
    set(&mut dag, "c", Running);
    set(&mut dag, "d", Failed);
    set(&mut dag, "f", Done);
    assert_eq!(
        dag.counts(),
        PhaseCounts {
            pending: 2,
            running: 1,
            done: 1,
            failed: 1,
            blocked: 1,
            ready: 1,
        }
    );
}
