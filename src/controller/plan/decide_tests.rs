use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::*;
use crate::api::{AttemptRecord, TASK_LABEL, TaskStatus, desired_tasks};
use crate::controller::plan::cached::CachedTask;
use crate::controller::testing::{self, claimed};

const NOW: i64 = 10_000_000;

/// Feature `hello`: a, b (after a), c (after a), d (after b and c).
fn feature(extra: serde_json::Value) -> Feature {
    let mut spec = serde_json::json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "tasks": [
            {"name": "a"},
            {"name": "b", "dependsOn": ["a"]},
            {"name": "c", "dependsOn": ["a"]},
            {"name": "d", "dependsOn": ["b", "c"]}
        ]
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let metadata =
        serde_json::json!({"name": "hello", "namespace": "ns", "uid": "f-uid", "generation": 1});
    testing::object("Feature", metadata, spec)
}

fn tasks(feature: &Feature, phases: &[(&str, TaskPhase)]) -> Vec<Arc<CachedTask>> {
    desired_tasks(feature)
        .expect("desired tasks")
        .into_iter()
        .map(|mut task| {
            task.metadata.generation = Some(1);
            let template = task.labels().get(TASK_LABEL).cloned().unwrap_or_default();
            if let Some((_, phase)) = phases.iter().find(|(n, _)| *n == template) {
                task.status = Some(TaskStatus {
                    phase: *phase,
                    ..TaskStatus::default()
                });
            }
            Arc::new(task.into())
        })
        .collect()
}

fn plan_for(feature: &Feature, tasks: &[Arc<CachedTask>]) -> FeaturePlan {
    plan_limited(feature, tasks, usize::MAX)
}

fn plan_limited(feature: &Feature, tasks: &[Arc<CachedTask>], start_limit: usize) -> FeaturePlan {
    plan_at(feature, tasks, start_limit, &Rests::new(), NOW)
}

fn plan_at(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
    start_limit: usize,
    rests: &Rests,
    now_ms: i64,
) -> FeaturePlan {
    let leases = BTreeMap::new();
    let pods = BTreeMap::new();
    plan(&Snapshot {
        feature,
        tasks,
        leases: &leases,
        pods: &pods,
        now_ms,
        start_limit,
        rests,
        planning_only: None,
        plan_waits: None,
    })
}

#[test]
fn only_the_root_task_is_claimed_first() {
    let f = feature(serde_json::json!({}));
    let plan = plan_for(&f, &tasks(&f, &[]));
    assert_eq!(claimed(&plan), vec!["a"]);
    assert_eq!(plan.invalid, None);
}

#[test]
fn dependents_become_claimable_when_their_dependency_is_done() {
    let f = feature(serde_json::json!({"parallelism": 5}));
    let plan = plan_for(&f, &tasks(&f, &[("a", TaskPhase::Done)]));
    assert_eq!(claimed(&plan), vec!["b", "c"]);
}

#[test]
fn parallelism_limits_how_many_ready_tasks_are_claimed() {
    let f = feature(serde_json::json!({"parallelism": 1}));
    let plan = plan_for(&f, &tasks(&f, &[("a", TaskPhase::Done)]));
    assert_eq!(claimed(&plan), vec!["b"]);
}

#[test]
fn no_task_is_claimed_while_the_start_limit_is_zero() {
    let f = feature(serde_json::json!({"parallelism": 5}));
    let plan = plan_limited(&f, &tasks(&f, &[("a", TaskPhase::Done)]), 0);
    assert!(claimed(&plan).is_empty());
}

#[test]
fn the_start_limit_caps_claims_below_parallelism() {
    let f = feature(serde_json::json!({"parallelism": 5}));
    let plan = plan_limited(&f, &tasks(&f, &[("a", TaskPhase::Done)]), 1);
    assert_eq!(claimed(&plan), vec!["b"]);
}

#[test]
fn tasks_that_need_nothing_are_counted_but_not_planned() {
    let f = feature(serde_json::json!({"parallelism": 1}));
    let plan = plan_for(&f, &tasks(&f, &[("a", TaskPhase::Done)]));
    let planned: Vec<_> = plan.tasks.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(planned, ["b"]);
    assert_eq!((plan.counts.total(), plan.counts.done), (4, 1));
    assert_eq!(plan.counts.ready, 2);
}

#[test]
fn the_first_parallelism_ready_tasks_are_planned_while_none_may_start() {
    let f = feature(serde_json::json!({"parallelism": 2}));
    let plan = plan_limited(&f, &tasks(&f, &[("a", TaskPhase::Done)]), 0);
    let planned: Vec<_> = plan.tasks.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(planned, ["b", "c"]);
    assert!(plan.tasks.iter().all(|t| t.actions.is_empty()));
}

#[test]
fn running_tasks_use_up_parallelism() {
    let f = feature(serde_json::json!({"parallelism": 2}));
    let ts = tasks(&f, &[("a", TaskPhase::Done), ("b", TaskPhase::Running)]);
    assert_eq!(claimed(&plan_for(&f, &ts)), vec!["c"]);
}

#[test]
fn suspended_feature_claims_nothing() {
    let f = feature(serde_json::json!({"suspend": true}));
    let plan = plan_for(&f, &tasks(&f, &[]));
    assert!(claimed(&plan).is_empty());
    assert_eq!(plan.outcome, Some(FeatureOutcome::Suspended));
}

#[test]
fn iteration_budget_caps_new_attempts() {
    let f = feature(serde_json::json!({"parallelism": 5, "maxIterations": 1}));
    let mut ts = tasks(&f, &[("a", TaskPhase::Done)]);
    Arc::make_mut(&mut ts[0])
        .status
        .get_or_insert_with(TaskStatus::default)
        .attempt_count = 1;
    let plan = plan_for(&f, &ts);
    assert!(claimed(&plan).is_empty());
    assert_eq!(plan.outcome, Some(FeatureOutcome::LimitReached));
}

#[test]
fn task_in_backoff_does_not_take_a_parallelism_slot() {
    let f = feature(serde_json::json!({"parallelism": 1}));
    let mut ts = tasks(&f, &[("a", TaskPhase::Done)]);
    let later = Time(jiff::Timestamp::from_millisecond(NOW + 60_000).expect("time"));
    Arc::make_mut(&mut ts[1])
        .status
        .get_or_insert_with(TaskStatus::default)
        .next_attempt_after = Some(later);
    assert_eq!(claimed(&plan_for(&f, &ts)), vec!["c"]);
}

#[test]
fn failed_dependency_blocks_dependents_and_the_block_is_persisted() {
    let f = feature(serde_json::json!({}));
    let plan = plan_for(
        &f,
        &tasks(
            &f,
            &[
                ("a", TaskPhase::Done),
                ("b", TaskPhase::Failed),
                ("c", TaskPhase::Done),
            ],
        ),
    );
    let d = plan
        .tasks
        .iter()
        .find(|t| t.task_id == "d")
        .expect("task d");
    assert_eq!(d.derived_phase, Some(TaskPhase::Blocked));
    assert_eq!(plan.outcome, Some(FeatureOutcome::Failed));
}

#[test]
fn all_done_is_complete() {
    let f = feature(serde_json::json!({}));
    let done = [
        ("a", TaskPhase::Done),
        ("b", TaskPhase::Done),
        ("c", TaskPhase::Done),
        ("d", TaskPhase::Done),
    ];
    let plan = plan_for(&f, &tasks(&f, &done));
    assert_eq!(plan.outcome, Some(FeatureOutcome::Complete));
}

#[test]
fn cycle_makes_the_plan_invalid_and_nothing_runs() {
    let f = feature(serde_json::json!({
        "tasks": [
            {"name": "a", "dependsOn": ["b"]},
            {"name": "b", "dependsOn": ["a"]}
        ]
    }));
    let plan = plan_for(&f, &tasks(&f, &[]));
    let problem = plan.invalid.expect("invalid");
    assert_eq!(problem.reason, "InvalidPlan");
    assert!(problem.message.contains("hello-a"), "{}", problem.message);
    assert!(plan.tasks.is_empty());
}

#[test]
fn task_id_is_the_template_name_for_templated_tasks() {
    let f = feature(serde_json::json!({}));
    let ts = tasks(&f, &[]);
    assert_eq!(ts[0].metadata.name.as_deref(), Some("hello-a"));
    assert_eq!(task_id(&ts[0]), "a");
}

#[test]
fn last_attempt_comes_from_the_status_with_its_spawn_generation() {
    let f = feature(serde_json::json!({}));
    let mut ts = tasks(&f, &[("a", TaskPhase::Running)]);
    let status = Arc::make_mut(&mut ts[0])
        .status
        .get_or_insert_with(TaskStatus::default);
    status.attempt_count = 2;
    status.attempts = vec![AttemptRecord {
        number: 2,
        generation: Some(1),
        ..AttemptRecord::default()
    }];
    let plan = plan_for(&f, &ts);
    let a = plan.tasks.iter().find(|t| t.task_id == "a").expect("a");
    assert_eq!(
        a.view.attempt,
        Some(AttemptView {
            number: 2,
            generation: 1
        })
    );
    // Its Pod is gone and its claim too: the attempt is lost.
    assert!(matches!(
        a.actions.first(),
        Some(Action::Ingest(
            crate::engine::lifecycle::AttemptEnd::ClaimLost { .. }
        ))
    ));
}

/// A feature whose pool is `primary` (claude with key a) and `spare` (claude with key b).
fn pooled_feature() -> Feature {
    feature(serde_json::json!({
        "fallbackAgents": [{
            "name": "spare",
            "image": "agent:1",
            "command": ["agent"],
            "envFrom": [{"secretRef": {"name": "key-b"}}]
        }]
    }))
}

fn resting(agent: &crate::api::AgentSpec, until_ms: i64) -> Rests {
    Rests::from([(
        agent.identity(),
        crate::engine::conclusion::AgentRest {
            until_ms,
            message: "usage limit reached".to_owned(),
        },
    )])
}

fn chosen_agent(plan: &FeaturePlan, task: &str) -> Option<String> {
    plan.tasks
        .iter()
        .find(|t| t.task_id == task)
        .and_then(|t| match &t.selection {
            Some(Selection::Run(choice)) => Some(choice.agent.clone()),
            _ => None,
        })
}

#[test]
fn a_ready_task_goes_to_the_next_agent_of_the_pool_while_the_first_rests() {
    let feature = pooled_feature();
    let rests = resting(&feature.spec.agent, NOW + 60_000);
    let plan = plan_at(&feature, &tasks(&feature, &[]), usize::MAX, &rests, NOW);
    assert_eq!(claimed(&plan), ["a"]);
    assert_eq!(chosen_agent(&plan, "a").as_deref(), Some("spare"));
}

#[test]
fn when_every_agent_of_the_pool_rests_ready_tasks_wait_until_the_first_reset() {
    let feature = pooled_feature();
    let mut rests = resting(&feature.spec.agent, NOW + 60_000);
    rests.extend(resting(
        &feature.spec.fallback_agents[0].agent,
        NOW + 30_000,
    ));
    let plan = plan_at(&feature, &tasks(&feature, &[]), usize::MAX, &rests, NOW);
    assert!(claimed(&plan).is_empty());
    assert_eq!(plan.requeue_at(), Some(NOW + 30_000));
    let (until, message) = plan.pool_resting.clone().unwrap_or_default();
    assert_eq!(until, NOW + 30_000);
    assert!(message.contains("spare until"), "{message}");
}

#[test]
fn an_agent_is_back_in_the_pool_once_its_reset_time_has_passed() {
    let feature = pooled_feature();
    let rests = resting(&feature.spec.agent, NOW + 60_000);
    let plan = plan_at(
        &feature,
        &tasks(&feature, &[]),
        usize::MAX,
        &rests,
        NOW + 60_000,
    );
    assert_eq!(chosen_agent(&plan, "a").as_deref(), Some("primary"));
}

/// Plans `tasks` of `feature` while every task but the Task `planner` waits for the plan.
fn plan_while_planning(feature: &Feature, tasks: &[Arc<CachedTask>], planner: &str) -> FeaturePlan {
    let (leases, pods) = (BTreeMap::new(), BTreeMap::new());
    plan(&Snapshot {
        feature,
        tasks,
        leases: &leases,
        pods: &pods,
        now_ms: NOW,
        start_limit: usize::MAX,
        rests: &Rests::new(),
        planning_only: Some(planner),
        plan_waits: Some(planner),
    })
}

#[test]
fn while_the_feature_plans_only_its_planning_task_is_claimed() {
    let feature = feature(serde_json::json!({}));
    let mut all = tasks(&feature, &[]);
    all.push(Arc::new(
        crate::api::planning_task(&feature).expect("planner").into(),
    ));
    let plan = plan_while_planning(&feature, &all, "hello-planning");
    assert_eq!(claimed(&plan), vec!["planning"]);
}

/// The outcome of `hello`'s tasks in `phases` with its planning Task done: as planned
/// without planning, and while the Feature's outcome waits for its plan.
fn outcomes_with_a_done_planner(
    phases: &[(&str, TaskPhase)],
) -> (Option<FeatureOutcome>, Option<FeatureOutcome>) {
    let feature = feature(serde_json::json!({}));
    let mut all = tasks(&feature, phases);
    let mut planner = crate::api::planning_task(&feature).expect("planner");
    planner.status = Some(TaskStatus {
        phase: TaskPhase::Done,
        ..TaskStatus::default()
    });
    all.push(Arc::new(planner.into()));
    (
        plan_for(&feature, &all).outcome,
        plan_while_planning(&feature, &all, "hello-planning").outcome,
    )
}

#[test]
fn a_feature_waiting_for_its_plan_is_never_complete() {
    let done = ["a", "b", "c", "d"].map(|t| (t, TaskPhase::Done));
    assert_eq!(
        outcomes_with_a_done_planner(&done),
        (Some(FeatureOutcome::Complete), None)
    );
}

#[test]
fn a_feature_whose_plan_is_revised_is_not_failed_by_its_tasks() {
    let mut phases = ["a", "b", "c", "d"].map(|t| (t, TaskPhase::Done));
    phases[0].1 = TaskPhase::Failed;
    assert_eq!(
        outcomes_with_a_done_planner(&phases),
        (Some(FeatureOutcome::Failed), None)
    );
}

/// The claim Lease of `task`, held by `holder`, renewed at `NOW` for a minute.
fn lease_held_by(task: &CachedTask, holder: &str) -> (String, Arc<Lease>) {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let renewed = jiff::Timestamp::from_millisecond(NOW).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(task.name_any()),
            namespace: Some("ns".to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(60),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    };
    (task.name_any(), Arc::new(lease))
}

#[test]
fn a_ready_task_whose_claim_someone_else_holds_leaves_its_slot_to_the_next() {
    let f = feature(serde_json::json!({"parallelism": 1}));
    let ts = tasks(&f, &[("a", TaskPhase::Done)]);
    let b = ts.iter().find(|t| task_id(t) == "b").expect("task b");
    let leases = BTreeMap::from([lease_held_by(b, "someone-else")]);
    let pods = BTreeMap::new();
    let plan = plan(&Snapshot {
        feature: &f,
        tasks: &ts,
        leases: &leases,
        pods: &pods,
        now_ms: NOW,
        start_limit: usize::MAX,
        rests: &Rests::new(),
        planning_only: None,
        plan_waits: None,
    });
    let b_plan = plan
        .tasks
        .iter()
        .find(|t| t.task_id == "b")
        .expect("b planned");
    assert_eq!(b_plan.actions, vec![Action::RequeueAt(NOW + 60_000)]);
    assert_eq!(claimed(&plan), vec!["c"]);
}
