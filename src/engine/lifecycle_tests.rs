use proptest::prelude::*;

use super::*;
use crate::engine::attempt::{OutcomeClass, StopReason, Timings};

const NOW: i64 = 1_000_000;
const LEASE_MS: i64 = 60_000;

fn task(phase: TaskPhase) -> TaskView {
    TaskView {
        name: "build".to_owned(),
        phase,
        ready: true,
        generation: 1,
        next_attempt_after_ms: None,
        attempt: None,
        gate: FeatureGate::Open,
    }
}

/// A task whose attempt `number`, spawned for generation 1, is running.
fn running(number: u32) -> TaskView {
    TaskView {
        attempt: Some(AttemptView {
            number,
            generation: 1,
        }),
        ..task(TaskPhase::Running)
    }
}

/// A pending task whose last attempt was `number`.
fn pending_after(number: u32) -> TaskView {
    TaskView {
        attempt: Some(AttemptView {
            number,
            generation: 1,
        }),
        ..task(TaskPhase::Pending)
    }
}

fn claim(holder: &str, renewed_at_ms: i64) -> ClaimView {
    ClaimView {
        holder: holder.to_owned(),
        renewed_at_ms,
        duration_ms: LEASE_MS,
    }
}

fn fresh(holder: &str) -> ClaimView {
    claim(holder, NOW - 1_000)
}

fn expired(holder: &str) -> ClaimView {
    claim(holder, NOW - LEASE_MS - 1)
}

fn result(attempt: Option<&str>, ended_at_ms: i64) -> AttemptResult {
    AttemptResult {
        attempt: attempt.map(str::to_owned),
        exit_code: Some(0),
        timings: Timings {
            started_at_ms: ended_at_ms - 10,
            ended_at_ms,
            initialize_ms: None,
        },
        ..crate::engine::testing::result("build")
    }
}

fn ended_with(result: AttemptResult) -> RunView {
    RunView::Ended {
        result: Some(Box::new(result)),
        reason: None,
    }
}

fn running_run() -> RunView {
    RunView::Running
}

fn claim_and_start(attempt: u32, replace: bool) -> Vec<Action> {
    vec![
        Action::Claim { attempt, replace },
        Action::StartAttempt { attempt },
    ]
}

/// A pending, ready task of a Feature whose gate is `gate`.
fn pending_behind(gate: FeatureGate) -> TaskView {
    TaskView {
        gate,
        ..task(TaskPhase::Pending)
    }
}

/// A task that failed its first attempt and may retry from `at_ms`.
fn retry_due_at(at_ms: i64) -> TaskView {
    TaskView {
        next_attempt_after_ms: Some(at_ms),
        ..pending_after(1)
    }
}

/// What a ready task that has never run does about claim `c`.
fn first_attempt_meeting(c: &ClaimView) -> Vec<Action> {
    decide(
        &task(TaskPhase::Pending),
        Some(c),
        &RunView::NotStarted,
        NOW,
    )
}

fn assert_starts_nothing(t: TaskView) {
    assert!(decide(&t, None, &RunView::NotStarted, NOW).is_empty());
}

#[test]
fn attempt_id_is_task_name_dash_a_number() {
    assert_eq!(attempt_id("build", 3), "build-a3");
}

// --- Pending tasks -------------------------------------------------------------------

#[test]
fn ready_unclaimed_task_is_claimed_and_its_first_attempt_started() {
    let actions = decide(&task(TaskPhase::Pending), None, &RunView::NotStarted, NOW);
    assert_eq!(actions, claim_and_start(1, false));
}

#[test]
fn pending_task_after_attempt_two_starts_attempt_three() {
    let actions = decide(&pending_after(2), None, &RunView::Missing, NOW);
    assert_eq!(actions, claim_and_start(3, false));
}

#[test]
fn task_that_is_not_ready_is_left_alone() {
    assert_starts_nothing(TaskView {
        ready: false,
        ..task(TaskPhase::Pending)
    });
}

#[test]
fn feature_at_capacity_starts_nothing() {
    assert_starts_nothing(pending_behind(FeatureGate::AtCapacity));
}

#[test]
fn suspended_feature_starts_nothing() {
    assert_starts_nothing(pending_behind(FeatureGate::Suspended));
}

#[test]
fn stopped_feature_starts_nothing() {
    assert_starts_nothing(pending_behind(FeatureGate::Stopped));
}

#[test]
fn backoff_not_yet_elapsed_requeues_at_next_attempt_time() {
    let t = retry_due_at(NOW + 5_000);
    assert_eq!(
        decide(&t, None, &RunView::Missing, NOW),
        vec![Action::RequeueAt(NOW + 5_000)]
    );
}

#[test]
fn elapsed_backoff_lets_the_retry_start() {
    let t = retry_due_at(NOW);
    assert_eq!(
        decide(&t, None, &RunView::Missing, NOW),
        claim_and_start(2, false)
    );
}

#[test]
fn claim_held_fresh_by_someone_else_waits_for_its_expiry() {
    let c = fresh("other-a1");
    assert_eq!(
        first_attempt_meeting(&c),
        vec![Action::RequeueAt(c.expires_at_ms())]
    );
}

#[test]
fn expired_foreign_claim_is_reclaimed_by_replacing_it() {
    let c = expired("other-a1");
    assert_eq!(first_attempt_meeting(&c), claim_and_start(1, true));
}

#[test]
fn own_claim_left_from_previous_attempt_is_replaced_for_the_next_one() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&pending_after(1), Some(&c), &RunView::Missing, NOW),
        claim_and_start(2, true)
    );
}

#[test]
fn spent_claim_of_a_task_that_cannot_run_is_left_alone() {
    let t = TaskView {
        ready: false,
        ..pending_after(1)
    };
    assert!(decide(&t, Some(&fresh("build-a1")), &RunView::Missing, NOW).is_empty());
}

#[test]
fn spent_claim_waiting_for_the_retry_backoff_is_left_alone() {
    let t = retry_due_at(NOW + 5_000);
    assert_eq!(
        decide(&t, Some(&fresh("build-a1")), &RunView::Missing, NOW),
        vec![Action::RequeueAt(NOW + 5_000)]
    );
}

#[test]
fn spent_claim_of_an_earlier_attempt_is_taken_over_without_waiting_for_its_expiry() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&pending_after(3), Some(&c), &RunView::Missing, NOW),
        claim_and_start(4, true)
    );
}

#[test]
fn claim_taken_for_next_attempt_but_not_recorded_goes_straight_to_start() {
    assert_eq!(
        decide(
            &pending_after(1),
            Some(&fresh("build-a2")),
            &RunView::Missing,
            NOW
        ),
        vec![Action::StartAttempt { attempt: 2 }]
    );
}

#[test]
fn finished_run_of_previous_attempt_is_deleted_before_the_next_starts() {
    let run = ended_with(result(Some("build-a1"), NOW - 10));
    let mut expected = vec![Action::DeleteRun];
    expected.extend(claim_and_start(2, false));
    assert_eq!(decide(&pending_after(1), None, &run, NOW), expected);
}

#[test]
fn live_run_of_a_superseded_attempt_is_cancelled() {
    let t = TaskView {
        ready: false,
        ..pending_after(1)
    };
    assert_eq!(decide(&t, None, &running_run(), NOW), vec![Action::Cancel]);
}

// --- Running tasks: the attempt is in flight ----------------------------------------

#[test]
fn running_attempt_with_fresh_claim_is_checked_again_when_the_claim_would_expire() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&running(1), Some(&c), &running_run(), NOW),
        vec![Action::RequeueAt(c.expires_at_ms())]
    );
}

/// A run waiting to start, released at `release_at_ms`.
fn waiting_until(release_at_ms: i64) -> RunView {
    RunView::Pending(Waiting {
        reason: Some("0/1 nodes are available: 1 Too many pods.".to_owned()),
        release_at_ms: Some(release_at_ms),
    })
}

#[test]
fn waiting_run_with_a_recently_renewed_claim_is_looked_at_when_a_renewal_is_due() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&running(1), Some(&c), &waiting_until(NOW + 600_000), NOW),
        vec![Action::RequeueAt(c.renewed_at_ms + LEASE_MS / 3)]
    );
}

#[test]
fn waiting_run_has_its_claim_renewed_every_third_of_the_lease() {
    let c = claim("build-a1", NOW - LEASE_MS / 3);
    assert_eq!(
        decide(&running(1), Some(&c), &waiting_until(NOW + 600_000), NOW),
        vec![Action::RenewClaim, Action::RequeueAt(NOW + LEASE_MS / 3)]
    );
}

#[test]
fn waiting_run_is_not_lost_when_its_claim_expired() {
    let actions = decide(
        &running(1),
        Some(&expired("build-a1")),
        &waiting_until(NOW + 600_000),
        NOW,
    );
    assert_eq!(
        actions,
        vec![Action::RenewClaim, Action::RequeueAt(NOW + LEASE_MS / 3)]
    );
}

#[test]
fn waiting_run_is_looked_at_again_at_its_deadline_when_that_comes_first() {
    let c = claim("build-a1", NOW - LEASE_MS / 3);
    assert_eq!(
        decide(&running(1), Some(&c), &waiting_until(NOW + 5_000), NOW),
        vec![Action::RenewClaim, Action::RequeueAt(NOW + 5_000)]
    );
}

#[test]
fn waiting_run_past_its_deadline_is_released_and_deleted() {
    let actions = decide(
        &running(1),
        Some(&fresh("build-a1")),
        &waiting_until(NOW - 2_000),
        NOW,
    );
    let [
        Action::Ingest(AttemptEnd::NotStarted { reason }),
        Action::DeleteRun,
    ] = actions.as_slice()
    else {
        panic!("not released: {actions:?}");
    };
    assert!(reason.contains("Too many pods"), "{reason}");
}

#[test]
fn claimed_attempt_whose_run_was_never_created_is_started() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&running(1), Some(&c), &RunView::NotStarted, NOW),
        vec![
            Action::StartAttempt { attempt: 1 },
            Action::RequeueAt(c.expires_at_ms())
        ]
    );
}

#[test]
fn stopped_feature_lets_a_running_attempt_finish() {
    let t = TaskView {
        gate: FeatureGate::Stopped,
        ..running(1)
    };
    let c = fresh("build-a1");
    assert_eq!(
        decide(&t, Some(&c), &running_run(), NOW),
        vec![Action::RequeueAt(c.expires_at_ms())]
    );
}

// --- Running tasks: the attempt ended -----------------------------------------------

#[test]
fn result_of_the_claim_holder_is_ingested_and_its_claim_left_spent() {
    let r = result(Some("build-a1"), NOW - 10);
    assert_eq!(
        decide(
            &running(1),
            Some(&fresh("build-a1")),
            &ended_with(r.clone()),
            NOW
        ),
        vec![
            Action::Ingest(AttemptEnd::Reported(Box::new(r))),
            Action::DeleteRun
        ]
    );
}

#[test]
fn result_without_attempt_id_is_taken_as_the_current_attempts() {
    let r = result(None, NOW - 10);
    let actions = decide(
        &running(1),
        Some(&fresh("build-a1")),
        &ended_with(r.clone()),
        NOW,
    );
    assert_eq!(
        actions[0],
        Action::Ingest(AttemptEnd::Reported(Box::new(r)))
    );
}

#[test]
fn run_ended_without_result_is_a_crash_with_the_executors_reason() {
    let run = RunView::Ended {
        result: None,
        reason: Some("OOMKilled".to_owned()),
    };
    assert_eq!(
        decide(&running(1), Some(&fresh("build-a1")), &run, NOW),
        vec![
            Action::Ingest(AttemptEnd::NoResult {
                reason: "OOMKilled".to_owned()
            }),
            Action::DeleteRun
        ]
    );
}

#[test]
fn run_ended_without_result_or_reason_says_so() {
    let run = RunView::Ended {
        result: None,
        reason: None,
    };
    let actions = decide(&running(1), Some(&fresh("build-a1")), &run, NOW);
    assert_eq!(
        actions[0],
        Action::Ingest(AttemptEnd::NoResult {
            reason: "ended without a result".to_owned()
        })
    );
}

#[test]
fn result_naming_another_attempt_is_not_ingested() {
    let run = ended_with(result(Some("build-a7"), NOW - 10));
    let actions = decide(&running(1), Some(&fresh("build-a1")), &run, NOW);
    assert_eq!(
        actions,
        vec![
            Action::Ingest(AttemptEnd::NoResult {
                reason: "result names attempt build-a7 instead of build-a1".to_owned()
            }),
            Action::DeleteRun
        ]
    );
}

#[test]
fn run_that_disappeared_is_a_crash() {
    assert_eq!(
        decide(
            &running(1),
            Some(&fresh("build-a1")),
            &RunView::Missing,
            NOW
        ),
        vec![Action::Ingest(AttemptEnd::NoResult {
            reason: "the attempt's run disappeared".to_owned()
        })]
    );
}

// --- Running tasks: the claim was lost ----------------------------------------------

#[test]
fn result_from_an_attempt_that_no_longer_holds_the_claim_is_ignored() {
    let run = ended_with(result(Some("build-a1"), NOW - 10));
    assert_eq!(
        decide(&running(1), Some(&fresh("other-a1")), &run, NOW),
        vec![
            Action::Ingest(AttemptEnd::ClaimLost {
                reason: "claim taken over by other-a1".to_owned()
            }),
            Action::DeleteRun
        ]
    );
}

#[test]
fn removed_claim_makes_the_attempt_lost_and_deletes_its_run() {
    assert_eq!(
        decide(&running(1), None, &running_run(), NOW),
        vec![
            Action::Ingest(AttemptEnd::ClaimLost {
                reason: "claim was removed".to_owned()
            }),
            Action::DeleteRun
        ]
    );
}

#[test]
fn expired_own_claim_makes_a_running_attempt_lost() {
    assert_eq!(
        decide(&running(1), Some(&expired("build-a1")), &running_run(), NOW),
        vec![
            Action::Ingest(AttemptEnd::ClaimLost {
                reason: "claim not renewed within 60 s".to_owned()
            }),
            Action::DeleteRun
        ]
    );
}

#[test]
fn expired_claim_with_run_already_gone_is_lost_without_deleting_anything() {
    assert_eq!(
        decide(
            &running(1),
            Some(&expired("build-a1")),
            &RunView::Missing,
            NOW
        ),
        vec![Action::Ingest(AttemptEnd::ClaimLost {
            reason: "claim not renewed within 60 s".to_owned()
        })]
    );
}

#[test]
fn result_finished_before_the_claim_expired_still_counts() {
    let c = expired("build-a1");
    let r = result(Some("build-a1"), c.expires_at_ms() - 1);
    let actions = decide(&running(1), Some(&c), &ended_with(r.clone()), NOW);
    assert_eq!(
        actions[0],
        Action::Ingest(AttemptEnd::Reported(Box::new(r)))
    );
}

#[test]
fn result_finished_after_the_claim_expired_is_ignored() {
    let c = expired("build-a1");
    let r = result(Some("build-a1"), c.expires_at_ms());
    let actions = decide(&running(1), Some(&c), &ended_with(r), NOW);
    assert_eq!(
        actions[0],
        Action::Ingest(AttemptEnd::ClaimLost {
            reason: "claim not renewed within 60 s".to_owned()
        })
    );
}

// --- Suspend ------------------------------------------------------------------------

fn suspended_running() -> TaskView {
    TaskView {
        gate: FeatureGate::Suspended,
        ..running(1)
    }
}

#[test]
fn suspend_cancels_a_running_attempt() {
    let c = fresh("build-a1");
    assert_eq!(
        decide(&suspended_running(), Some(&c), &running_run(), NOW),
        vec![Action::Cancel, Action::RequeueAt(c.expires_at_ms())]
    );
}

#[test]
fn suspend_before_the_run_was_created_interrupts_without_starting_it() {
    assert_eq!(
        decide(
            &suspended_running(),
            Some(&fresh("build-a1")),
            &RunView::NotStarted,
            NOW
        ),
        vec![Action::Ingest(AttemptEnd::Interrupted {
            reason: "feature suspended".to_owned()
        })]
    );
}

#[test]
fn run_deleted_by_the_suspend_is_interrupted_not_crashed() {
    assert_eq!(
        decide(
            &suspended_running(),
            Some(&fresh("build-a1")),
            &RunView::Missing,
            NOW
        )[0],
        Action::Ingest(AttemptEnd::Interrupted {
            reason: "feature suspended".to_owned()
        })
    );
}

#[test]
fn cancelled_run_that_ended_without_result_is_interrupted_not_crashed() {
    let run = RunView::Ended {
        result: None,
        reason: Some("Error".to_owned()),
    };
    assert_eq!(
        decide(&suspended_running(), Some(&fresh("build-a1")), &run, NOW)[0],
        Action::Ingest(AttemptEnd::Interrupted {
            reason: "feature suspended".to_owned()
        })
    );
}

#[test]
fn cancelled_run_that_reported_goes_to_the_policy() {
    let mut r = result(Some("build-a1"), NOW - 10);
    r.outcome = OutcomeClass::Cancelled;
    r.stop_reason = Some(StopReason::Cancelled);
    assert_eq!(
        decide(
            &suspended_running(),
            Some(&fresh("build-a1")),
            &ended_with(r.clone()),
            NOW
        )[0],
        Action::Ingest(AttemptEnd::Reported(Box::new(r)))
    );
}

// --- Spec changed while running -----------------------------------------------------

#[test]
fn spec_change_while_running_supersedes_the_attempt_once() {
    let t = TaskView {
        generation: 2,
        ..running(1)
    };
    assert_eq!(
        decide(&t, Some(&fresh("build-a1")), &running_run(), NOW),
        vec![
            Action::Ingest(AttemptEnd::Superseded {
                from_generation: 1,
                to_generation: 2
            }),
            Action::Cancel
        ]
    );
}

#[test]
fn attempt_spawned_for_the_current_generation_is_never_respawned() {
    let t = TaskView {
        generation: 2,
        attempt: Some(AttemptView {
            number: 2,
            generation: 2,
        }),
        ..task(TaskPhase::Running)
    };
    let c = fresh("build-a2");
    assert_eq!(
        decide(&t, Some(&c), &running_run(), NOW),
        vec![Action::RequeueAt(c.expires_at_ms())]
    );
}

#[test]
fn spec_change_before_the_run_was_created_supersedes_without_cancelling() {
    let t = TaskView {
        generation: 3,
        ..running(1)
    };
    assert_eq!(
        decide(&t, Some(&fresh("build-a1")), &RunView::NotStarted, NOW),
        vec![Action::Ingest(AttemptEnd::Superseded {
            from_generation: 1,
            to_generation: 3
        })]
    );
}

#[test]
fn spec_change_after_the_run_ended_ingests_its_result() {
    let t = TaskView {
        generation: 2,
        ..running(1)
    };
    let r = result(Some("build-a1"), NOW - 10);
    assert_eq!(
        decide(&t, Some(&fresh("build-a1")), &ended_with(r.clone()), NOW)[0],
        Action::Ingest(AttemptEnd::Reported(Box::new(r)))
    );
}

// --- Finished tasks -----------------------------------------------------------------

#[test]
fn done_task_cleans_up_its_run_and_leaves_its_spent_claim() {
    let t = TaskView {
        attempt: Some(AttemptView {
            number: 1,
            generation: 1,
        }),
        ..task(TaskPhase::Done)
    };
    let run = ended_with(result(Some("build-a1"), NOW - 10));
    assert_eq!(
        decide(&t, Some(&fresh("build-a1")), &run, NOW),
        vec![Action::DeleteRun]
    );
}

#[test]
fn failed_task_leaves_a_claim_it_does_not_hold_alone() {
    let t = TaskView {
        attempt: Some(AttemptView {
            number: 1,
            generation: 1,
        }),
        ..task(TaskPhase::Failed)
    };
    assert!(decide(&t, Some(&fresh("other-a1")), &RunView::Missing, NOW).is_empty());
}

#[test]
fn blocked_task_with_nothing_left_needs_nothing() {
    assert!(decide(&task(TaskPhase::Blocked), None, &RunView::NotStarted, NOW).is_empty());
}

// --- Spent claims -------------------------------------------------------------------

#[test]
fn a_finished_tasks_claim_is_spent_whoever_holds_it() {
    for phase in [TaskPhase::Done, TaskPhase::Failed, TaskPhase::Blocked] {
        assert!(is_spent("build", phase, 1, "build-a1"), "{phase:?}");
        assert!(is_spent("build", phase, 1, "build-a2"), "{phase:?}");
    }
}

#[test]
fn the_running_attempts_claim_is_not_spent() {
    assert!(!is_spent("build", TaskPhase::Running, 2, "build-a2"));
}

#[test]
fn an_earlier_attempts_claim_is_spent() {
    assert!(is_spent("build", TaskPhase::Running, 2, "build-a1"));
    assert!(is_spent("build", TaskPhase::Pending, 3, "build-a1"));
}

#[test]
fn the_last_attempts_claim_is_spent_once_the_task_is_no_longer_running() {
    assert!(is_spent("build", TaskPhase::Pending, 2, "build-a2"));
}

#[test]
fn a_claim_for_the_next_attempt_not_recorded_as_started_is_not_spent() {
    assert!(!is_spent("build", TaskPhase::Pending, 2, "build-a3"));
}

#[test]
fn a_claim_held_by_anything_but_the_tasks_own_attempts_is_not_spent() {
    for holder in [
        "other-a1",
        "build",
        "build-a",
        "build-a0",
        "build-a01",
        "build-x1",
    ] {
        assert!(
            !is_spent("build", TaskPhase::Pending, 5, holder),
            "{holder}"
        );
    }
    assert!(!is_spent("build", TaskPhase::Pending, 5, "builder-a1"));
}

#[test]
fn a_finished_tasks_claim_by_an_attempt_not_recorded_as_started_is_not_spent_by_a_recorded_one() {
    assert!(is_spent("build", TaskPhase::Done, 1, "build-a2"));
    assert!(!is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Done,
        1,
        "build-a2"
    ));
    assert!(!is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Done,
        1,
        "other-a1"
    ));
}

#[test]
fn a_recorded_attempts_concluded_claim_is_spent_by_a_recorded_one() {
    assert!(is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Done,
        2,
        "build-a2"
    ));
    assert!(is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Pending,
        2,
        "build-a2"
    ));
    assert!(is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Running,
        2,
        "build-a1"
    ));
    assert!(!is_spent_by_recorded_attempt(
        "build",
        TaskPhase::Running,
        2,
        "build-a2"
    ));
}

// --- Properties ---------------------------------------------------------------------

fn any_phase() -> impl Strategy<Value = TaskPhase> {
    prop_oneof![
        Just(TaskPhase::Pending),
        Just(TaskPhase::Running),
        Just(TaskPhase::Done),
        Just(TaskPhase::Failed),
        Just(TaskPhase::Blocked),
    ]
}

fn any_gate() -> impl Strategy<Value = FeatureGate> {
    prop_oneof![
        Just(FeatureGate::Open),
        Just(FeatureGate::AtCapacity),
        Just(FeatureGate::Suspended),
        Just(FeatureGate::Stopped),
    ]
}

fn any_task() -> impl Strategy<Value = TaskView> {
    (
        any_phase(),
        any::<bool>(),
        1i64..4,
        proptest::option::of(NOW - 10_000..NOW + 10_000),
        proptest::option::of((1u32..4, 1i64..4)),
        any_gate(),
    )
        .prop_map(|(phase, ready, generation, next, attempt, gate)| TaskView {
            name: "build".to_owned(),
            phase,
            ready,
            generation,
            next_attempt_after_ms: next,
            attempt: attempt.map(|(number, generation)| AttemptView { number, generation }),
            gate,
        })
}

fn any_claim() -> impl Strategy<Value = Option<ClaimView>> {
    proptest::option::of(
        (
            prop_oneof![
                Just("build-a1"),
                Just("build-a2"),
                Just("build-a3"),
                Just("other-a1")
            ],
            NOW - 2 * LEASE_MS..NOW,
        )
            .prop_map(|(holder, renewed)| claim(holder, renewed)),
    )
}

fn any_run() -> impl Strategy<Value = RunView> {
    prop_oneof![
        Just(RunView::NotStarted),
        Just(RunView::pending()),
        Just(waiting_until(NOW - 1)),
        Just(running_run()),
        Just(RunView::Missing),
        Just(RunView::Ended {
            result: None,
            reason: None
        }),
        Just(ended_with(result(Some("build-a1"), NOW - 10))),
    ]
}

proptest! {
    #[test]
    fn nothing_is_claimed_or_started_unless_the_feature_is_open(
        t in any_task(), c in any_claim(), run in any_run()
    ) {
        prop_assume!(t.gate != FeatureGate::Open);
        let actions = decide(&t, c.as_ref(), &run, NOW);
        let starts = actions.iter().any(|a| {
            matches!(a, Action::Claim { .. })
                || (matches!(a, Action::StartAttempt { .. }) && t.gate == FeatureGate::Suspended)
        });
        prop_assert!(!starts, "{actions:?}");
    }

    #[test]
    fn a_fresh_claim_held_by_someone_else_is_never_taken_over(
        t in any_task(), renewed in NOW - LEASE_MS + 1..NOW, run in any_run()
    ) {
        let c = claim("other-a1", renewed);
        let actions = decide(&t, Some(&c), &run, NOW);
        prop_assert!(
            !actions.iter().any(|a| matches!(a, Action::Claim { .. })),
            "{actions:?}"
        );
    }

    #[test]
    fn an_attempt_is_started_only_with_a_claim_for_it(
        t in any_task(), c in any_claim(), run in any_run()
    ) {
        let actions = decide(&t, c.as_ref(), &run, NOW);
        for (i, action) in actions.iter().enumerate() {
            if let Action::StartAttempt { attempt } = action {
                let claimed_now = actions[..i]
                    .iter()
                    .any(|a| matches!(a, Action::Claim { attempt: n, .. } if n == attempt));
                let held = c.as_ref().is_some_and(|c| {
                    c.holder == attempt_id(&t.name, *attempt) && !c.is_expired(NOW)
                });
                prop_assert!(claimed_now || held, "{actions:?}");
            }
        }
    }
}
