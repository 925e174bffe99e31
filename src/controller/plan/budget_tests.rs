use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::api::Task;
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::testing;

fn feature(budget: serde_json::Value) -> Feature {
    let metadata = serde_json::json!({"name": "hello", "namespace": "ns", "generation": 2});
    let spec = serde_json::json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "budget": budget,
    });
    testing::object("Feature", metadata, spec)
}

fn task(name: &str, status: serde_json::Value) -> Arc<CachedTask> {
    let metadata = serde_json::json!({"name": name, "namespace": "ns"});
    let mut task: Task =
        testing::object("Task", metadata, serde_json::json!({"featureRef": "hello"}));
    task.status = Some(serde_json::from_value(status).unwrap_or_else(|error| panic!("{error}")));
    Arc::new(task.into())
}

fn ended_pod(name: &str, usage: serde_json::Value) -> (String, Arc<CachedPod>) {
    let result = serde_json::json!({
        "version": 1, "task": "a", "attempt": name, "outcome": "finished",
        "stopReason": "end_turn", "usage": usage,
    });
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns"},
        "status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "agent", "image": "a", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message": result.to_string()}}
        }]}
    }))
    .unwrap_or_else(|error| panic!("{error}"));
    (name.to_owned(), Arc::new(pod.into()))
}

fn now() -> Time {
    crate::controller::plan::time::time(1_000)
}

#[test]
fn the_feature_spent_what_its_tasks_recorded() {
    let tasks = [
        task(
            "a",
            serde_json::json!({"phase": "Done", "usage": {"inputTokens": 5, "costUSD": "0.50"}}),
        ),
        task(
            "b",
            serde_json::json!({"phase": "Failed", "usage": {"outputTokens": 7, "attemptsWithUnknownCost": 1}}),
        ),
    ];
    let totals = recorded(&tasks);
    assert_eq!(totals.tokens(), 12);
    assert_eq!(totals.cost_text(), "$0.50 + unknown (1 attempt)");
}

/// Task `a` in `phase` with `recorded` input tokens after 2 attempts, and the ended Pod of
/// its second attempt, which reported `reported` input tokens.
fn second_attempt_ended(
    phase: &str,
    recorded: u64,
    reported: u64,
) -> ([Arc<CachedTask>; 1], BTreeMap<String, Arc<CachedPod>>) {
    let status = serde_json::json!(
        {"phase": phase, "attemptCount": 2, "usage": {"inputTokens": recorded}}
    );
    let pod = ended_pod("a-a2", serde_json::json!({"inputTokens": reported}));
    ([task("a", status)], BTreeMap::from([pod]))
}

#[test]
fn an_ended_attempt_not_yet_ingested_counts_against_the_budget() {
    let (tasks, pods) = second_attempt_ended("Running", 5, 95);
    assert_eq!(spent(&tasks, &pods).tokens(), 100);
    assert_eq!(recorded(&tasks).tokens(), 5);
}

#[test]
fn a_finished_pod_of_an_ingested_attempt_is_not_counted_again() {
    let (tasks, pods) = second_attempt_ended("Pending", 100, 100);
    assert_eq!(spent(&tasks, &pods).tokens(), 100);
}

#[test]
fn a_token_budget_is_spent_by_the_recorded_tokens() {
    let f = feature(serde_json::json!({"maxTokens": 100}));
    let tasks = [task(
        "a",
        serde_json::json!({"phase": "Done", "usage": {"inputTokens": 80, "outputTokens": 20}}),
    )];
    let spent = budget_spent(&f, &tasks, &BTreeMap::new()).map(|s| s.to_string());
    assert_eq!(
        spent.as_deref(),
        Some("the token budget is spent: 100 tokens reported of maxTokens 100")
    );
}

#[test]
fn a_cost_budget_with_unknown_costs_sets_cost_reported_false() {
    let f = feature(serde_json::json!({"maxCostUSD": "5"}));
    let totals = UsageTotals {
        attempts_with_unknown_cost: 2,
        ..UsageTotals::default()
    };
    let mut list = Vec::new();
    let warning = set_cost_condition(&f, &totals, &mut list, now());
    assert!(warning.is_some());
    let c = conditions::find(&list, COST_REPORTED).map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(
        c,
        Some(("False".to_owned(), REASON_COST_UNKNOWN.to_owned()))
    );
    assert!(cost_became_unknown(&[], &list).is_some());
    assert!(cost_became_unknown(&list, &list).is_none());
}

#[test]
fn a_cost_budget_with_every_cost_reported_sets_cost_reported_true() {
    let f = feature(serde_json::json!({"maxCostUSD": "5"}));
    let mut list = Vec::new();
    assert_eq!(
        set_cost_condition(&f, &UsageTotals::default(), &mut list, now()),
        None
    );
    let status = conditions::find(&list, COST_REPORTED).map(|c| c.status.clone());
    assert_eq!(status.as_deref(), Some("True"));
}

#[test]
fn without_a_cost_budget_there_is_no_cost_condition() {
    let f = feature(serde_json::json!({"maxTokens": 10}));
    let mut list = Vec::new();
    let totals = UsageTotals {
        attempts_with_unknown_cost: 2,
        ..UsageTotals::default()
    };
    set_cost_condition(
        &feature(serde_json::json!({"maxCostUSD": "1"})),
        &totals,
        &mut list,
        now(),
    );
    set_cost_condition(&f, &totals, &mut list, now());
    assert!(conditions::find(&list, COST_REPORTED).is_none());
}

#[test]
fn an_unreadable_budget_is_a_configuration_problem_naming_the_field() {
    let f = feature(serde_json::json!({"maxCostUSD": "0"}));
    let problem = invalid_budget(&f).map(|p| (p.reason, p.message));
    let (reason, message) = problem.unwrap_or_default();
    assert_eq!(reason, REASON_INVALID_BUDGET);
    assert!(
        message.contains("Feature ns/hello: spec.budget.maxCostUSD"),
        "{message}"
    );
}

mod planning {
    //! The budget in the Feature's pure plan: what is claimed, and the outcome.
    use super::*;
    use crate::api::desired_tasks;
    use crate::controller::plan::decide::{FeaturePlan, Snapshot, plan};
    use crate::controller::testing::claimed;
    use crate::engine::dag::FeatureOutcome;

    /// Feature `hello` with independent tasks a, b, c, parallelism 3, and `budget`.
    fn feature3(budget: serde_json::Value) -> Feature {
        let metadata = serde_json::json!(
            {"name": "hello", "namespace": "ns", "uid": "f-uid", "generation": 1}
        );
        let spec = serde_json::json!({
            "agent": {"image": "agent:1", "command": ["agent"]},
            "parallelism": 3,
            "budget": budget,
            "tasks": [{"name": "a"}, {"name": "b"}, {"name": "c"}]
        });
        testing::object("Feature", metadata, spec)
    }

    /// The Feature's Tasks; `a` with `status` when given.
    fn tasks_of(feature: &Feature, a: Option<serde_json::Value>) -> Vec<Arc<CachedTask>> {
        let desired = desired_tasks(feature).unwrap_or_else(|error| panic!("{error}"));
        desired
            .into_iter()
            .map(|mut task| {
                task.metadata.generation = Some(1);
                if task.name_any() == "hello-a"
                    && let Some(status) = &a
                {
                    task.status = serde_json::from_value(status.clone()).ok();
                }
                Arc::new(task.into())
            })
            .collect()
    }

    fn planned(
        feature: &Feature,
        tasks: &[Arc<CachedTask>],
        pods: &BTreeMap<String, Arc<CachedPod>>,
    ) -> FeaturePlan {
        plan(&Snapshot {
            feature,
            tasks,
            leases: &BTreeMap::new(),
            pods,
            now_ms: 1_000,
            start_limit: usize::MAX,
            rests: &crate::engine::selection::Rests::new(),
            planning_only: None,
            plan_waits: None,
        })
    }

    /// The plan under `maxTokens: 100` once `a` is done, having spent `input_tokens`.
    fn plan_after_a_done(input_tokens: u64) -> FeaturePlan {
        let f = feature3(serde_json::json!({"maxTokens": 100}));
        let a = serde_json::json!({"phase": "Done", "usage": {"inputTokens": input_tokens}});
        planned(&f, &tasks_of(&f, Some(a)), &BTreeMap::new())
    }

    #[test]
    fn below_the_budget_every_ready_task_is_claimed() {
        assert_eq!(claimed(&plan_after_a_done(99)), ["b", "c"]);
    }

    #[test]
    fn a_spent_budget_claims_nothing_and_reaches_the_limit() {
        let p = plan_after_a_done(100);
        assert!(claimed(&p).is_empty());
        assert_eq!(p.outcome, Some(FeatureOutcome::LimitReached));
        assert!(p.budget_spent.is_some());
    }

    #[test]
    fn an_attempt_ingested_in_this_pass_that_spends_the_budget_lets_nothing_start_with_it() {
        let f = feature3(serde_json::json!({"maxTokens": 100}));
        let running = serde_json::json!({"phase": "Running", "attemptCount": 1,
            "attempts": [{"number": 1, "generation": 1}]});
        let ts = tasks_of(&f, Some(running));
        let pods = BTreeMap::from([ended_pod(
            "hello-a-a1",
            serde_json::json!({"inputTokens": 150}),
        )]);
        let p = planned(&f, &ts, &pods);
        assert!(claimed(&p).is_empty(), "{:?}", claimed(&p));
        assert_eq!(
            p.outcome, None,
            "the ending attempt still runs until ingested"
        );
    }

    #[test]
    fn without_a_budget_an_expensive_attempt_stops_nothing() {
        let f = feature3(serde_json::Value::Null);
        let ts = tasks_of(
            &f,
            Some(serde_json::json!({"phase": "Done", "usage": {"inputTokens": 1000000}})),
        );
        assert_eq!(claimed(&planned(&f, &ts, &BTreeMap::new())), ["b", "c"]);
    }
}
