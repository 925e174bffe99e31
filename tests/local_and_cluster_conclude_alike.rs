//! One table of attempt ends, concluded by both modes' adapters: the local run's (task row,
//! feature spec, attempt rows) and the controller's (Task and Feature objects). The same
//! inputs must give the same phase, retry count, wait and message.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ralph::api::{AttemptOutcome, Feature, Task};
use ralph::controller::status::{self, Ingestion};
use ralph::engine::attempt::{AttemptResult, StopReason};
use ralph::engine::dag::TaskPhase;
use ralph::engine::lifecycle::AttemptEnd;
use ralph::engine::sigils::{Promise, Sigils};
use ralph::engine::testing;
use ralph::local::feature::LocalFeature;
use ralph::local::store::{AttemptRow, TaskRow};
use ralph::local::testing as local_testing;

const NOW: i64 = 1_700_000_000_000;
const JITTER: f64 = 0.25;
const MAX_RETRIES: u32 = 2;

/// What a conclusion says, as both modes must agree on it.
#[derive(Debug, PartialEq)]
struct Concluded {
    phase: TaskPhase,
    retry_count: u32,
    wait_ms: Option<i64>,
    message: String,
}

/// A task before the attempt ends: retries used and the outcomes of earlier attempts.
struct Before {
    retry_count: u32,
    history: Vec<AttemptOutcome>,
}

fn fresh() -> Before {
    Before {
        retry_count: 0,
        history: Vec::new(),
    }
}

fn local(before: &Before, end: &AttemptEnd) -> Concluded {
    let feature = LocalFeature {
        max_retries: MAX_RETRIES,
        ..local_testing::feature(Vec::new())
    };
    let mut row = TaskRow {
        retry_count: before.retry_count,
        attempt_count: attempt_count(before),
        ..local_testing::row("t", TaskPhase::Running)
    };
    let history: Vec<AttemptRow> = before
        .history
        .iter()
        .zip(1..)
        .map(|(outcome, number)| local_testing::attempt("t", number, outcome.as_str()))
        .collect();
    let next =
        ralph::local::scheduler::conclude::conclude(&feature, &mut row, &history, end, NOW, JITTER);
    Concluded {
        phase: row.phase,
        retry_count: row.retry_count,
        wait_ms: row.next_attempt_after_ms.map(|at| at - NOW),
        message: next.message,
    }
}

fn attempt_count(before: &Before) -> u32 {
    u32::try_from(before.history.len()).unwrap_or(u32::MAX) + 1
}

fn cluster(before: &Before, end: &AttemptEnd) -> Concluded {
    let feature: Feature = serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": "hello", "namespace": "ns", "generation": 1},
        "spec": {
            "agent": {"image": "agent:1", "command": ["agent"]},
            "retry": {"maxRetries": MAX_RETRIES, "backoffBaseSeconds": 10, "backoffMaxSeconds": 600},
            "tasks": [{"name": "t"}]
        }
    }))
    .expect("valid feature");
    let mut attempts: Vec<serde_json::Value> = before
        .history
        .iter()
        .zip(1..)
        .map(|(outcome, number)| serde_json::json!({"number": number, "outcome": outcome}))
        .collect();
    attempts.push(serde_json::json!({"number": attempt_count(before)}));
    let task: Task = serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": "hello-t", "namespace": "ns", "generation": 1},
        "spec": {"featureRef": "hello"},
        "status": {
            "phase": "Running",
            "retryCount": before.retry_count,
            "attemptCount": attempt_count(before),
            "attempts": attempts,
        }
    }))
    .expect("valid task");
    let next = ralph::controller::task::conclude(&feature, &task, "t", end, NOW, JITTER);
    let result = match end {
        AttemptEnd::Reported(result) => Some(result.as_ref()),
        _ => None,
    };
    let status = status::ingested(
        &task,
        &Ingestion {
            decision: &next.decision,
            result,
            next_attempt_after_ms: next.next_attempt_after_ms,
            now_ms: NOW,
        },
    );
    Concluded {
        phase: status.phase,
        retry_count: status.retry_count,
        wait_ms: status
            .next_attempt_after
            .map(|at| at.0.as_millisecond() - NOW),
        message: status.message.unwrap_or_default(),
    }
}

fn reported(result: AttemptResult) -> AttemptEnd {
    AttemptEnd::Reported(Box::new(result))
}

/// A scenario: a name, the task before, the attempt's end, and the expected phase, retry
/// count and wait (the message is compared between the modes).
type Scenario = (
    &'static str,
    Before,
    AttemptEnd,
    TaskPhase,
    u32,
    Option<i64>,
);

fn scenarios() -> Vec<Scenario> {
    let in_a_row = |n: usize| Before {
        retry_count: 0,
        history: vec![AttemptOutcome::Released; n],
    };
    let promise_failure = testing::with_sigils(
        "t",
        Sigils {
            promise: Some(Promise::Failure),
            promise_reason: Some("the spec is contradictory".to_owned()),
            ..Sigils::default()
        },
    );
    vec![
        (
            "done",
            fresh(),
            reported(testing::done("t")),
            TaskPhase::Done,
            0,
            None,
        ),
        (
            "failed, retried",
            fresh(),
            reported(testing::failed("t", Some("tests fail"))),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "failed, no retries left",
            Before {
                retry_count: MAX_RETRIES,
                history: vec![AttemptOutcome::Failed; 2],
            },
            reported(testing::failed("t", None)),
            TaskPhase::Failed,
            MAX_RETRIES,
            None,
        ),
        (
            "crashed",
            fresh(),
            reported(testing::crashed("t", "exit code 1: boom")),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "no result",
            fresh(),
            AttemptEnd::NoResult {
                reason: "OOMKilled".to_owned(),
            },
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "claim lost",
            fresh(),
            AttemptEnd::ClaimLost {
                reason: "claim taken over by x".to_owned(),
            },
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "no sigil",
            fresh(),
            reported(testing::result("t")),
            TaskPhase::Pending,
            0,
            Some(12_500),
        ),
        (
            "third without a verdict",
            in_a_row(2),
            reported(testing::result("t")),
            TaskPhase::Pending,
            0,
            Some(42_500),
        ),
        (
            "fifth without a verdict",
            in_a_row(4),
            reported(testing::result("t")),
            TaskPhase::Failed,
            0,
            None,
        ),
        (
            "max tokens",
            fresh(),
            reported(testing::stopped("t", StopReason::MaxTokens)),
            TaskPhase::Pending,
            0,
            Some(12_500),
        ),
        (
            "refusal",
            fresh(),
            reported(testing::stopped("t", StopReason::Refusal)),
            TaskPhase::Failed,
            0,
            None,
        ),
        (
            "exhausted, reset known",
            fresh(),
            reported(testing::exhausted(
                "t",
                "try again in 2 hours",
                Some(NOW / 1000 + 7_200),
            )),
            TaskPhase::Pending,
            0,
            // The agent rests; the task goes to the next agent of the pool (selection).
            None,
        ),
        (
            "exhausted, reset unknown",
            fresh(),
            reported(testing::exhausted("t", "quota", None)),
            TaskPhase::Pending,
            0,
            None,
        ),
        (
            "interrupted",
            fresh(),
            AttemptEnd::Interrupted {
                reason: "feature suspended".to_owned(),
            },
            TaskPhase::Pending,
            0,
            None,
        ),
        (
            "superseded",
            fresh(),
            AttemptEnd::Superseded {
                from_generation: 1,
                to_generation: 2,
            },
            TaskPhase::Pending,
            0,
            None,
        ),
        (
            "misconfigured",
            fresh(),
            reported(testing::misconfigured("t", "no such binary", "install it")),
            TaskPhase::Pending,
            0,
            None,
        ),
        (
            "promised FAILURE",
            fresh(),
            reported(promise_failure),
            TaskPhase::Pending,
            0,
            None,
        ),
    ]
}

#[test]
fn both_modes_conclude_every_scenario_alike() {
    for (name, before, end, phase, retry_count, wait_ms) in scenarios() {
        let local = local(&before, &end);
        let cluster = cluster(&before, &end);
        assert_eq!(local, cluster, "scenario {name:?}: the modes disagree");
        assert_eq!(
            (local.phase, local.retry_count, local.wait_ms),
            (phase, retry_count, wait_ms),
            "scenario {name:?}: {}",
            local.message
        );
    }
}

#[test]
fn a_lost_claim_says_why_in_both_modes() {
    let end = AttemptEnd::ClaimLost {
        reason: "claim taken over by x".to_owned(),
    };
    for concluded in [local(&fresh(), &end), cluster(&fresh(), &end)] {
        assert!(
            concluded.message.contains("claim taken over by x"),
            "{}",
            concluded.message
        );
    }
}

#[test]
fn a_superseded_attempt_is_not_called_cancelled_in_either_mode() {
    let end = AttemptEnd::Superseded {
        from_generation: 1,
        to_generation: 2,
    };
    for concluded in [local(&fresh(), &end), cluster(&fresh(), &end)] {
        assert!(
            concluded.message.contains("spec changed"),
            "{}",
            concluded.message
        );
    }
}
