use super::*;
use crate::engine::attempt::{AttemptResult, MAX_CHECK_REASON_CHARS, StopReason};
use crate::engine::conclusion::{NextState, TaskState};
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::AttemptEnd;
use crate::engine::policy::PreviousAttempt;
use crate::engine::sigils;
use crate::engine::testing::{self, conclude, reported};

const AGENT: Verification = Verification {
    agent: true,
    command: false,
};
const COMMAND: Verification = Verification {
    agent: false,
    command: true,
};

fn task(kind: AttemptKind, verify: Verification, retry_count: u32) -> TaskState {
    TaskState {
        retry_count,
        verify,
        kind,
        ..testing::task_state()
    }
}

/// `end` of a verification attempt by an agent, with no retries used.
fn verifier_ended(end: &AttemptEnd) -> NextState {
    conclude(end, &task(AttemptKind::Verify, AGENT, 0))
}

/// A verifier's final message `text`, concluded like [`verifier_ended`].
fn verifier_said(text: &str) -> NextState {
    verifier_ended(&reported(testing::with_sigils("t", sigils::parse(text))))
}

/// A work attempt that reported `result`, verified by a command, with no retries used.
fn checked_work(result: AttemptResult) -> NextState {
    conclude(&reported(result), &task(AttemptKind::Work, COMMAND, 0))
}

fn with_check(result: AttemptResult, exit_code: i32, tail: &str) -> AttemptResult {
    AttemptResult {
        check: Some(CheckReport {
            command: "cargo test".to_owned(),
            exit_code: Some(exit_code),
            output_tail: tail.to_owned(),
            ..CheckReport::default()
        }),
        ..result
    }
}

fn previous_reason(next: &NextState) -> String {
    match &next.previous_attempt {
        Some(PreviousAttempt::Failed {
            reason: Some(reason),
        }) => reason.clone(),
        other => panic!("expected a failed previous attempt, got {other:?}"),
    }
}

/// Asserts a failed verification that charged one retry and whose reason contains `reason`.
fn assert_failed_verification(next: &NextState, reason: &str) {
    assert_eq!(
        (next.outcome(), next.retry_count),
        (AttemptOutcome::Failed, 1)
    );
    let previous = previous_reason(next);
    assert!(previous.contains(reason), "{previous}");
}

fn past(kind: AttemptKind, outcome: AttemptOutcome) -> PastAttempt {
    PastAttempt {
        kind,
        outcome: Some(outcome),
        generation: Some(1),
    }
}

/// The kind of the next attempt, with verification on, after `history` (kind and outcome
/// of each attempt of generation 1, oldest first).
fn next_kind_after(history: &[(AttemptKind, AttemptOutcome)]) -> AttemptKind {
    let history = history.iter().map(|&(kind, outcome)| past(kind, outcome));
    next_attempt_kind(true, 1, history)
}

#[test]
fn a_done_work_attempt_goes_back_to_pending_for_its_verification() {
    let next = conclude(
        &reported(testing::done("t")),
        &task(AttemptKind::Work, AGENT, 0),
    );
    assert_eq!(next.phase, TaskPhase::Pending);
    assert_eq!(next.outcome(), AttemptOutcome::Done);
    assert_eq!((next.retry_count, next.next_attempt_after_ms), (0, None));
    assert!(next.decision.verify_first);
    assert_eq!(next.decision.event.reason, "TaskVerifying");
}

#[test]
fn a_verifier_that_passes_makes_the_task_done() {
    let next = verifier_said("Tests pass.\n\n<verify-pass>t</verify-pass>");
    assert_eq!(next.phase, TaskPhase::Done);
    assert_eq!(next.decision.event.reason, "TaskVerified");
}

#[test]
fn a_verifier_that_rejects_the_work_retries_the_task_with_its_reason() {
    let next = verifier_said("GET /greeting answers 500.\n\n<verify-fail>t</verify-fail>");
    assert_eq!((next.phase, next.retry_count), (TaskPhase::Pending, 1));
    assert_eq!(next.outcome(), AttemptOutcome::Failed);
    assert!(next.next_attempt_after_ms.is_some());
    assert_eq!(
        previous_reason(&next),
        "the verifier rejected the work: GET /greeting answers 500."
    );
}

#[test]
fn a_rejection_with_no_retries_left_fails_the_task() {
    let rejection = reported(testing::with_sigils(
        "t",
        sigils::parse("Broken.\n\n<verify-fail>t</verify-fail>"),
    ));
    let next = conclude(&rejection, &task(AttemptKind::Verify, AGENT, 2));
    assert_eq!(next.phase, TaskPhase::Failed);
}

#[test]
fn a_verifier_that_crashes_is_a_failed_verification() {
    let next = verifier_ended(&reported(testing::crashed("t", "exit code 1: segfault")));
    assert_failed_verification(&next, "the verifier crashed: exit code 1: segfault");
}

#[test]
fn a_verifier_that_vanishes_without_a_result_is_a_failed_verification() {
    let next = verifier_ended(&AttemptEnd::NoResult {
        reason: "OOMKilled".to_owned(),
    });
    assert_failed_verification(&next, "OOMKilled");
}

#[test]
fn a_verifier_without_a_verdict_is_a_failed_verification_not_a_release() {
    let next = verifier_said("Looks fine to me. <task-done>t</task-done>");
    assert_failed_verification(&next, "no verdict");
}

#[test]
fn a_verdict_for_another_task_is_no_verdict() {
    let next = verifier_said("Fine.\n\n<verify-pass>other</verify-pass>");
    assert_eq!(next.outcome(), AttemptOutcome::Failed);
    assert!(previous_reason(&next).contains("names task other"));
}

#[test]
fn an_exhausted_verifier_charges_no_retry_and_verifies_again() {
    let next = verifier_ended(&reported(testing::exhausted("t", "quota", None)));
    assert_eq!(
        (next.outcome(), next.retry_count),
        (AttemptOutcome::Exhausted, 0)
    );
    let history = [
        (AttemptKind::Work, AttemptOutcome::Done),
        (AttemptKind::Verify, AttemptOutcome::Exhausted),
    ];
    assert_eq!(next_kind_after(&history), AttemptKind::Verify);
}

#[test]
fn a_failing_command_retries_the_task_with_the_end_of_its_output() {
    let result = with_check(testing::done("t"), 101, "test greeting ... FAILED\n");
    let next = checked_work(result);
    assert_failed_verification(&next, "test greeting ... FAILED");
    let reason = previous_reason(&next);
    assert!(
        reason.starts_with("verify.command `cargo test` exited with code 101"),
        "{reason}"
    );
    assert!(
        next.message
            .contains("the end of its output: test greeting ... FAILED; retry 1 of"),
        "the event's one line ends with the output's last line: {}",
        next.message
    );
}

#[test]
fn a_passing_command_without_a_verification_agent_makes_the_task_done() {
    let result = with_check(testing::done("t"), 0, "ok");
    let next = checked_work(result);
    assert_eq!(next.phase, TaskPhase::Done);
}

#[test]
fn a_passing_command_with_a_verification_agent_goes_on_to_the_verifier() {
    let result = with_check(testing::done("t"), 0, "ok");
    let both = Verification {
        agent: true,
        command: true,
    };
    let next = conclude(&reported(result), &task(AttemptKind::Work, both, 0));
    assert_eq!(next.phase, TaskPhase::Pending);
    assert!(next.decision.verify_first);
}

#[test]
fn a_done_verdict_without_the_commands_report_is_a_failed_verification() {
    let next = checked_work(testing::done("t"));
    assert_eq!(next.outcome(), AttemptOutcome::Failed);
    assert!(previous_reason(&next).contains("did not run"));
}

#[test]
fn a_timed_out_command_says_so() {
    let check = CheckReport {
        command: "sleep 100".to_owned(),
        timed_out: true,
        ..CheckReport::default()
    };
    assert!(!check.passed());
    assert_eq!(
        check.failure(),
        "verify.command `sleep 100` ran past its time limit and was killed"
    );
}

#[test]
fn a_long_check_failure_keeps_its_first_line_and_the_end_of_the_output() {
    let check = CheckReport {
        command: "cargo test".to_owned(),
        exit_code: Some(1),
        output_tail: format!("{}\nthe last line", "x".repeat(5_000)),
        ..CheckReport::default()
    };
    let failure = check.failure();
    assert!(failure.chars().count() <= MAX_CHECK_REASON_CHARS + 1);
    assert!(failure.starts_with("verify.command `cargo test` exited with code 1"));
    assert!(failure.ends_with("the last line"));
}

#[test]
fn a_failed_work_attempt_is_not_checked() {
    let result = with_check(testing::failed("t", Some("stuck")), 1, "");
    let next = checked_work(result);
    assert_eq!(next.decision.event.reason, "TaskFailed");
}

#[test]
fn the_next_attempt_verifies_only_after_done_work_of_the_current_generation() {
    let done = [past(AttemptKind::Work, AttemptOutcome::Done)];
    assert_eq!(
        next_attempt_kind(true, 1, done.into_iter()),
        AttemptKind::Verify
    );
    assert_eq!(
        next_attempt_kind(false, 1, done.into_iter()),
        AttemptKind::Work
    );
    assert_eq!(
        next_attempt_kind(true, 2, done.into_iter()),
        AttemptKind::Work
    );
}

#[test]
fn after_a_failed_verification_the_next_attempt_works_again() {
    let history = [
        (AttemptKind::Work, AttemptOutcome::Done),
        (AttemptKind::Verify, AttemptOutcome::Failed),
    ];
    assert_eq!(next_kind_after(&history), AttemptKind::Work);
}

#[test]
fn a_first_attempt_works() {
    assert_eq!(next_kind_after(&[]), AttemptKind::Work);
}

#[test]
fn a_cancelled_verifier_turn_is_an_interruption() {
    let end = reported(AttemptResult {
        stop_reason: Some(StopReason::Cancelled),
        ..testing::result("t")
    });
    let next = verifier_ended(&end);
    assert_eq!(next.outcome(), AttemptOutcome::Interrupted);
    assert_eq!(next.retry_count, 0);
}

#[test]
fn a_misconfigured_verifier_halts_the_feature_without_a_retry() {
    let end = reported(testing::misconfigured("t", "no binary", "install it"));
    let next = verifier_ended(&end);
    assert_eq!(next.outcome(), AttemptOutcome::Misconfigured);
}
