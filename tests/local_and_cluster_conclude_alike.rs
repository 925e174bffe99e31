//! One table of attempt ends, concluded by both modes' adapters: the local run's (task row,
//! feature spec, attempt rows) and the controller's (Task and Feature objects). The same
//! inputs must give the same phase, retry count, wait and message.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{cluster_objects, mentions};

use cluster_objects::{hello_feature, hello_task};
use mentions::assert_mentions;
use ralph::api::AttemptOutcome;
use ralph::controller::plan::status::{self, Ingestion};
use ralph::engine::attempt::{AttemptResult, StopReason};
use ralph::engine::dag::TaskPhase;
use ralph::engine::lifecycle::AttemptEnd;
use ralph::engine::sigils::{Promise, Sigils};
use ralph::engine::testing;
use ralph::engine::verification::{AttemptKind, CheckReport};
use ralph::engine::workspace::{WorkspaceOutcome, WorkspaceReport};
use ralph::local::feature::LocalFeature;
use ralph::local::store::{AttemptRow, EndDetails, TaskRow};
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

/// A task before the attempt ends: retries used, the outcomes of earlier (work) attempts,
/// what the ending attempt does, and the feature's `spec.verify`.
struct Before {
    retry_count: u32,
    history: Vec<AttemptOutcome>,
    kind: AttemptKind,
    verify: serde_json::Value,
}

fn fresh() -> Before {
    Before {
        retry_count: 0,
        history: Vec::new(),
        kind: AttemptKind::Work,
        verify: serde_json::json!({}),
    }
}

/// A work attempt under `spec.verify` = `verify`.
fn verified_by(verify: serde_json::Value) -> Before {
    Before { verify, ..fresh() }
}

/// The verification attempt after a work attempt reported done, with `retry_count` used.
fn verifying(retry_count: u32) -> Before {
    Before {
        retry_count,
        history: vec![AttemptOutcome::Done],
        kind: AttemptKind::Verify,
        verify: serde_json::json!({"agent": true}),
    }
}

fn local(before: &Before, end: &AttemptEnd) -> Concluded {
    local_in(before, end, None)
}

/// [`local`] for an attempt whose worktree's git steps reported `workspace`.
fn local_in(before: &Before, end: &AttemptEnd, workspace: Option<&WorkspaceReport>) -> Concluded {
    let feature = LocalFeature {
        max_retries: MAX_RETRIES,
        verify: serde_json::from_value(before.verify.clone()).unwrap(),
        ..local_testing::feature(Vec::new())
    };
    let mut row = TaskRow {
        retry_count: before.retry_count,
        attempt_count: attempt_count(before),
        ..local_testing::row("t", TaskPhase::Running)
    };
    let mut history: Vec<AttemptRow> = before
        .history
        .iter()
        .zip(1..)
        .map(|(outcome, number)| local_testing::attempt("t", number, outcome.as_str()))
        .collect();
    history.push(AttemptRow {
        outcome: None,
        ended_at_ms: None,
        kind: before.kind,
        ..local_testing::attempt("t", attempt_count(before), "")
    });
    let next = ralph::local::scheduler::conclude::conclude_with_workspace(
        &feature, &mut row, &history, end, workspace, NOW, JITTER,
    );
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
    cluster_in(before, end, None)
}

/// [`cluster`] for an attempt whose Pod's git steps reported `workspace`.
fn cluster_in(before: &Before, end: &AttemptEnd, workspace: Option<&WorkspaceReport>) -> Concluded {
    let feature = hello_feature(serde_json::json!({
        "retry": {"maxRetries": MAX_RETRIES, "backoffBaseSeconds": 10, "backoffMaxSeconds": 600},
        "verify": before.verify,
    }));
    let mut attempts: Vec<serde_json::Value> = before
        .history
        .iter()
        .zip(1..)
        .map(|(outcome, number)| serde_json::json!({"number": number, "outcome": outcome}))
        .collect();
    attempts.push(serde_json::json!({"number": attempt_count(before), "kind": before.kind}));
    let task = hello_task(serde_json::json!({
        "phase": "Running",
        "retryCount": before.retry_count,
        "attemptCount": attempt_count(before),
        "attempts": attempts,
    }));
    let next = ralph::controller::act::task::conclude_in_workspace(
        &feature, &task, "t", end, workspace, NOW, JITTER,
    );
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

fn verifier_said(text: &str) -> AttemptEnd {
    reported(testing::with_sigils(
        "t",
        ralph::engine::sigils::parse(text),
    ))
}

fn done_and_checked(exit_code: i32) -> AttemptEnd {
    reported(AttemptResult {
        check: Some(CheckReport {
            command: "cargo test".to_owned(),
            exit_code: Some(exit_code),
            output_tail: "test greeting ... FAILED".to_owned(),
            ..CheckReport::default()
        }),
        ..testing::done("t")
    })
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
        history: vec![AttemptOutcome::Released; n],
        ..fresh()
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
                ..fresh()
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
        (
            "done, verification due",
            verified_by(serde_json::json!({"agent": true})),
            reported(testing::done("t")),
            TaskPhase::Pending,
            0,
            None,
        ),
        (
            "verifier passes",
            verifying(0),
            verifier_said("All tests pass.\n\n<verify-pass>t</verify-pass>"),
            TaskPhase::Done,
            0,
            None,
        ),
        (
            "verifier rejects",
            verifying(0),
            verifier_said("GET /greeting answers 500.\n\n<verify-fail>t</verify-fail>"),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "verifier rejects, no retries left",
            verifying(MAX_RETRIES),
            verifier_said("Still broken.\n\n<verify-fail>t</verify-fail>"),
            TaskPhase::Failed,
            MAX_RETRIES,
            None,
        ),
        (
            "verifier crashes",
            verifying(0),
            reported(testing::crashed("t", "exit code 1: boom")),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "verifier without a verdict",
            verifying(0),
            reported(testing::result("t")),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "verifier ends without a result",
            verifying(0),
            AttemptEnd::NoResult {
                reason: "OOMKilled".to_owned(),
            },
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "verify.command fails",
            verified_by(serde_json::json!({"command": "cargo test"})),
            done_and_checked(101),
            TaskPhase::Pending,
            1,
            Some(12_500),
        ),
        (
            "verify.command passes",
            verified_by(serde_json::json!({"command": "cargo test"})),
            done_and_checked(0),
            TaskPhase::Done,
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

/// Asserts that the message of both modes' conclusion (after the git steps' `workspace`
/// report, when given) mentions every one of `parts`.
fn assert_both_modes_say(
    before: &Before,
    end: &AttemptEnd,
    workspace: Option<&WorkspaceReport>,
    parts: &[&str],
) {
    for concluded in [
        local_in(before, end, workspace),
        cluster_in(before, end, workspace),
    ] {
        assert_mentions(&concluded.message, parts);
    }
}

#[test]
fn a_lost_claim_says_why_in_both_modes() {
    let end = AttemptEnd::ClaimLost {
        reason: "claim taken over by x".to_owned(),
    };
    assert_both_modes_say(&fresh(), &end, None, &["claim taken over by x"]);
}

#[test]
fn a_superseded_attempt_is_not_called_cancelled_in_either_mode() {
    let end = AttemptEnd::Superseded {
        from_generation: 1,
        to_generation: 2,
    };
    assert_both_modes_say(&fresh(), &end, None, &["spec changed"]);
}

#[test]
fn a_failed_verification_says_why_in_both_modes() {
    let end = verifier_said("GET /greeting answers 500.\n\n<verify-fail>t</verify-fail>");
    let says = "verification failed: the verifier rejected the work";
    assert_both_modes_say(&verifying(0), &end, None, &[says]);
}

// Git: a done verdict whose work did not reach the feature branch is concluded alike from
// a Pod's report and from `ralph run`'s worktree integration.

fn git_report(outcome: WorkspaceOutcome) -> WorkspaceReport {
    WorkspaceReport {
        conflict_files: vec!["shared.txt".to_owned()],
        conflicting_tasks: vec!["other".to_owned()],
        message: Some("the remote hung up".to_owned()),
        ..WorkspaceReport::new(outcome)
    }
}

#[test]
fn both_modes_conclude_git_outcomes_of_a_done_verdict_alike() {
    let done = reported(testing::done("t"));
    for (outcome, phase, retry_count) in [
        (WorkspaceOutcome::Integrated, TaskPhase::Done, 0),
        (WorkspaceOutcome::Unchanged, TaskPhase::Done, 0),
        (WorkspaceOutcome::Conflict, TaskPhase::Pending, 1),
        (WorkspaceOutcome::Failed, TaskPhase::Pending, 1),
    ] {
        let report = git_report(outcome);
        let local = local_in(&fresh(), &done, Some(&report));
        let cluster = cluster_in(&fresh(), &done, Some(&report));
        assert_eq!(local, cluster, "{outcome:?}: the modes disagree");
        assert_eq!(
            (local.phase, local.retry_count),
            (phase, retry_count),
            "{outcome:?}: {}",
            local.message
        );
    }
}

#[test]
fn a_conflict_names_the_files_and_the_other_task_in_both_modes() {
    let done = reported(testing::done("t"));
    let report = git_report(WorkspaceOutcome::Conflict);
    assert_both_modes_say(&fresh(), &done, Some(&report), &["shared.txt", "other"]);
}

// Budgets: the same attempts add up to the same totals, with the same unknown costs, and
// spend the same budget in both modes (local: derived from the stored attempt rows; cluster:
// counted into the Task's status on ingest).

/// What a mode says the attempts spent against a budget.
#[derive(Debug, PartialEq)]
struct Spending {
    tokens: u64,
    cost: String,
    spent: Option<String>,
}

/// An attempt without a verdict that reported `input` tokens and `cost` dollars.
fn spending(input: u64, cost: Option<f64>) -> AttemptEnd {
    let mut result = testing::result("t");
    result.usage.tokens.input = input;
    result.usage.cost_usd = cost;
    reported(result)
}

fn budget(json: serde_json::Value) -> ralph::api::BudgetSpec {
    serde_json::from_value(json).expect("valid budget")
}

fn local_spending(spec: &ralph::api::BudgetSpec, ends: &[AttemptEnd]) -> Spending {
    let feature = LocalFeature {
        budget: spec.budget().expect("usable budget"),
        ..local_testing::feature(Vec::new())
    };
    let mut row = local_testing::row("t", TaskPhase::Running);
    let mut history: Vec<AttemptRow> = Vec::new();
    for (end, number) in ends.iter().zip(1..) {
        row.phase = TaskPhase::Running;
        row.attempt_count = number;
        let next = ralph::local::scheduler::conclude::conclude(
            &feature, &mut row, &history, end, NOW, JITTER,
        );
        // What the local executor stores: the usage, and the result when one was reported.
        history.push(AttemptRow {
            details: EndDetails {
                usage: next.usage.clone(),
                result: matches!(end, AttemptEnd::Reported(_)).then(|| "{}".to_owned()),
                ..EndDetails::default()
            },
            ..local_testing::attempt("t", number, next.outcome().as_str())
        });
    }
    let totals = ralph::local::budget::attempt_totals(&history);
    Spending {
        tokens: totals.tokens(),
        cost: totals.cost_text(),
        spent: feature.budget.spent(&totals).map(|s| s.to_string()),
    }
}

fn cluster_spending(spec: &ralph::api::BudgetSpec, ends: &[AttemptEnd]) -> Spending {
    let mut feature = hello_feature(serde_json::json!({}));
    feature.spec.budget = Some(spec.clone());
    let mut task = hello_task(serde_json::Value::Null);
    for (end, number) in ends.iter().zip(1..) {
        let claim = ralph::api::ClaimStatus {
            lease: "hello-t".to_owned(),
            holder: format!("hello-t-a{number}"),
            attempt: number,
            acquired_at: None,
            fencing_token: 0,
        };
        task.status = Some(status::started(
            &task,
            number,
            &claim.holder.clone(),
            task.metadata.generation,
            claim,
            NOW,
        ));
        let next = ralph::controller::act::task::conclude(&feature, &task, "t", end, NOW, JITTER);
        let result = match end {
            AttemptEnd::Reported(result) => Some(result.as_ref()),
            _ => None,
        };
        let ingestion = Ingestion {
            decision: &next.decision,
            result,
            next_attempt_after_ms: next.next_attempt_after_ms,
            now_ms: NOW,
        };
        task.status = Some(status::ingested(&task, &ingestion));
    }
    let tasks = [std::sync::Arc::new(task)];
    let totals = ralph::controller::plan::budget::recorded(&tasks);
    let pods = std::collections::BTreeMap::new();
    Spending {
        tokens: totals.tokens(),
        cost: totals.cost_text(),
        spent: ralph::controller::plan::budget::budget_spent(&feature, &tasks, &pods)
            .map(|s| s.to_string()),
    }
}

/// A budget scenario: a name, the budget, the attempts' ends, and what both modes must say.
type BudgetScenario = (&'static str, serde_json::Value, Vec<AttemptEnd>, Spending);

fn budget_scenarios() -> Vec<BudgetScenario> {
    vec![
        (
            "reported costs reach maxCostUSD",
            serde_json::json!({"maxCostUSD": "0.50"}),
            vec![spending(100, Some(0.3)), spending(50, Some(0.25))],
            Spending {
                tokens: 150,
                cost: "$0.55".to_owned(),
                spent: Some(
                    "the cost budget is spent: $0.55 reported of maxCostUSD $0.50".to_owned(),
                ),
            },
        ),
        (
            "tokens reach maxTokens",
            serde_json::json!({"maxTokens": 120}),
            vec![spending(100, None), spending(20, None)],
            Spending {
                tokens: 120,
                cost: "unknown (2 attempts)".to_owned(),
                spent: Some(
                    "the token budget is spent: 120 tokens reported of maxTokens 120".to_owned(),
                ),
            },
        ),
        (
            "an unknown cost does not spend a cost budget",
            serde_json::json!({"maxCostUSD": "0.01"}),
            vec![spending(100_000, None)],
            Spending {
                tokens: 100_000,
                cost: "unknown (1 attempt)".to_owned(),
                spent: None,
            },
        ),
        (
            "an attempt without a result has an unknown cost",
            serde_json::json!({"maxCostUSD": "1"}),
            vec![
                AttemptEnd::NoResult {
                    reason: "OOMKilled".to_owned(),
                },
                spending(10, Some(0.2)),
            ],
            Spending {
                tokens: 10,
                cost: "$0.20 + unknown (1 attempt)".to_owned(),
                spent: None,
            },
        ),
        (
            "below both limits",
            serde_json::json!({"maxCostUSD": "1", "maxTokens": 1000}),
            vec![spending(999, Some(0.999999))],
            Spending {
                tokens: 999,
                cost: "$0.999999".to_owned(),
                spent: None,
            },
        ),
    ]
}

#[test]
fn both_modes_count_and_spend_budgets_alike() {
    for (name, spec, ends, expected) in budget_scenarios() {
        let spec = budget(spec);
        let local = local_spending(&spec, &ends);
        let cluster = cluster_spending(&spec, &ends);
        assert_eq!(local, cluster, "scenario {name:?}: the modes disagree");
        assert_eq!(local, expected, "scenario {name:?}");
    }
}
