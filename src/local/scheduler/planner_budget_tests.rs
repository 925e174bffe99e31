//! The local planner and the feature's budget.

use super::*;
use crate::engine::attempt::{AttemptResult, Tokens, Usage};
use crate::engine::budget::{Budget, MicroUsd};
use crate::engine::testing as results;
use crate::local::testing::{feature, row, run_options, task};

const NOW: i64 = 1_000_000;

fn budgeted(names: &[&str], budget: Budget) -> LocalFeature {
    LocalFeature {
        budget,
        ..feature(names.iter().map(|n| task(n, &[])).collect())
    }
}

fn tokens(max: u64) -> Budget {
    Budget {
        max_tokens: Some(max),
        ..Budget::default()
    }
}

fn dollars(max: &str) -> Budget {
    Budget {
        max_cost: MicroUsd::parse(max).ok(),
        ..Budget::default()
    }
}

fn planner<'a>(feature: &'a LocalFeature, parallel: usize, rows: Vec<TaskRow>) -> Planner<'a> {
    let loaded = Loaded {
        rows,
        iterations: 0,
        stopped: None,
        rests: Default::default(),
        spent: UsageTotals::default(),
        tokens_unreported: 0,
    };
    Planner::new(feature, &run_options(parallel), loaded, NOW).unwrap_or_else(|e| panic!("{e}"))
}

/// Attempt 1 of `task` is in flight.
fn running(plan: &mut Planner<'_>, name: &str) {
    let live = Live::started(lifecycle::attempt_id(name, 1), 1, 1, NOW, 30_000);
    plan.track(name, live);
}

fn done_spending(name: &str, input: u64, cost: Option<f64>) -> AttemptEnd {
    AttemptEnd::Reported(Box::new(AttemptResult {
        usage: Usage {
            tokens: Tokens::new(input, 0),
            cost_usd: cost,
        },
        ..results::done(name)
    }))
}

fn conclude(plan: &mut Planner<'_>, name: &str, end: &AttemptEnd) -> Concluded {
    let concluded = plan.conclude(name, end, &[], NOW, 0.0);
    let concluded = concluded.unwrap_or_else(|e| panic!("{e}"));
    plan.untrack(name);
    concluded.unwrap_or_else(|| panic!("{name} not concluded"))
}

fn rows(running: &[&str], pending: &[&str]) -> Vec<TaskRow> {
    let running = running.iter().map(|n| row(n, TaskPhase::Running));
    running
        .chain(pending.iter().map(|n| row(n, TaskPhase::Pending)))
        .collect()
}

#[test]
fn no_task_starts_once_the_token_budget_is_spent() {
    let feature = budgeted(&["a", "b"], tokens(100));
    let mut plan = planner(&feature, 1, rows(&["a"], &["b"]));
    running(&mut plan, "a");
    let concluded = conclude(&mut plan, "a", &done_spending("a", 100, None));
    assert_eq!(
        concluded.budget_warnings,
        [
            "the token budget is spent: 100 tokens reported of maxTokens 100; no new attempt \
          starts"
        ]
    );
    assert_eq!(
        plan.ready_actions(&mut plan.start_pass(), "b", &[], NOW),
        None
    );
}

#[test]
fn a_task_still_starts_below_the_budget() {
    let feature = budgeted(&["a", "b"], dollars("1.00"));
    let mut plan = planner(&feature, 1, rows(&["a"], &["b"]));
    running(&mut plan, "a");
    conclude(&mut plan, "a", &done_spending("a", 10, Some(0.99)));
    assert!(
        plan.ready_actions(&mut plan.start_pass(), "b", &[], NOW)
            .is_some()
    );
}

#[test]
fn a_spent_budget_ends_the_run_limit_reached_once_the_running_attempts_finish() {
    let feature = budgeted(&["a", "b", "c"], dollars("0.50"));
    let mut plan = planner(&feature, 2, rows(&["a", "b"], &["c"]));
    running(&mut plan, "a");
    running(&mut plan, "b");
    let first = conclude(&mut plan, "a", &done_spending("a", 10, Some(0.5)));
    assert!(
        first.budget_warnings[0].ends_with("the 1 running attempt finishes and is counted"),
        "{:?}",
        first.budget_warnings
    );
    assert_eq!(plan.outcome(), None, "b still runs");
    let second = conclude(&mut plan, "b", &done_spending("b", 10, Some(0.25)));
    assert!(second.budget_warnings.is_empty(), "said once");
    let Some(RunOutcome::Finished { outcome, message }) = plan.outcome() else {
        panic!("the run should be over");
    };
    assert_eq!(outcome, FeatureOutcome::LimitReached);
    assert_eq!(
        message,
        "the cost budget is spent: $0.75 reported of maxCostUSD $0.50; no new attempt \
         starts; 2 of 3 tasks done"
    );
}

#[test]
fn an_attempt_without_a_cost_under_a_cost_budget_warns_once() {
    let feature = budgeted(&["a", "b"], dollars("5"));
    let mut plan = planner(&feature, 2, rows(&["a", "b"], &[]));
    running(&mut plan, "a");
    running(&mut plan, "b");
    let first = conclude(&mut plan, "a", &done_spending("a", 10, None));
    assert_eq!(first.budget_warnings.len(), 1);
    assert!(first.budget_warnings[0].starts_with("1 attempt reported no cost"));
    let second = conclude(&mut plan, "b", &done_spending("b", 10, None));
    assert!(
        second.budget_warnings.is_empty(),
        "{:?}",
        second.budget_warnings
    );
}

#[test]
fn a_run_resumed_over_a_spent_budget_says_so_and_starts_nothing() {
    let feature = budgeted(&["a", "b"], tokens(10));
    let loaded = Loaded {
        rows: rows(&[], &["b"]),
        iterations: 1,
        stopped: None,
        rests: Default::default(),
        spent: UsageTotals {
            tokens: Tokens::new(12, 0),
            ..UsageTotals::default()
        },
        tokens_unreported: 0,
    };
    let plan =
        Planner::new(&feature, &run_options(1), loaded, NOW).unwrap_or_else(|e| panic!("{e}"));
    let warnings = plan.budget_warnings_at_start();
    assert!(
        warnings[0].starts_with("the token budget is spent: 12 tokens"),
        "{warnings:?}"
    );
    assert_eq!(
        plan.ready_actions(&mut plan.start_pass(), "b", &[], NOW),
        None
    );
}

#[test]
fn a_share_that_leases_out_the_budget_ends_the_pass() {
    let feature = budgeted(&["a", "b"], tokens(1));
    let mut plan = planner(&feature, 2, rows(&[], &["a", "b"]));
    let mut slots = plan.start_pass();
    assert!(plan.ready_actions(&mut slots, "a", &[], NOW).is_some());
    let mut live = Live::started(lifecycle::attempt_id("a", 1), 1, 1, NOW, 30_000);
    live.share = plan.budget_share();
    plan.track("a", live);
    assert_eq!(plan.ready_actions(&mut slots, "b", &[], NOW), None);
}
