use std::time::{Duration, Instant};

use super::*;
use crate::engine::testing as results;
use crate::local::executor::Ended;
use crate::local::feature::LocalFeature;
use crate::local::testing::{feature, row, run_options, task};

const NOW: i64 = 1_000_000;

fn loaded(rows: Vec<TaskRow>) -> Loaded {
    Loaded {
        rows,
        iterations: 0,
        stopped: None,
        rests: Rests::new(),
        spent: Default::default(),
        tokens_unreported: 0,
    }
}

fn pending(names: &[&str]) -> Vec<TaskRow> {
    names.iter().map(|n| row(n, TaskPhase::Pending)).collect()
}

fn planner<'a>(feature: &'a LocalFeature, parallel: usize, rows: Vec<TaskRow>) -> Planner<'a> {
    Planner::new(feature, &run_options(parallel), loaded(rows), NOW).unwrap()
}

/// Attempt 1 of `task`, started by this run at `NOW`; its runner spawned as pid 42.
fn spawned(task: &str) -> Live {
    let mut live = Live::started(lifecycle::attempt_id(task, 1), 1, 1, NOW, 30_000);
    live.process = Some(ProcessId {
        pid: 42,
        start: None,
    });
    live
}

fn alive(_: &ProcessId) -> bool {
    true
}

fn starts(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::StartAttempt { attempt: 1 }))
}

#[test]
fn a_ready_task_starts_while_the_feature_has_room() {
    let feature = feature(vec![task("a", &[])]);
    let plan = planner(&feature, 1, pending(&["a"]));
    let actions = plan
        .ready_actions(&mut plan.start_pass(), "a", &[], NOW)
        .unwrap();
    assert!(starts(&actions), "{actions:?}");
}

#[test]
fn no_task_starts_beyond_the_parallelism() {
    let feature = feature(vec![task("a", &[]), task("b", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a", "b"]));
    plan.track("a", spawned("a"));
    assert_eq!(
        plan.ready_actions(&mut plan.start_pass(), "b", &[], NOW),
        None
    );
}

#[test]
fn a_task_in_flight_is_not_started_again() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 2, pending(&["a"]));
    plan.track("a", spawned("a"));
    assert_eq!(
        plan.ready_actions(&mut plan.start_pass(), "a", &[], NOW),
        Some(Vec::new())
    );
}

#[test]
fn nothing_starts_after_an_interrupt() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    plan.interrupt(Instant::now());
    assert_eq!(
        plan.ready_actions(&mut plan.start_pass(), "a", &[], NOW),
        None
    );
}

/// The planner's answer for each task in turn, in one pass; a task that starts is then in
/// flight, as the run makes it.
fn one_pass(plan: &mut Planner<'_>, tasks: &[&str], claims: &[ClaimRow]) -> Vec<Option<bool>> {
    let mut slots = plan.start_pass();
    let mut answers = Vec::new();
    for task in tasks {
        let actions = plan.ready_actions(&mut slots, task, claims, NOW);
        if actions.as_deref().is_some_and(starts) {
            plan.track(task, spawned(task));
        }
        answers.push(actions.map(|a| starts(&a)));
    }
    answers
}

#[test]
fn one_pass_starts_ready_tasks_up_to_the_parallelism() {
    let feature = feature(vec![task("a", &[]), task("b", &[]), task("c", &[])]);
    let mut plan = planner(&feature, 2, pending(&["a", "b", "c"]));
    let answers = one_pass(&mut plan, &["a", "b", "c"], &[]);
    assert_eq!(answers, [Some(true), Some(true), None]);
}

#[test]
fn a_ready_task_claimed_by_someone_else_leaves_the_pass_its_slot() {
    let feature = feature(vec![task("a", &[]), task("b", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a", "b"]));
    let held = ClaimRow {
        task: "a".into(),
        holder: "someone-else".into(),
        process: None,
        acquired_at_ms: NOW,
        expires_at_ms: NOW + 30_000,
    };
    let answers = one_pass(&mut plan, &["a", "b"], &[held]);
    assert_eq!(answers, [Some(false), Some(true)]);
}

/// The rests of the pool agents named, until the given times.
fn resting(feature: &LocalFeature, agents: &[(&str, i64)]) -> Rests {
    agents
        .iter()
        .map(|(name, until_ms)| {
            (
                crate::local::selection::identity(feature, name),
                AgentRest {
                    until_ms: *until_ms,
                    message: "quota".into(),
                },
            )
        })
        .collect()
}

fn with_spare(mut feature: LocalFeature) -> LocalFeature {
    feature.fallback_agents = vec![crate::local::feature::LocalAgent {
        name: "spare".into(),
        command: vec!["spare-agent".into()],
        env: Vec::new(),
    }];
    feature
}

#[test]
fn nothing_starts_while_every_agent_of_the_pool_rests() {
    let feature = feature(vec![task("a", &[])]);
    let mut rested = loaded(pending(&["a"]));
    rested.rests = resting(&feature, &[("primary", NOW + 60_000)]);
    let mut plan = Planner::new(&feature, &run_options(1), rested, NOW).unwrap();
    assert!(matches!(
        plan.begin_turn(NOW),
        Rest::Resting { until_ms, .. } if until_ms == NOW + 60_000
    ));
    assert_eq!(plan.next_wake(NOW), Some(NOW + 10_000));
    assert_eq!(plan.begin_turn(NOW + 60_000), Rest::Working);
}

#[test]
fn a_resting_agent_leaves_the_next_attempt_to_the_next_of_the_pool() {
    let feature = with_spare(feature(vec![task("a", &[])]));
    let mut rested = loaded(pending(&["a"]));
    rested.rests = resting(&feature, &[("primary", NOW + 60_000)]);
    let mut plan = Planner::new(&feature, &run_options(1), rested, NOW).unwrap();
    assert_eq!(plan.begin_turn(NOW), Rest::Working);
    let Selection::Run(choice) = plan.choice(&[], NOW) else {
        panic!("expected the spare agent to run");
    };
    assert_eq!(choice.agent, "spare");
}

#[test]
fn an_exhausted_attempt_rests_the_agent_that_ran_it() {
    let feature = with_spare(feature(vec![task("a", &[])]));
    let mut plan = planner(&feature, 1, vec![row("a", TaskPhase::Running)]);
    let mut live = spawned("a");
    live.agent = "spare".into();
    plan.track("a", live);
    let end = AttemptEnd::Reported(Box::new(results::exhausted(
        "a",
        "limit",
        Some(NOW / 1000 + 60),
    )));
    let concluded = plan.conclude("a", &end, &[], NOW, 0.0).unwrap().unwrap();
    let (identity, rest) = concluded.rest.expect("a rest");
    assert_eq!(
        identity,
        crate::local::selection::identity(&feature, "spare")
    );
    assert_eq!(rest.until_ms, NOW + 60_000);
    let Selection::Run(choice) = plan.choice(&[], NOW) else {
        panic!("expected the primary agent to run");
    };
    assert_eq!(choice.agent, "primary");
}

#[test]
fn a_rest_over_before_the_run_began_is_forgotten() {
    let feature = feature(vec![task("a", &[])]);
    let mut rested = loaded(pending(&["a"]));
    rested.rests = resting(&feature, &[("primary", NOW - 1)]);
    let plan = Planner::new(&feature, &run_options(1), rested, NOW).unwrap();
    assert_eq!(plan.pool_wait(NOW), None);
}

#[test]
fn claims_renew_once_a_third_of_their_duration_passed() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    plan.track("a", spawned("a"));
    assert!(plan.renew_claims(NOW + 9_999).is_empty());
    let renewed = plan.renew_claims(NOW + 10_000);
    assert_eq!(renewed, vec![("a".to_string(), "a-a1".to_string())]);
    assert!(plan.renew_claims(NOW + 10_001).is_empty());
}

#[test]
fn a_second_interrupt_within_the_window_kills() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    plan.track("a", spawned("a"));
    let first = Instant::now();
    assert!(!plan.interrupt(first).kill);
    let second = plan.interrupt(first + Duration::from_secs(1));
    assert!(second.kill);
    assert_eq!(second.attempts, vec!["a-a1".to_string()]);
}

#[test]
fn an_interrupt_cancels_the_running_attempts() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    plan.track("a", spawned("a"));
    plan.interrupt(Instant::now());
    let actions = plan.running_actions("a", NOW, alive);
    assert_eq!(actions.first(), Some(&Action::Cancel), "{actions:?}");
}

#[test]
fn the_run_is_over_when_every_task_is_done() {
    let feature = feature(vec![task("a", &[])]);
    let plan = planner(&feature, 1, vec![row("a", TaskPhase::Done)]);
    assert!(matches!(
        plan.outcome(),
        Some(RunOutcome::Finished {
            outcome: FeatureOutcome::Complete,
            ..
        })
    ));
}

#[test]
fn the_run_is_not_over_while_an_attempt_is_in_flight() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, vec![row("a", TaskPhase::Done)]);
    plan.track("a", spawned("a"));
    assert_eq!(plan.outcome(), None);
}

#[test]
fn an_interrupted_run_ends_interrupted_once_nothing_runs() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    plan.interrupt(Instant::now());
    assert_eq!(plan.outcome(), Some(RunOutcome::Interrupted));
}

#[test]
fn a_runner_of_an_earlier_run_is_polled() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    let mut orphan = spawned("a");
    orphan.child = false;
    plan.track("a", orphan);
    assert_eq!(plan.orphans(), vec!["a".to_string()]);
    assert_eq!(plan.next_wake(NOW), Some(NOW + ORPHAN_POLL_MS));
}

#[test]
fn a_finished_runner_is_ingested() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, pending(&["a"]));
    let mut live = spawned("a");
    live.ended = Some(Ended {
        exit_code: Some(0),
        result: Ok(results::done("a")),
        workspace: None,
    });
    plan.track("a", live);
    let actions = plan.running_actions("a", NOW, alive);
    assert!(
        matches!(actions.first(), Some(Action::Ingest(_))),
        "{actions:?}"
    );
}

#[test]
fn a_failed_attempt_waits_for_its_retry_and_wakes_the_loop_then() {
    let feature = feature(vec![task("a", &[])]);
    let mut plan = planner(&feature, 1, vec![row("a", TaskPhase::Running)]);
    plan.track("a", spawned("a"));
    let end = AttemptEnd::Reported(Box::new(results::failed("a", Some("tests fail"))));
    let concluded = plan.conclude("a", &end, &[], NOW, 0.0).unwrap().unwrap();
    assert_eq!(concluded.row.phase, TaskPhase::Pending);
    let retry_at = concluded.row.next_attempt_after_ms.unwrap();
    assert!(retry_at > NOW);
    assert_eq!(plan.next_wake(NOW), Some(retry_at.min(NOW + 10_000)));
}

#[test]
fn a_misconfigured_agent_halts_the_run_and_cancels_the_other_attempts() {
    let feature = feature(vec![task("a", &[]), task("b", &[])]);
    let mut plan = planner(&feature, 2, pending(&["a", "b"]));
    plan.track("a", spawned("a"));
    plan.track("b", spawned("b"));
    let end = AttemptEnd::Reported(Box::new(results::misconfigured(
        "a",
        "no such agent",
        "install it",
    )));
    let concluded = plan.conclude("a", &end, &[], NOW, 0.0).unwrap().unwrap();
    assert_eq!(concluded.cancel, vec!["b".to_string()]);
    plan.untrack("a");
    plan.untrack("b");
    assert!(matches!(plan.outcome(), Some(RunOutcome::Halted { .. })));
}

#[test]
fn a_restarted_attempt_keeps_its_id() {
    let feature = feature(vec![task("a", &[])]);
    let mut running = row("a", TaskPhase::Running);
    running.attempt_count = 1;
    let plan = planner(&feature, 1, vec![running]);
    assert_eq!(
        plan.launch("a", 1),
        Some(Launch::Restart {
            attempt: "a-a1".into(),
            generation: 1,
        })
    );
    assert_eq!(plan.launch("a", 2), Some(Launch::New));
}
