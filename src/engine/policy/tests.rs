//! The attempt-outcome table, one test per row.

use super::*;
use crate::engine::attempt::{Exhaustion, Misconfiguration};
use crate::engine::backoff::RetryBackoff;
use crate::engine::sigils;
use crate::engine::testing;

fn task() -> TaskContext {
    TaskContext {
        name: "build-api".into(),
        retry_count: 0,
        max_retries: 3,
        verify: false,
    }
}

fn finished(stop: StopReason, text: &str) -> AttemptResult {
    AttemptResult {
        stop_reason: Some(stop),
        exit_code: Some(0),
        sigils: sigils::parse(text),
        ..testing::result("build-api")
    }
}

fn ended(outcome: OutcomeClass) -> AttemptResult {
    AttemptResult {
        outcome,
        stop_reason: None,
        ..finished(StopReason::EndTurn, "")
    }
}

/// The decision on a turn that ended with `stop` and `text`, with no retries used.
fn stopped(stop: StopReason, text: &str) -> Decision {
    decide(&task(), &finished(stop, text))
}

/// The decision on a turn that ended with `end_turn` and `text`, with no retries used.
fn said(text: &str) -> Decision {
    stopped(StopReason::EndTurn, text)
}

/// The decision on `result` after `retry_count` retries.
fn after_retries(retry_count: u32, result: &AttemptResult) -> Decision {
    let task = TaskContext {
        retry_count,
        ..task()
    };
    decide(&task, result)
}

/// The decision on a turn that ended with `end_turn` and `text` after `retry_count` retries.
fn said_after_retries(retry_count: u32, text: &str) -> Decision {
    after_retries(retry_count, &finished(StopReason::EndTurn, text))
}

/// The decision on a verifier's turn that ended with `end_turn` and `text`.
fn verifier_said(text: &str) -> Decision {
    let task = TaskContext {
        verify: true,
        ..task()
    };
    decide_verification(&task, &finished(StopReason::EndTurn, text))
}

/// What `decision` does to the task: how the attempt is recorded, the new phase and the
/// retry count it sets.
fn task_effect(decision: &Decision) -> (AttemptOutcome, PhaseChange, Option<u32>) {
    (decision.outcome, decision.phase, decision.retry)
}

#[test]
fn end_turn_with_task_done_marks_the_task_done() {
    let decision = said("<task-done>build-api</task-done>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Done, PhaseChange::Done, None)
    );
    assert!(!decision.verify_first);
    assert_eq!(decision.event.kind, EventKind::Normal);
}

#[test]
fn end_turn_with_task_done_verifies_first_when_verification_is_on() {
    let task = TaskContext {
        verify: true,
        ..task()
    };
    let decision = decide(
        &task,
        &finished(StopReason::EndTurn, "<task-done>build-api</task-done>"),
    );
    assert!(decision.verify_first);
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Done, PhaseChange::Pending, None),
        "the verification attempt claims the task anew"
    );
}

#[test]
fn end_turn_with_task_failed_is_retried_while_retries_remain() {
    let decision = said_after_retries(1, "Schema missing. <task-failed>build-api</task-failed>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Failed, PhaseChange::Pending, Some(2))
    );
    assert_eq!(
        decision.previous_attempt,
        Some(PreviousAttempt::Failed {
            reason: Some("Schema missing.".into())
        })
    );
}

#[test]
fn end_turn_with_task_failed_fails_the_task_when_no_retries_remain() {
    let decision = said_after_retries(3, "<task-failed>build-api</task-failed>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Failed, PhaseChange::Failed, None)
    );
}

#[test]
fn done_and_failed_together_give_no_verdict_and_release_the_claim_with_a_warning() {
    let text = "<task-failed>build-api</task-failed>\n<task-done>build-api</task-done>";
    let decision = said(text);
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Released, PhaseChange::Pending, None)
    );
    assert_eq!(decision.event.kind, EventKind::Warning);
    assert_eq!(decision.event.reason, "ConflictingSigils");
}

#[test]
fn done_for_the_task_and_failed_for_another_is_done() {
    let text = "<task-done>build-api</task-done>\n<task-failed>write-docs</task-failed>";
    assert_eq!(said(text).outcome, AttemptOutcome::Done);
}

#[test]
fn sigil_for_another_task_warns_without_transition_and_releases_the_claim() {
    let decision = said("<task-done>write-docs</task-done>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Released, PhaseChange::Unchanged, None)
    );
    assert_eq!(decision.event.kind, EventKind::Warning);
    assert_eq!(decision.event.reason, "SigilForOtherTask");
    assert!(decision.event.message.contains("write-docs"));
}

#[test]
fn no_sigil_releases_the_claim_back_to_pending_without_counting_a_retry() {
    assert_eq!(
        task_effect(&said("I looked around.")),
        (AttemptOutcome::Released, PhaseChange::Pending, None)
    );
}

#[test]
fn promise_failure_stops_the_feature_with_the_agents_reason() {
    let text = "The repository is archived; nothing can be pushed.\n<promise>FAILURE</promise>";
    let decision = said(text);
    assert_eq!(decision.outcome, AttemptOutcome::StoppedFeature);
    assert_eq!(
        decision.feature,
        FeatureEffect::Stop {
            reason: "The repository is archived; nothing can be pushed.".into()
        }
    );
    assert_eq!(decision.retry, None);
}

#[test]
fn promise_failure_without_a_reason_still_stops_the_feature() {
    let decision = said("<promise>FAILURE</promise>");
    assert!(
        matches!(decision.feature, FeatureEffect::Stop { reason } if reason.contains("without a reason"))
    );
}

#[test]
fn promise_complete_is_recorded_and_the_outcome_still_comes_from_the_dag() {
    let decision = said("<promise>COMPLETE</promise>");
    assert!(decision.promise_complete);
    assert_eq!(decision.feature, FeatureEffect::None);
    assert_eq!(
        decision.phase,
        PhaseChange::Pending,
        "without task-done the task is not done"
    );
}

#[test]
fn max_tokens_releases_the_claim_and_records_blocked_with_a_warning() {
    let decision = stopped(StopReason::MaxTokens, "<task-done>build-api</task-done>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::StoppedEarly, PhaseChange::Pending, None)
    );
    assert_eq!(decision.event.kind, EventKind::Warning);
    assert!(decision.event.message.contains("max_tokens"));
}

#[test]
fn max_turn_requests_releases_the_claim_and_records_blocked() {
    let decision = stopped(StopReason::MaxTurnRequests, "");
    assert_eq!(decision.outcome, AttemptOutcome::StoppedEarly);
    assert!(decision.event.message.contains("max_turn_requests"));
}

#[test]
fn unknown_stop_reason_releases_the_claim_and_records_blocked() {
    let decision = stopped(StopReason::Other("paused".into()), "");
    assert_eq!(decision.outcome, AttemptOutcome::StoppedEarly);
    assert!(decision.event.message.contains("paused"));
}

#[test]
fn refusal_fails_the_task_without_a_retry() {
    let decision = stopped(StopReason::Refusal, "");
    assert_eq!(
        (decision.outcome, decision.phase, decision.retry),
        (AttemptOutcome::Failed, PhaseChange::Failed, None)
    );
}

#[test]
fn cancelled_stop_reason_is_interrupted_and_releases_the_claim() {
    let decision = stopped(StopReason::Cancelled, "<task-done>build-api</task-done>");
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Interrupted, PhaseChange::Pending, None)
    );
}

#[test]
fn cancelled_attempt_is_interrupted_and_releases_the_claim() {
    let decision = decide(&task(), &ended(OutcomeClass::Cancelled));
    assert_eq!(decision.outcome, AttemptOutcome::Interrupted);
}

#[test]
fn crash_is_retried_and_its_summary_goes_into_the_next_prompt() {
    let result = AttemptResult {
        crash: Some("exit code 137: out of memory".into()),
        ..ended(OutcomeClass::Crashed)
    };
    let decision = decide(&task(), &result);
    assert_eq!(
        (decision.outcome, decision.phase, decision.retry),
        (AttemptOutcome::Crashed, PhaseChange::Pending, Some(1))
    );
    assert_eq!(
        decision.previous_attempt,
        Some(PreviousAttempt::Crashed {
            summary: "exit code 137: out of memory".into()
        })
    );
}

#[test]
fn crash_without_a_summary_is_described_by_its_exit() {
    let result = AttemptResult {
        exit_code: Some(2),
        ..ended(OutcomeClass::Crashed)
    };
    let decision = decide(&task(), &result);
    assert_eq!(
        decision.previous_attempt,
        Some(PreviousAttempt::Crashed {
            summary: "exit code 2".into()
        })
    );
}

#[test]
fn crash_fails_the_task_when_no_retries_remain() {
    let decision = after_retries(3, &ended(OutcomeClass::Crashed));
    assert_eq!(decision.outcome, AttemptOutcome::Crashed);
    assert_eq!(decision.phase, PhaseChange::Failed);
}

#[test]
fn exhaustion_is_not_a_task_failure_and_benches_the_agent_until_reset() {
    let exhaustion = Exhaustion {
        message: "5-hour limit reached".into(),
        reset_at: Some(1_800_000_000),
    };
    let result = AttemptResult {
        exhaustion: Some(exhaustion),
        ..ended(OutcomeClass::Exhausted)
    };
    let decision = decide(&task(), &result);
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Exhausted, PhaseChange::Pending, None)
    );
    assert_eq!(
        decision.agent_exhausted,
        Some(AgentExhausted {
            until: Some(1_800_000_000),
            message: "5-hour limit reached".into()
        })
    );
}

#[test]
fn claim_lost_is_recorded_lost_and_retried() {
    let decision = on_claim_lost(&task());
    assert_eq!(
        (decision.outcome, decision.phase, decision.retry),
        (AttemptOutcome::Lost, PhaseChange::Pending, Some(1))
    );
    assert_eq!(decision.previous_attempt, Some(PreviousAttempt::Lost));
}

#[test]
fn ended_without_result_is_a_crash_with_that_reason() {
    let decision = on_ended_without_result(&task(), "OOMKilled");
    assert_eq!(decision.outcome, AttemptOutcome::Crashed);
    assert_eq!(decision.retry, Some(1));
    assert_eq!(
        decision.previous_attempt,
        Some(PreviousAttempt::Crashed {
            summary: "OOMKilled".into()
        })
    );
}

#[test]
fn long_crash_summaries_are_bounded() {
    let decision = on_ended_without_result(&task(), &"x".repeat(5_000));
    let Some(PreviousAttempt::Crashed { summary }) = decision.previous_attempt else {
        panic!("expected a crash, got {:?}", decision.previous_attempt);
    };
    assert_eq!(summary.chars().count(), MAX_SUMMARY_CHARS + 1);
}

#[test]
fn a_counted_retry_waits_for_the_backoff_of_the_retries_used_before() {
    let decision = after_retries(1, &ended(OutcomeClass::Crashed));
    let policy = RetryBackoff::default();
    assert_eq!(
        decision.next_attempt_after(&policy, 1_000, 0.5),
        Some(1_000 + 25_000)
    );
}

#[test]
fn an_uncounted_release_may_run_again_at_once() {
    let decision = said("");
    assert_eq!(
        decision.next_attempt_after(&RetryBackoff::default(), 1_000, 0.5),
        None
    );
}

#[test]
fn previous_attempts_read_as_prompt_sentences() {
    let crashed = PreviousAttempt::Crashed {
        summary: "exit code 1".into(),
    };
    assert_eq!(crashed.to_string(), "Previous attempt crashed: exit code 1");
    let failed = PreviousAttempt::Failed {
        reason: Some("no schema".into()),
    };
    assert_eq!(failed.to_string(), "Previous attempt failed: no schema");
}

#[test]
fn verification_pass_marks_the_task_done() {
    let decision = verifier_said("<verify-pass>build-api</verify-pass>");
    assert_eq!(
        (decision.outcome, decision.phase),
        (AttemptOutcome::Done, PhaseChange::Done)
    );
    assert!(!decision.verify_first);
}

#[test]
fn verification_fail_is_a_failed_attempt_with_the_verifiers_note() {
    let text = "<journal>GET /greeting returns 500</journal><verify-fail>build-api</verify-fail>";
    let decision = verifier_said(text);
    assert_eq!(decision.outcome, AttemptOutcome::Failed);
    assert_eq!(decision.retry, Some(1));
    let reason = "the verifier rejected the work: GET /greeting returns 500";
    assert_eq!(
        decision.previous_attempt,
        Some(PreviousAttempt::Failed {
            reason: Some(reason.into())
        })
    );
}

#[test]
fn verification_without_a_verdict_ignores_task_sigils_and_is_a_failed_verification() {
    let decision = verifier_said("<task-done>build-api</task-done>");
    assert_eq!(
        (decision.outcome, decision.phase, decision.retry),
        (AttemptOutcome::Failed, PhaseChange::Pending, Some(1))
    );
    assert_eq!(decision.event.reason, "VerificationFailed");
}

#[test]
fn verification_verdict_for_another_task_does_not_count() {
    let decision = verifier_said("<verify-pass>other</verify-pass>");
    assert_ne!(decision.phase, PhaseChange::Done);
}

#[test]
fn misconfiguration_halts_the_feature_without_charging_a_retry() {
    let result = AttemptResult {
        misconfiguration: Some(Misconfiguration {
            problem: "agent command `claude-agent-acp` not found on PATH".into(),
            fix: "install the agent in the image or set spec.agent.command".into(),
            reason: None,
        }),
        ..ended(OutcomeClass::Misconfigured)
    };
    let decision = decide(&task(), &result);
    assert_eq!(
        task_effect(&decision),
        (AttemptOutcome::Misconfigured, PhaseChange::Pending, None)
    );
    assert_eq!(decision.event.reason, "AgentMisconfigured");
    assert!(matches!(
        &decision.feature,
        FeatureEffect::Halt { reason } if reason.contains("not found on PATH") && reason.contains("Fix: install")
    ));
}

#[test]
fn a_budget_refusal_puts_the_task_back_without_counting_a_retry() {
    let result = AttemptResult {
        budget_refusal: Some("the token budget of this attempt is spent".into()),
        ..ended(OutcomeClass::LimitReached)
    };
    let decision = after_retries(3, &result);
    assert_eq!(
        (decision.outcome, decision.phase, decision.retry),
        (AttemptOutcome::LimitReached, PhaseChange::Pending, None)
    );
    assert!(
        decision.event.message.contains("token budget"),
        "{}",
        decision.event.message
    );
}

#[test]
fn a_budget_refusal_of_a_verifier_is_not_a_failed_verification() {
    let decision = decide_verification(&task(), &ended(OutcomeClass::LimitReached));
    assert_eq!(decision.outcome, AttemptOutcome::LimitReached);
}

#[test]
fn an_outcome_recorded_as_blocked_before_the_rename_reads_as_stopped_early() {
    let outcome: AttemptOutcome =
        serde_json::from_value(serde_json::json!("blocked")).expect("old record");
    assert_eq!(outcome, AttemptOutcome::StoppedEarly);
    assert_eq!(outcome.as_str(), "stoppedEarly");
}

// --- Ends without a result -------------------------------------------------------------------

/// `end` of a work attempt of [`task`], no verification asked for.
fn judge_work(end: &AttemptEnd) -> Decision {
    judge(end, &task(), AttemptKind::Work, Verification::default())
}

#[test]
fn superseded_attempt_goes_back_to_pending_without_counting_a_retry() {
    let end = AttemptEnd::Superseded {
        from_generation: 1,
        to_generation: 2,
    };
    let decision = judge_work(&end);
    assert_eq!(decision.phase, PhaseChange::Pending);
    assert_eq!(decision.retry, None);
    assert_eq!(decision.outcome, AttemptOutcome::Interrupted);
    assert!(decision.event.message.contains("generation 1 -> 2"));
}

#[test]
fn interrupted_attempt_goes_back_to_pending_without_counting_a_retry() {
    let end = AttemptEnd::Interrupted {
        reason: "feature suspended".to_owned(),
    };
    let decision = judge_work(&end);
    assert_eq!(
        (decision.phase, decision.retry, decision.outcome),
        (PhaseChange::Pending, None, AttemptOutcome::Interrupted)
    );
}

#[test]
fn lost_claim_is_the_policys_lost_attempt_with_the_reason_attached() {
    let end = AttemptEnd::ClaimLost {
        reason: "claim not renewed within 60 s".to_owned(),
    };
    let decision = judge_work(&end);
    assert_eq!(decision.outcome, AttemptOutcome::Lost);
    assert!(
        decision
            .event
            .message
            .ends_with("(claim not renewed within 60 s)")
    );
}

#[test]
fn run_without_result_is_the_policys_crash_with_the_reason() {
    let end = AttemptEnd::NoResult {
        reason: "OOMKilled".to_owned(),
    };
    let decision = judge_work(&end);
    assert_eq!(decision.outcome, AttemptOutcome::Crashed);
    assert_eq!(decision.retry, Some(1));
}

#[test]
fn a_run_that_never_started_goes_back_to_pending_without_charging_a_retry() {
    let end = AttemptEnd::NotStarted {
        reason: "no node".to_owned(),
    };
    let decision = judge_work(&end);
    assert_eq!(decision.outcome, AttemptOutcome::Interrupted);
    assert_eq!(decision.phase, PhaseChange::Pending);
    assert_eq!(decision.retry, None);
    assert_eq!(decision.event.reason, "AttemptNotStarted");
}
