use super::*;
use crate::engine::attempt::StopReason;
use crate::engine::testing::{self, NOW_MS, named_cases, reported};

fn task(retry_count: u32, without_verdict: u32) -> TaskState {
    TaskState {
        retry_count,
        without_verdict,
        ..testing::task_state()
    }
}

fn assert_message_contains(next: &NextState, text: &str) {
    assert!(next.message.contains(text), "{}", next.message);
}

/// `end` of an attempt of task `t` that used `retry_count` retries and ended
/// `without_verdict` attempts in a row without a verdict before this one.
fn conclude_after(end: &AttemptEnd, retry_count: u32, without_verdict: u32) -> NextState {
    testing::conclude(end, &task(retry_count, without_verdict))
}

#[test]
fn an_attempt_without_a_sigil_backs_off_like_a_retry_without_counting_one() {
    let next = conclude_after(&reported(testing::result("t")), 0, 0);
    assert_eq!(
        (
            next.phase,
            next.retry_count,
            next.without_verdict,
            next.next_attempt_after_ms
        ),
        (TaskPhase::Pending, 0, 1, Some(NOW_MS + 10_000))
    );
}

#[test]
fn each_attempt_without_a_verdict_in_a_row_doubles_the_wait() {
    let end = reported(testing::stopped("t", StopReason::MaxTokens));
    let next = conclude_after(&end, 0, 2);
    assert_eq!(next.next_attempt_after_ms, Some(NOW_MS + 40_000));
}

#[test]
fn the_fifth_attempt_in_a_row_without_a_verdict_fails_the_task_and_says_why() {
    let next = conclude_after(&reported(testing::result("t")), 0, 4);
    assert_eq!(
        (next.phase, next.next_attempt_after_ms),
        (TaskPhase::Failed, None)
    );
    assert_message_contains(&next, "5 attempts in a row ended without a verdict");
}

#[test]
fn a_verdict_resets_the_streak_without_a_verdict() {
    let next = conclude_after(&reported(testing::failed("t", None)), 0, 3);
    assert_eq!(next.without_verdict, 0);
}

#[test]
fn the_streak_counts_only_trailing_attempts_without_a_verdict() {
    use AttemptOutcome::{Crashed, Released, StoppedEarly};
    assert_eq!(
        without_verdict_streak([Released, Crashed, StoppedEarly, Released].into_iter()),
        2
    );
}

#[test]
fn exhaustion_with_a_known_reset_time_rests_the_agent_until_then() {
    let end = reported(testing::exhausted("t", "try again later", Some(5_000)));
    let next = conclude_after(&end, 0, 0);
    assert_eq!(next.agent_rest.map(|r| r.until_ms), Some(5_000_000));
}

#[test]
fn exhaustion_leaves_the_task_to_the_pool_without_a_wait_of_its_own() {
    let end = reported(testing::exhausted("t", "try again later", Some(5_000)));
    let next = conclude_after(&end, 0, 0);
    assert_eq!(
        (next.phase, next.next_attempt_after_ms),
        (TaskPhase::Pending, None)
    );
}

#[test]
fn exhaustion_with_an_unknown_reset_time_rests_the_default() {
    let end = reported(testing::exhausted("t", "quota", None));
    let next = conclude_after(&end, 0, 0);
    assert_eq!(next.agent_rest.map(|r| r.until_ms), Some(NOW_MS + 300_000));
    assert_eq!(next.retry_count, 0);
}

#[test]
fn a_lost_claim_keeps_its_reason_in_the_message() {
    let end = AttemptEnd::ClaimLost {
        reason: "claim taken over by x".to_owned(),
    };
    let next = conclude_after(&end, 0, 0);
    assert_message_contains(&next, "(claim taken over by x)");
}

#[test]
fn a_superseded_attempt_is_not_reported_as_cancelled() {
    let end = AttemptEnd::Superseded {
        from_generation: 1,
        to_generation: 2,
    };
    let next = conclude_after(&end, 0, 0);
    assert_eq!(next.decision.event.reason, "AttemptSuperseded");
    assert!(!next.message.contains("cancelled"), "{}", next.message);
}

#[test]
fn a_misconfigured_agent_halts_the_feature_without_charging_a_retry() {
    let end = reported(testing::misconfigured("t", "no binary", "install it"));
    let next = conclude_after(&end, 1, 0);
    assert!(matches!(next.feature(), FeatureEffect::Halt { .. }));
    assert_eq!(
        (next.phase, next.retry_count, next.next_attempt_after_ms),
        (TaskPhase::Pending, 1, None)
    );
}

fn gate() -> Gate {
    Gate {
        suspended: false,
        stopped: false,
        parallelism: 2,
        running: 1,
        iterations_used: 3,
        max_iterations: None,
        budget_spent: false,
    }
}

#[test]
fn the_gate_opens_while_slots_are_free() {
    assert_eq!(gate().next(0), FeatureGate::Open);
    assert_eq!(gate().next(1), FeatureGate::AtCapacity);
}

/// Asserts what `gate` says with no attempt starting.
fn assert_gate(gate: Gate, expected: FeatureGate) {
    assert_eq!(gate.next(0), expected);
}

named_cases! { assert_gate;
    the_gate_stops_at_the_iteration_limit
        (Gate { max_iterations: Some(3), ..gate() }, FeatureGate::Stopped);
    suspension_comes_before_every_other_gate
        (Gate { suspended: true, stopped: true, ..gate() }, FeatureGate::Suspended);
}

#[test]
fn the_iteration_limit_caps_the_free_slots() {
    let gate = Gate {
        parallelism: 5,
        max_iterations: Some(5),
        ..gate()
    };
    assert_eq!(gate.free_slots(), 2);
}

#[test]
fn a_limit_reached_message_says_how_many_tasks_are_done() {
    let counts = testing::phase_counts(&[(TaskPhase::Done, 1), (TaskPhase::Pending, 2)]);
    assert_eq!(
        outcome_message(FeatureOutcome::LimitReached, &counts),
        "the attempt limit (maxIterations or --limit) is used up; 1 of 3 tasks done"
    );
}

#[test]
fn the_gate_stops_once_the_budget_is_spent() {
    let gate = Gate {
        budget_spent: true,
        ..gate()
    };
    assert_eq!(gate.next(0), FeatureGate::Stopped);
    assert_eq!(gate.standing(), FeatureGate::Stopped);
}

/// 120 tokens reported against maxTokens 100.
fn overspent() -> crate::engine::budget::BudgetSpent {
    crate::engine::budget::BudgetSpent::Tokens {
        spent: 120,
        limit: 100,
    }
}

#[test]
fn a_limit_reached_by_the_budget_names_the_budget_and_the_spending() {
    let counts = testing::phase_counts(&[(TaskPhase::Done, 1), (TaskPhase::Pending, 1)]);
    assert_eq!(
        limit_message(FeatureOutcome::LimitReached, &counts, Some(&overspent())),
        "the token budget is spent: 120 tokens reported of maxTokens 100; no new attempt \
         starts; 1 of 2 tasks done"
    );
}

#[test]
fn a_feature_that_completed_says_so_even_with_a_spent_budget() {
    let counts = testing::phase_counts(&[(TaskPhase::Done, 2)]);
    assert_eq!(
        limit_message(FeatureOutcome::Complete, &counts, Some(&overspent())),
        "all 2 tasks done"
    );
}

fn recorded(number: u32, kind: AttemptKind, outcome: Option<AttemptOutcome>) -> RecordedAttempt {
    RecordedAttempt {
        number,
        kind,
        outcome,
    }
}

#[test]
fn a_task_state_takes_the_kind_of_the_attempt_that_ends_from_its_record() {
    let history = [
        recorded(1, AttemptKind::Work, Some(AttemptOutcome::Done)),
        recorded(2, AttemptKind::Verify, None),
    ];
    let state = TaskState::from_history("t", 0, Verification::default(), 2, history.into_iter());
    assert_eq!(state.kind, AttemptKind::Verify);
}

#[test]
fn a_task_state_without_a_record_of_its_attempt_is_a_work_attempt() {
    let state = TaskState::from_history("t", 0, Verification::default(), 3, std::iter::empty());
    assert_eq!(state.kind, AttemptKind::Work);
}

#[test]
fn a_task_state_counts_the_attempts_without_a_verdict_back_from_the_newest_outcome() {
    let history = [
        recorded(1, AttemptKind::Work, Some(AttemptOutcome::Released)),
        recorded(2, AttemptKind::Work, Some(AttemptOutcome::Crashed)),
        recorded(3, AttemptKind::Work, Some(AttemptOutcome::Released)),
        recorded(4, AttemptKind::Work, Some(AttemptOutcome::StoppedEarly)),
        recorded(5, AttemptKind::Work, None),
    ];
    let state = TaskState::from_history("t", 1, Verification::default(), 5, history.into_iter());
    assert_eq!((state.without_verdict, state.retry_count), (2, 1));
}
