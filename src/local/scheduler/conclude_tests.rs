use super::*;
use crate::engine::attempt::{Tokens, Usage};
use crate::engine::testing;
use crate::local::feature::LocalFeature;
use crate::local::testing as local_testing;

fn feature() -> LocalFeature {
    local_testing::feature(Vec::new())
}

fn row(retry_count: u32) -> TaskRow {
    TaskRow {
        retry_count,
        attempt_count: retry_count + 1,
        ..local_testing::row("t", TaskPhase::Running)
    }
}

fn conclude(row: &mut TaskRow, end: AttemptEnd) -> NextState {
    super::conclude(&feature(), row, &[], &end, 1_000, 0.0)
}

fn reported(result: crate::engine::attempt::AttemptResult) -> AttemptEnd {
    AttemptEnd::Reported(Box::new(crate::engine::attempt::AttemptResult {
        usage: Usage {
            tokens: Tokens::new(7, 0),
            ..Usage::default()
        },
        ..result
    }))
}

#[test]
fn a_done_sigil_makes_the_task_done_and_adds_its_usage() {
    let mut row = row(0);
    conclude(&mut row, reported(testing::done("t")));
    assert_eq!((row.phase, row.usage.tokens.input), (TaskPhase::Done, 7));
}

#[test]
fn a_crash_is_retried_after_backoff_with_its_summary_kept_for_the_next_prompt() {
    let mut row = row(0);
    let next = conclude(
        &mut row,
        reported(testing::crashed("t", "exit code 1: boom")),
    );
    assert_eq!(next.outcome(), AttemptOutcome::Crashed);
    assert_eq!((row.phase, row.retry_count), (TaskPhase::Pending, 1));
    assert_eq!(row.next_attempt_after_ms, Some(1_000 + 10_000));
    let previous = row.previous_attempt.expect("previous attempt recorded");
    assert!(previous.contains("boom"), "{previous}");
}

#[test]
fn a_crash_with_no_retries_left_fails_the_task() {
    let mut row = row(2);
    let end = AttemptEnd::NoResult {
        reason: "runner exited with code 2".to_string(),
    };
    conclude(&mut row, end);
    assert_eq!(row.phase, TaskPhase::Failed);
}

#[test]
fn an_interrupted_attempt_goes_back_to_pending_without_counting_a_retry() {
    let mut row = row(0);
    let end = AttemptEnd::Interrupted {
        reason: "Ctrl+C".to_string(),
    };
    let next = conclude(&mut row, end);
    assert_eq!(next.outcome(), AttemptOutcome::Interrupted);
    assert_eq!((row.phase, row.retry_count), (TaskPhase::Pending, 0));
    assert_eq!(row.next_attempt_after_ms, None);
}

#[test]
fn a_lost_claim_is_retried() {
    let mut row = row(0);
    let end = AttemptEnd::ClaimLost {
        reason: "claim not renewed".to_string(),
    };
    let next = conclude(&mut row, end);
    assert_eq!(next.outcome(), AttemptOutcome::Lost);
    assert_eq!((row.phase, row.retry_count), (TaskPhase::Pending, 1));
}

#[test]
fn done_clears_what_an_earlier_attempt_left_for_the_prompt() {
    let mut row = row(1);
    row.previous_attempt = Some("{}".to_string());
    conclude(&mut row, reported(testing::done("t")));
    assert_eq!(row.previous_attempt, None);
}

#[test]
fn the_exhausted_task_is_left_to_the_pool_without_a_wait_of_its_own() {
    let mut row = row(0);
    conclude(
        &mut row,
        reported(testing::exhausted("t", "try again in 2 hours", Some(7_200))),
    );
    assert_eq!(
        (row.phase, row.retry_count, row.next_attempt_after_ms),
        (TaskPhase::Pending, 0, None)
    );
}

#[test]
fn attempts_without_a_verdict_in_the_history_count_towards_the_limit() {
    let mut row = row(0);
    let history: Vec<AttemptRow> = (1..=4)
        .map(|n| local_testing::attempt("t", n, "released"))
        .collect();
    super::conclude(
        &feature(),
        &mut row,
        &history,
        &reported(testing::result("t")),
        1_000,
        0.0,
    );
    assert_eq!(row.phase, TaskPhase::Failed);
}
