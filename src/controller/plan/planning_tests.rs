use std::sync::Arc;

use kube::ResourceExt;

use super::*;
use crate::api::planning::PlanningStatus;
use crate::api::{FeatureStatus, TaskStatus, planned_tasks, planning_task};
use crate::controller::plan::cached::CachedTask;
use crate::controller::testing;

/// A Feature `demo` that plans (approval `approval`), with one hand-written task `setup`.
fn feature(approval: &str) -> Feature {
    let spec = serde_json::json!({
        "agent": {"image": "agent:1", "command": ["agent"]},
        "context": {"spec": {"inline": "build it"}},
        "planning": {"approval": approval},
        "tasks": [{"name": "setup"}]
    });
    let metadata =
        serde_json::json!({"name": "demo", "namespace": "ns", "uid": "f-uid", "generation": 1});
    testing::object("Feature", metadata, spec)
}

fn current(feature: &Feature) -> PlanningStatus {
    feature
        .status
        .as_ref()
        .and_then(|s| s.planning.clone())
        .unwrap_or_default()
}

fn stage(feature: &Feature, tasks: &[Arc<CachedTask>]) -> Stage {
    stage_with(feature, &current(feature), tasks)
}

fn with_planning(mut feature: Feature, planning: PlanningStatus) -> Feature {
    feature.status = Some(FeatureStatus {
        planning: Some(planning),
        ..FeatureStatus::default()
    });
    feature
}

fn planner(feature: &Feature, phase: TaskPhase, attempts: u32) -> Arc<CachedTask> {
    let mut task = planning_task(feature).expect("planning task");
    task.status = Some(TaskStatus {
        phase,
        attempt_count: attempts,
        message: Some("answer refused: the plan holds no task".to_owned()),
        ..TaskStatus::default()
    });
    Arc::new(task.into())
}

fn planned(feature: &Feature, names: &[&str], hash: &str) -> Vec<Arc<CachedTask>> {
    planned_live(feature, names, hash)
        .into_iter()
        .map(|task| Arc::new(task.into()))
        .collect()
}

/// The Tasks a planner writes for `names`, as the API server holds them.
fn planned_live(feature: &Feature, names: &[&str], hash: &str) -> Vec<crate::api::Task> {
    let templates: Vec<_> = names
        .iter()
        .map(|n| crate::api::TaskTemplate {
            name: (*n).to_owned(),
            fields: crate::api::TaskFields {
                title: (*n).to_owned(),
                ..Default::default()
            },
        })
        .collect();
    planned_tasks(feature, &templates, hash).expect("planned")
}

fn approved(hash: &str, tasks: u32) -> PlanningStatus {
    PlanningStatus {
        planned_by: Some("demo-planning-a1".to_owned()),
        dag_hash: Some(hash.to_owned()),
        tasks,
        approval: Some(ApprovalStatus {
            state: ApprovalState::Approved,
            hash: hash.to_owned(),
            ..ApprovalStatus::default()
        }),
        ..PlanningStatus::default()
    }
}

#[test]
fn a_feature_without_planning_is_not_held() {
    let mut plain = feature("Automatic");
    plain.spec.planning = None;
    assert_eq!(stage(&plain, &[]), Stage::NotPlanning);
    assert!(!Stage::NotPlanning.holds_tasks());
}

#[test]
fn a_planning_feature_first_needs_its_planning_task() {
    assert_eq!(stage(&feature("Automatic"), &[]), Stage::NoPlanningTask);
}

#[test]
fn while_the_planning_task_is_not_done_the_feature_plans() {
    let feature = feature("Automatic");
    for phase in [TaskPhase::Pending, TaskPhase::Running, TaskPhase::Failed] {
        let tasks = [planner(&feature, phase, 1)];
        assert_eq!(stage(&feature, &tasks), Stage::Planning, "{phase:?}");
    }
    assert!(Stage::Planning.holds_tasks());
}

#[test]
fn a_done_planning_attempt_the_status_does_not_name_is_read() {
    let feature = feature("Automatic");
    let tasks = [planner(&feature, TaskPhase::Done, 2)];
    assert_eq!(
        stage(&feature, &tasks),
        Stage::PlanToRead {
            attempt: "demo-planning-a2".to_owned()
        }
    );
}

#[test]
fn an_approved_plan_holds_the_tasks_until_all_of_its_tasks_exist() {
    let feature = with_planning(feature("Manual"), approved("h1", 2));
    let mut tasks = vec![planner(&feature, TaskPhase::Done, 1)];
    tasks.extend(planned(&feature, &["one"], "h1"));
    assert_eq!(
        stage(&feature, &tasks),
        Stage::Creating {
            hash: "h1".to_owned()
        }
    );
    tasks.extend(planned(&feature, &["two"], "h1"));
    assert_eq!(stage(&feature, &tasks), Stage::Running);
}

#[test]
fn tasks_of_another_plan_do_not_count_for_the_current_one() {
    let feature = with_planning(feature("Manual"), approved("h1", 1));
    let mut tasks = vec![planner(&feature, TaskPhase::Done, 1)];
    tasks.extend(planned(&feature, &["one"], "h0"));
    assert!(matches!(stage(&feature, &tasks), Stage::Creating { .. }));
}

#[test]
fn a_manual_plan_waits_for_a_person() {
    let at = "2026-11-28T00:00:00Z".to_owned();
    let proposed = proposed(
        &feature("Manual"),
        &PlanningStatus::default(),
        "demo-planning-a1",
        "h1",
        3,
        None,
        at,
    );
    assert_eq!(
        proposed.approval.as_ref().map(|a| a.state),
        Some(ApprovalState::Pending)
    );
    let feature = with_planning(feature("Manual"), proposed);
    let tasks = [planner(&feature, TaskPhase::Done, 1)];
    assert_eq!(
        stage(&feature, &tasks),
        Stage::AwaitingApproval {
            hash: "h1".to_owned(),
            running: false,
        }
    );
}

#[test]
fn an_automatic_plan_is_approved_by_automatic() {
    let at = "2026-11-28T00:00:00Z".to_owned();
    let proposed = proposed(
        &feature("Automatic"),
        &PlanningStatus::default(),
        "demo-planning-a1",
        "h1",
        3,
        None,
        at,
    );
    let approval = proposed.approval.expect("approval");
    assert_eq!(approval.state, ApprovalState::Approved);
    assert_eq!(approval.by.as_deref(), Some("automatic"));
    assert_eq!(proposed.tasks, 3);
}

fn annotated(pairs: &[(&str, &str)]) -> Feature {
    let mut feature = feature("Manual");
    for (key, value) in pairs {
        feature
            .annotations_mut()
            .insert((*key).to_owned(), (*value).to_owned());
    }
    feature
}

const CURRENT: &str = "0123456789abcdef";

#[test]
fn an_approval_of_the_current_plan_or_its_six_first_digits_approves_it() {
    for named in [CURRENT, "012345"] {
        let feature = annotated(&[
            (APPROVE_PLAN_ANNOTATION, named),
            (PLAN_ANSWERED_BY_ANNOTATION, "ana"),
        ]);
        let Some(Answer::Approve(approval)) = answer(&feature, CURRENT, "t".to_owned()) else {
            panic!("{named} should approve");
        };
        assert_eq!(approval.hash, CURRENT);
        assert_eq!(approval.by.as_deref(), Some("ana"));
    }
}

#[test]
fn an_approval_of_a_stale_plan_changes_nothing_and_says_which_is_current() {
    let feature = annotated(&[(APPROVE_PLAN_ANNOTATION, "fedcba9876543210")]);
    let Some(Answer::Stale { message }) = answer(&feature, CURRENT, "t".to_owned()) else {
        panic!("a stale approval");
    };
    assert!(
        message.contains(CURRENT) && message.contains("fedcba9876543210"),
        "{message}"
    );
}

#[test]
fn a_rejection_carries_its_comment() {
    let feature = annotated(&[
        (REJECT_PLAN_ANNOTATION, CURRENT),
        (REJECT_COMMENT_ANNOTATION, "split the parser task"),
    ]);
    let Some(Answer::Reject(rejection)) = answer(&feature, CURRENT, "t".to_owned()) else {
        panic!("a rejection");
    };
    assert_eq!(rejection.comment.as_deref(), Some("split the parser task"));
    assert_eq!(rejection.state, ApprovalState::Rejected);
    assert_eq!(
        answer_annotations(&feature),
        vec![REJECT_PLAN_ANNOTATION, REJECT_COMMENT_ANNOTATION]
    );
}

#[test]
fn no_answer_annotation_is_no_answer() {
    assert_eq!(answer(&feature("Manual"), CURRENT, "t".to_owned()), None);
}

#[test]
fn a_rejected_plan_plans_again() {
    let mut planning = approved("h1", 2);
    if let Some(approval) = planning.approval.as_mut() {
        approval.state = ApprovalState::Rejected;
    }
    let feature = with_planning(feature("Manual"), planning);
    let tasks = [planner(&feature, TaskPhase::Done, 1)];
    assert_eq!(stage(&feature, &tasks), Stage::Planning);
}

#[test]
fn the_planning_status_counts_the_planning_tasks_attempts_and_shows_its_refusal() {
    let feature = feature("Manual");
    let tasks = [planner(&feature, TaskPhase::Pending, 3)];
    let planning = with_attempts(PlanningStatus::default(), &feature, &tasks);
    assert_eq!(planning.attempts, 3);
    assert_eq!(
        planning.message.as_deref(),
        Some("answer refused: the plan holds no task")
    );
}

#[test]
fn planned_tasks_carry_the_plan_and_never_the_features_own_labels() {
    let mut feature = feature("Manual");
    feature.labels_mut().insert(
        "app.kubernetes.io/instance".to_owned(),
        "argo-app".to_owned(),
    );
    feature.annotations_mut().insert(
        "argocd.argoproj.io/tracking-id".to_owned(),
        "app:ralph.dev/Feature:ns/demo".to_owned(),
    );
    let tasks = planned_live(&feature, &["one"], "h1");
    let task = &tasks[0];
    assert_eq!(task.name_any(), "demo-one");
    assert_eq!(
        task.labels()
            .get(crate::api::labels::PLAN_LABEL)
            .map(String::as_str),
        Some("h1")
    );
    assert!(!task.labels().contains_key("app.kubernetes.io/instance"));
    assert!(task.annotations().is_empty());
    assert!(super::super::origin::of(task).is_planned_by("f-uid", "h1"));
}

/// `demo` (Automatic) that re-plans after a failure, at most twice.
fn replanning() -> Feature {
    let mut feature = feature("Automatic");
    if let Some(planning) = feature.spec.planning.as_mut() {
        planning.replan = crate::api::planning::Replan::OnFailure;
        planning.max_replans = 2;
    }
    feature
}

fn with_phase(task: &Arc<CachedTask>, phase: TaskPhase, attempts: u32) -> Arc<CachedTask> {
    let mut task = CachedTask::clone(task);
    task.status = Some(TaskStatus {
        phase,
        attempt_count: attempts,
        message: Some(format!("{phase:?}")),
        ..TaskStatus::default()
    });
    Arc::new(task)
}

/// The plan `h1` of `count` (Failed) and `docs` (Blocked), its planner done.
fn failed_plan(feature: &Feature) -> Vec<Arc<CachedTask>> {
    let planned = planned(feature, &["count", "docs"], "h1");
    vec![
        planner(feature, TaskPhase::Done, 1),
        with_phase(&planned[0], TaskPhase::Failed, 1),
        with_phase(&planned[1], TaskPhase::Blocked, 0),
    ]
}

fn failed_task<'t>(
    feature: &Feature,
    planning: &PlanningStatus,
    tasks: &'t [Arc<CachedTask>],
) -> Option<&'t Arc<CachedTask>> {
    let stage = stage_with(feature, planning, tasks);
    replan_after(
        feature,
        planning,
        &stage,
        tasks,
        Some(FeatureOutcome::Failed),
    )
}

#[test]
fn a_failed_planned_task_is_re_planned_when_the_feature_would_fail() {
    let feature = replanning();
    let tasks = failed_plan(&feature);
    let failed = failed_task(&feature, &approved("h1", 2), &tasks);
    assert_eq!(failed.map(|t| t.name_any()).as_deref(), Some("demo-count"));
}

#[test]
fn nothing_is_re_planned_without_replan_on_failure_or_with_the_re_plans_used() {
    let never = feature("Automatic");
    let tasks = failed_plan(&never);
    assert!(failed_task(&never, &approved("h1", 2), &tasks).is_none());
    let used = PlanningStatus {
        replans: 2,
        ..approved("h1", 2)
    };
    assert!(failed_task(&replanning(), &used, &tasks).is_none());
}

#[test]
fn a_feature_that_would_not_fail_is_not_re_planned() {
    let feature = replanning();
    let tasks = failed_plan(&feature);
    let planning = approved("h1", 2);
    let stage = stage_with(&feature, &planning, &tasks);
    assert!(replan_after(&feature, &planning, &stage, &tasks, None).is_none());
}

#[test]
fn a_revision_adopts_kept_tasks_drops_the_others_and_retries_the_failed_ones() {
    let feature = replanning();
    let tasks = failed_plan(&feature);
    let planning = revising(&approved("h1", 2), "count", "count failed".to_owned());
    let desired = planned_live(&feature, &["count", "count-awk"], "h2");
    let changes = changes(&feature, &planning, &tasks, desired, "h2");
    let created: Vec<String> = changes.create.iter().map(|t| t.name_any()).collect();
    let adopted: Vec<String> = changes.adopt.iter().map(|(t, _)| t.name_any()).collect();
    let deleted: Vec<String> = changes.delete.iter().map(|t| t.name_any()).collect();
    let retried: Vec<String> = changes.retry.iter().map(|t| t.name_any()).collect();
    assert_eq!(created, ["demo-count-awk"]);
    assert_eq!(adopted, ["demo-count"]);
    assert_eq!(deleted, ["demo-docs"]);
    assert_eq!(retried, ["demo-count"]);
}

#[test]
fn a_revision_is_created_until_the_failed_tasks_it_keeps_are_retried() {
    let feature = replanning();
    let mut tasks = vec![planner(&feature, TaskPhase::Done, 2)];
    let planned = planned(&feature, &["count"], "h2");
    tasks.push(with_phase(&planned[0], TaskPhase::Failed, 1));
    let mut planning = revising(&approved("h2", 1), "count", "count failed".to_owned());
    planning.planned_by = Some("demo-planning-a2".to_owned());
    assert_eq!(
        stage_with(&feature, &planning, &tasks),
        Stage::Creating {
            hash: "h2".to_owned()
        }
    );
    tasks[1] = with_phase(&planned[0], TaskPhase::Pending, 1);
    assert_eq!(stage_with(&feature, &planning, &tasks), Stage::Running);
}

#[test]
fn a_plan_waiting_beside_a_running_one_holds_the_outcome_but_not_the_tasks() {
    let waiting = Stage::AwaitingApproval {
        hash: "h2".to_owned(),
        running: true,
    };
    assert!(!waiting.holds_tasks());
    assert!(waiting.holds_outcome());
}

#[test]
fn rejecting_added_proposals_keeps_the_running_plan_but_rejecting_a_revision_plans_again() {
    let proposals = PlanningStatus {
        running: Some("h1".to_owned()),
        proposed: vec!["lint".to_owned()],
        ..approved("h2", 3)
    };
    assert!(rejects_proposals(&proposals));
    let revision = revising(&approved("h1", 2), "count", "count failed".to_owned());
    assert!(!rejects_proposals(&revision));
}

#[test]
fn a_merge_patch_removes_what_the_new_object_lacks() {
    let old = serde_json::json!({"title": "a", "verify": {"command": "x"}, "tags": ["t"]});
    let new = serde_json::json!({"title": "b", "tags": ["t"]});
    assert_eq!(
        merge_patch(&old, &new),
        serde_json::json!({"title": "b", "verify": null})
    );
}
