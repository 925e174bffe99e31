use std::sync::Arc;

use super::*;
use crate::api::Task;
use crate::controller::plan::cached::CachedTask;
use crate::controller::testing::{condition_state, object};
use crate::engine::attempt::{RanBy, Tokens, Usage};
use crate::engine::dag::PhaseCounts;
use crate::engine::policy::{self, Decision, TaskContext};
use crate::engine::testing;

fn task() -> CachedTask {
    let metadata = serde_json::json!({"name": "hello-a", "namespace": "ns", "generation": 3});
    object::<Task>("Task", metadata, serde_json::json!({"featureRef": "hello"})).into()
}

fn claim() -> ClaimStatus {
    ClaimStatus {
        lease: "hello-a".to_owned(),
        holder: "hello-a-a1".to_owned(),
        attempt: 1,
        acquired_at: None,
        fencing_token: 0,
    }
}

fn context() -> TaskContext {
    TaskContext {
        name: "a".to_owned(),
        retry_count: 0,
        max_retries: 3,
        verify: false,
    }
}

fn result(done: bool) -> AttemptResult {
    let result = if done {
        testing::done("a")
    } else {
        testing::result("a")
    };
    AttemptResult {
        attempt: Some("hello-a-a1".to_owned()),
        exit_code: Some(0),
        ran_by: RanBy {
            agent: Some("scripted 1.0".to_owned()),
            ..RanBy::default()
        },
        usage: Usage {
            tokens: Tokens::new(10, 5),
            ..Usage::default()
        },
        ..result
    }
}

/// Task `hello-a` with its first attempt started at 1 s.
fn running() -> CachedTask {
    let mut task = task();
    task.status = Some(started(
        &task,
        1,
        "hello-a-a1",
        task.metadata.generation,
        claim(),
        1_000,
    ));
    task
}

/// The status of `task` once `decision` on the attempt (and its `result`) is ingested at 2 s.
fn ingest(
    task: &CachedTask,
    decision: &Decision,
    result: Option<&AttemptResult>,
    next_attempt_after_ms: Option<i64>,
) -> TaskStatus {
    let ingestion = Ingestion {
        decision,
        result,
        next_attempt_after_ms,
        now_ms: 2_000,
    };
    ingested(task, &ingestion)
}

/// The status of `task` once the policy's decision on `result` is ingested.
fn ingest_result(task: &CachedTask, result: &AttemptResult) -> TaskStatus {
    ingest(
        task,
        &policy::decide(&context(), result),
        Some(result),
        None,
    )
}

#[test]
fn a_started_attempt_records_its_pod_its_claim_and_the_generation_its_pod_was_built_for() {
    let status = started(&task(), 1, "hello-a-a1", Some(2), claim(), 1_000);
    assert_eq!(status.phase, TaskPhase::Running);
    assert_eq!(status.attempt_count, 1);
    assert_eq!(status.claim, Some(Box::new(claim())));
    let record = status.attempts.last().expect("record");
    assert_eq!(record.pod.as_deref(), Some("hello-a-a1"));
    assert_eq!(record.generation, Some(2));
    assert_eq!(status.observed_generation, Some(3));
    assert_eq!(record.outcome, None);
}

#[test]
fn a_replayed_ingest_does_not_count_the_attempt_twice() {
    let mut t = running();
    let r = result(false);
    t.status = Some(ingest_result(&t, &r));
    let replayed = ingest_result(&t, &r);
    assert_eq!(replayed.usage.tokens(), 15);
    assert_eq!(replayed.usage.attempts_with_unknown_cost, 1);
}

#[test]
fn an_attempt_ended_without_a_result_is_counted_with_an_unknown_cost() {
    let status = ingest(&running(), &policy::on_claim_lost(&context()), None, None);
    assert_eq!(status.usage.tokens(), 0);
    assert_eq!(status.usage.attempts_with_unknown_cost, 1);
}

#[test]
fn done_result_marks_the_task_done_and_records_the_attempt() {
    let status = ingest_result(&running(), &result(true));
    assert_eq!(status.phase, TaskPhase::Done);
    assert_eq!(status.claim, None);
    assert_eq!(status.usage.tokens.input, 10);
    let record = status.attempts.last().expect("record");
    assert_eq!(record.outcome, Some(AttemptOutcome::Done));
    assert_eq!(record.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(record.sigils.task_done.as_deref(), Some("a"));
    assert_eq!(record.ran_by.agent.as_deref(), Some("scripted 1.0"));
}

#[test]
fn crash_counts_a_retry_sets_the_backoff_and_is_told_to_the_next_prompt() {
    let mut t = running();
    let decision = policy::on_ended_without_result(&context(), "OOMKilled (exit code 137)");
    let status = ingest(&t, &decision, None, Some(12_000));
    assert_eq!(status.phase, TaskPhase::Pending);
    assert_eq!(status.retry_count, 1);
    assert_eq!(status.next_attempt_after, Some(time(12_000)));
    t.status = Some(status);
    assert_eq!(
        previous_attempt(&t),
        Some(PreviousAttempt::Crashed {
            summary: "OOMKilled (exit code 137)".to_owned()
        })
    );
}

#[test]
fn no_sigil_releases_the_task_without_a_retry() {
    let status = ingest_result(&running(), &result(false));
    assert_eq!(status.phase, TaskPhase::Pending);
    assert_eq!(status.retry_count, 0);
    assert_eq!(
        status.attempts.last().and_then(|a| a.outcome),
        Some(AttemptOutcome::Released)
    );
}

fn feature() -> Feature {
    let metadata = serde_json::json!({"name": "hello", "namespace": "ns", "generation": 2});
    let spec = serde_json::json!({"agent": {"command": ["agent"]}, "tasks": []});
    object("Feature", metadata, spec)
}

fn plan(counts: PhaseCounts, outcome: Option<FeatureOutcome>) -> FeaturePlan {
    FeaturePlan {
        invalid: None,
        tasks: vec![],
        counts,
        outcome,
        iterations: 4,
        budget_spent: None,
        pool_resting: None,
    }
}

/// The status of Feature `hello` with plan `plan`, no events, at time 0.
fn status_with(plan: &FeaturePlan) -> FeatureStatus {
    feature_status(&feature(), plan, &[], &FeatureEvents::default(), 0)
}

fn condition_status(status: &FeatureStatus, type_: &str) -> Option<String> {
    conditions::find(&status.conditions, type_).map(|c| c.status.clone())
}

#[test]
fn complete_feature_has_complete_condition_and_counts() {
    let counts = testing::phase_counts(&[(TaskPhase::Done, 3)]);
    let status = status_with(&plan(counts, Some(FeatureOutcome::Complete)));
    assert_eq!(status.phase, FeaturePhase::Complete);
    assert_eq!(status.counts.done, 3);
    assert_eq!(status.counts.total, 3);
    assert_eq!(status.iterations, 4);
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(condition_status(&status, COMPLETE).as_deref(), Some("True"));
    assert_eq!(
        condition_status(&status, PROGRESSING).as_deref(),
        Some("False")
    );
    assert_eq!(condition_status(&status, VALID).as_deref(), Some("True"));
}

#[test]
fn invalid_plan_sets_valid_false_with_the_dag_message() {
    let p = FeaturePlan {
        invalid: Some(Problem {
            reason: "InvalidPlan",
            message: "task \"hello-a\" depends on unknown task \"x\"".to_owned(),
        }),
        ..plan(PhaseCounts::default(), None)
    };
    let status = status_with(&p);
    assert_eq!(status.phase, FeaturePhase::Invalid);
    let valid = conditions::find(&status.conditions, VALID).expect("Valid");
    assert_eq!(valid.status, "False");
    assert!(valid.message.contains("unknown task"));
}

#[test]
fn promised_failure_fails_the_feature_and_stays_failed() {
    let running = testing::phase_counts(&[(TaskPhase::Running, 1), (TaskPhase::Pending, 2)]);
    let events = FeatureEvents {
        stop_reason: Some("cannot build without a database".to_owned()),
        ..FeatureEvents::default()
    };
    let mut f = feature();
    let first = feature_status(&f, &plan(running, None), &[], &events, 0);
    assert_eq!(first.phase, FeaturePhase::Failed);
    assert!(
        first
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("database")
    );
    f.status = Some(first);
    let later = feature_status(
        &f,
        &plan(running, None),
        &[Arc::new(task())],
        &FeatureEvents::default(),
        1,
    );
    assert_eq!(later.phase, FeaturePhase::Failed);
    assert_eq!(condition_status(&later, STOPPED).as_deref(), Some("True"));
}

#[test]
fn feature_with_running_tasks_is_running_and_progressing() {
    let running = testing::phase_counts(&[(TaskPhase::Running, 1), (TaskPhase::Pending, 1)]);
    let status = status_with(&plan(running, None));
    assert_eq!(status.phase, FeaturePhase::Running);
    assert_eq!(
        condition_status(&status, PROGRESSING).as_deref(),
        Some("True")
    );
}

fn missing_image() -> Problem {
    Problem {
        reason: conditions::REASON_MISSING_AGENT_IMAGE,
        message: "Feature ns/hello: spec.agent.image is required".to_owned(),
    }
}

#[test]
fn a_configuration_problem_is_a_false_configured_condition_and_the_message() {
    let events = FeatureEvents {
        misconfiguration: Some(missing_image()),
        ..FeatureEvents::default()
    };
    let status = feature_status(
        &feature(),
        &plan(PhaseCounts::default(), None),
        &[],
        &events,
        0,
    );
    let configured = conditions::find(&status.conditions, CONFIGURED).expect("Configured");
    assert_eq!(configured.status, "False");
    assert_eq!(configured.reason, "MissingAgentImage");
    assert_eq!(status.message, Some(missing_image().message));
}

#[test]
fn without_a_problem_the_feature_is_configured() {
    let p = plan(PhaseCounts::default(), None);
    let status = status_with(&p);
    assert_eq!(
        condition_status(&status, CONFIGURED).as_deref(),
        Some("True")
    );
}

#[test]
fn a_misconfigured_task_waits_and_is_written_only_once() {
    let first = misconfigured(&task(), &missing_image(), Some(5_000), 0).expect("changed");
    assert_eq!(
        condition_state(&first.conditions, CONFIGURED),
        ("False", "MissingAgentImage")
    );
    assert_eq!(first.next_attempt_after, Some(time(5_000)));
    let mut again = task();
    again.status = Some(first);
    assert!(misconfigured(&again, &missing_image(), Some(5_000), 10).is_none());
}

fn halted_feature(halted_generation: i64, generation: i64) -> Feature {
    let mut f = feature();
    f.metadata.generation = Some(generation);
    f.status = Some(FeatureStatus {
        conditions: vec![conditions::condition(
            CONFIGURED,
            STATUS_FALSE,
            conditions::REASON_AGENT_MISCONFIGURED,
            "claude-agent-acp: command not found",
            Some(halted_generation),
            time(0),
        )],
        ..FeatureStatus::default()
    });
    f
}

#[test]
fn an_agent_misconfiguration_holds_until_the_spec_changes() {
    let held = recorded_misconfiguration(&halted_feature(3, 3)).expect("held");
    assert_eq!(held.reason, "AgentMisconfigured");
    assert_eq!(recorded_misconfiguration(&halted_feature(3, 4)), None);
}

/// The status of a feature whose token budget is spent (150 of 100) with these counts.
fn with_tokens_spent(counts: PhaseCounts, outcome: Option<FeatureOutcome>) -> FeatureStatus {
    let spent = crate::engine::budget::BudgetSpent::Tokens {
        spent: 150,
        limit: 100,
    };
    status_with(&FeaturePlan {
        budget_spent: Some(spent),
        ..plan(counts, outcome)
    })
}

#[test]
fn a_feature_stopped_by_its_budget_says_which_budget_and_how_much() {
    let counts = testing::phase_counts(&[(TaskPhase::Done, 1), (TaskPhase::Pending, 1)]);
    let status = with_tokens_spent(counts, Some(FeatureOutcome::LimitReached));
    assert_eq!(status.phase, FeaturePhase::LimitReached);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "the token budget is spent: 150 tokens reported of maxTokens 100; no new attempt \
             starts; 1 of 2 tasks done"
        )
    );
}

#[test]
fn a_spent_budget_with_attempts_still_running_says_it_waits_for_them() {
    let counts = testing::phase_counts(&[(TaskPhase::Running, 2), (TaskPhase::Pending, 1)]);
    let status = with_tokens_spent(counts, None);
    assert_eq!(status.phase, FeaturePhase::Running);
    let message = status.message.unwrap_or_default();
    assert!(
        message.ends_with("waiting for 2 running attempts to finish"),
        "{message}"
    );
}

#[test]
fn a_feature_whose_whole_pool_rests_says_until_when() {
    let mut plan = plan(PhaseCounts::default(), None);
    plan.pool_resting = Some((1_060_000, "every agent of the pool is out of quota".into()));
    let status = feature_status(&feature(), &plan, &[], &FeatureEvents::default(), 1_000_000);
    assert_eq!(
        condition_status(&status, conditions::AGENTS_AVAILABLE).as_deref(),
        Some("False")
    );
    assert_eq!(
        status.message.as_deref(),
        Some("every agent of the pool is out of quota")
    );
}

#[test]
fn a_feature_whose_tasks_are_being_created_is_pending_with_every_template_counted() {
    let feature = creating_feature(3);

    let status = creating_tasks(&feature, 0);

    assert_eq!(status.phase, FeaturePhase::Pending);
    assert_eq!((status.counts.total, status.counts.pending), (3, 3));
    let progressing = conditions::find(&status.conditions, PROGRESSING).expect("Progressing");
    assert_eq!(progressing.reason, REASON_CREATING_TASKS);
}

#[test]
fn a_feature_whose_tasks_are_being_created_has_no_observed_generation() {
    let status = creating_tasks(&creating_feature(3), 0);

    assert_eq!(status.observed_generation, None);
    assert!(conditions::find(&status.conditions, VALID).is_none());
}

/// Feature `hello` with `tasks` templates and no status yet.
fn creating_feature(tasks: usize) -> Feature {
    let metadata = serde_json::json!({"name": "hello", "namespace": "ns", "generation": 1});
    let templates: Vec<_> = (0..tasks)
        .map(|i| serde_json::json!({"name": format!("t{i}")}))
        .collect();
    let spec = serde_json::json!({"agent": {"command": ["agent"]}, "tasks": templates});
    object("Feature", metadata, spec)
}
