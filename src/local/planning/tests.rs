use super::*;
use crate::manifest::answer::AnswerTask;

fn plan_of(names: &[&str]) -> StoredPlan {
    let tasks = names
        .iter()
        .map(|name| AnswerTask {
            name: (*name).to_owned(),
            acceptance: vec!["x".to_owned()],
            ..AnswerTask::default()
        })
        .collect();
    StoredPlan::new(Answer { tasks }, Some("# Plan".to_owned()))
}

fn proposed(approval: Approval) -> PlanState {
    let mut state = PlanState::default();
    state.propose(plan_of(&["a", "b"]), approval, "t".to_owned());
    state
}

#[test]
fn an_automatic_plan_is_approved_at_once() {
    let state = proposed(Approval::Automatic);
    assert!(state.approved().is_some());
    assert!(state.awaiting_approval().is_none());
}

#[test]
fn a_manual_plan_waits_until_its_hash_is_approved() {
    let mut state = proposed(Approval::Manual);
    assert!(state.approved().is_none());
    let hash = state
        .awaiting_approval()
        .map(|p| p.hash.clone())
        .unwrap_or_default();
    assert_eq!(
        approve(&mut state, Some(&hash[..8]), "ada", "t".to_owned()),
        Approved::Now(hash)
    );
    assert!(state.approved().is_some());
}

#[test]
fn approving_another_hash_changes_nothing() {
    let mut state = proposed(Approval::Manual);
    let before = state.clone();
    let outcome = approve(&mut state, Some("0000000000"), "ada", "t".to_owned());
    assert!(matches!(outcome, Approved::Stale { .. }), "{outcome:?}");
    assert_eq!(state, before);
}

#[test]
fn a_rejected_plan_is_dropped_and_its_comment_kept_for_the_planner() {
    let mut state = proposed(Approval::Manual);
    assert!(reject(&mut state, "smaller tasks", "ada", "t".to_owned()).is_some());
    assert!(state.plan.is_none());
    assert_eq!(state.rejection.as_deref(), Some("smaller tasks"));
}

#[test]
fn rejected_proposals_leave_the_running_plan_approved() {
    let mut state = proposed(Approval::Manual);
    approve(&mut state, None, "ada", "t".to_owned());
    let running = state.approved().cloned();
    let docs = AnswerTask {
        name: "docs".to_owned(),
        ..AnswerTask::default()
    };
    extend(&mut state, vec![docs], Approval::Manual, "t".to_owned());
    assert_eq!(
        state.running(),
        running.as_ref(),
        "the running plan goes on meanwhile"
    );
    reject(&mut state, "not now", "ada", "t".to_owned());
    assert_eq!(state.approved(), running.as_ref());
}

#[test]
fn the_approved_plans_tasks_and_document_join_the_feature() {
    let state = proposed(Approval::Automatic);
    let feature = with_plan(crate::local::testing::feature(Vec::new()), &state);
    let names: Vec<&str> = feature.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let plan_text = feature.plan_text.unwrap_or_default();
    assert!(plan_text.starts_with("# Plan"), "{plan_text}");
    assert!(plan_text.contains("<ralph:propose-tasks>"), "{plan_text}");
}

#[test]
fn a_plan_waiting_for_approval_adds_no_task() {
    let state = proposed(Approval::Manual);
    let feature = with_plan(crate::local::testing::feature(Vec::new()), &state);
    assert!(feature.tasks.is_empty());
}

#[test]
fn planning_needs_a_spec_an_agent_of_the_pool_and_the_name_planning_free() {
    let spec = PlanningSpec::default();
    let mut feature = crate::local::testing::feature(Vec::new());
    feature.spec_text = None;
    feature.plan_text = None;
    let problem = planning_problem(&feature, &spec).unwrap_or_default();
    assert!(problem.contains("set spec.context.spec"), "{problem}");
    feature.spec_text = Some("Build it.".to_owned());
    assert_eq!(planning_problem(&feature, &spec), None);
    let other = PlanningSpec {
        agent: Some("backup".to_owned()),
        ..PlanningSpec::default()
    };
    let problem = planning_problem(&feature, &other).unwrap_or_default();
    assert!(problem.contains("\"backup\" names no agent"), "{problem}");
    feature.tasks = vec![crate::api::TaskTemplate {
        name: "planning".to_owned(),
        fields: crate::api::TaskFields::default(),
    }];
    let problem = planning_problem(&feature, &spec).unwrap_or_default();
    assert!(problem.contains("rename the task"), "{problem}");
}
