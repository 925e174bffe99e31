//! Where a planning Feature stands (docs/planning.md), from its spec, its status and its
//! Tasks; and what a person's answer to its plan changes. Pure: `act::planned` reads and
//! writes.

use std::sync::Arc;

use kube::ResourceExt;

use crate::api::labels::{
    APPROVE_PLAN_ANNOTATION, PLAN_ANSWERED_BY_ANNOTATION, REJECT_COMMENT_ANNOTATION,
    REJECT_PLAN_ANNOTATION,
};
use crate::api::planning::{Approval, ApprovalState, ApprovalStatus, PlanningStatus};
use crate::api::{Feature, task_object_name};
use crate::controller::plan::cached::CachedTask;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::attempt_id;
use crate::engine::planning::{PLANNING_TASK, hash_matches};

/// Where a planning Feature stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The Feature does not plan (no `spec.planning`).
    NotPlanning,
    /// Its planning Task does not exist yet: create it.
    NoPlanningTask,
    /// The planning Task plans (or waits for its next attempt): only it may start.
    Planning,
    /// The planning Task wrote a plan the status does not hold yet: read it.
    PlanToRead {
        /// The planning attempt that wrote it.
        attempt: String,
    },
    /// The current plan waits for a person.
    AwaitingApproval {
        /// The plan's hash.
        hash: String,
    },
    /// The approved plan's Tasks do not all exist: create them; nothing else starts.
    Creating {
        /// The plan's hash.
        hash: String,
    },
    /// The approved plan's Tasks all exist: the Feature runs them with its other tasks.
    Running,
}

impl Stage {
    /// Whether every task but the planning Task waits.
    pub(crate) fn holds_tasks(&self) -> bool {
        !matches!(self, Stage::NotPlanning | Stage::Running)
    }
}

/// The name of the Feature's planning Task.
pub(crate) fn planning_task_name(feature: &Feature) -> String {
    task_object_name(&feature.name_any(), PLANNING_TASK)
}

/// Where `feature` stands, with `tasks` its Tasks, once its `status.planning` is `planning`.
pub(crate) fn stage_with(
    feature: &Feature,
    planning: &PlanningStatus,
    tasks: &[Arc<CachedTask>],
) -> Stage {
    if feature.spec.planning.is_none() {
        return Stage::NotPlanning;
    }
    let name = planning_task_name(feature);
    let Some(planner) = tasks
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(&name))
    else {
        return Stage::NoPlanningTask;
    };
    let status = planner.status.as_ref();
    if status.map(|s| s.phase) != Some(TaskPhase::Done) {
        return Stage::Planning;
    }
    let attempt = attempt_id(&name, status.map_or(0, |s| s.attempt_count));
    if planning.planned_by.as_deref() != Some(attempt.as_str()) {
        return Stage::PlanToRead { attempt };
    }
    let Some(hash) = planning.dag_hash.clone() else {
        return Stage::Planning;
    };
    match planning.approval.as_ref() {
        Some(a) if a.hash == hash && a.state == ApprovalState::Approved => {
            let uid = feature.metadata.uid.as_deref().unwrap_or_default();
            let created = tasks
                .iter()
                .filter(|t| t.origin().is_planned_by(uid, &hash))
                .count();
            if created < planning.tasks as usize {
                Stage::Creating { hash }
            } else {
                Stage::Running
            }
        }
        Some(a) if a.hash == hash && a.state == ApprovalState::Rejected => Stage::Planning,
        _ => Stage::AwaitingApproval { hash },
    }
}

/// `previous` once a plan was read: written by `attempt`, of hash `hash`, `tasks` tasks and
/// the document of hash `document_hash`; approved at once when approval is Automatic.
pub(crate) fn proposed(
    feature: &Feature,
    previous: &PlanningStatus,
    attempt: &str,
    hash: &str,
    tasks: u32,
    document_hash: Option<String>,
    at: String,
) -> PlanningStatus {
    let automatic = feature
        .spec
        .planning
        .as_ref()
        .is_none_or(|p| p.approval == Approval::Automatic);
    PlanningStatus {
        planned_by: Some(attempt.to_owned()),
        dag_hash: Some(hash.to_owned()),
        document_hash,
        tasks,
        approval: Some(ApprovalStatus {
            state: if automatic {
                ApprovalState::Approved
            } else {
                ApprovalState::Pending
            },
            hash: hash.to_owned(),
            comment: None,
            by: automatic.then(|| "automatic".to_owned()),
            at: Some(at),
        }),
        message: None,
        ..previous.clone()
    }
}

/// A person's answer to a Feature's plan, read from its annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Approves the current plan.
    Approve(ApprovalStatus),
    /// Rejects the current plan; the planner plans again with the comment.
    Reject(ApprovalStatus),
    /// Names another plan than the current one: nothing changes.
    Stale {
        /// Why, for the status and the Event.
        message: String,
    },
}

/// The answer the Feature's annotations give to the plan of hash `current` (`None`: they
/// give none). A rejection wins over an approval of the same plan.
pub(crate) fn answer(feature: &Feature, current: &str, at: String) -> Option<Answer> {
    let annotations = feature.annotations();
    let by = annotations.get(PLAN_ANSWERED_BY_ANNOTATION).cloned();
    let answered = |state, comment| ApprovalStatus {
        state,
        hash: current.to_owned(),
        comment,
        by: by.clone().or_else(|| Some("annotation".to_owned())),
        at: Some(at.clone()),
    };
    let reject = annotations.get(REJECT_PLAN_ANNOTATION);
    let approve = annotations.get(APPROVE_PLAN_ANNOTATION);
    if reject.is_some_and(|h| hash_matches(h, current)) {
        let comment = annotations.get(REJECT_COMMENT_ANNOTATION).cloned();
        return Some(Answer::Reject(answered(ApprovalState::Rejected, comment)));
    }
    if approve.is_some_and(|h| hash_matches(h, current)) {
        return Some(Answer::Approve(answered(ApprovalState::Approved, None)));
    }
    let (key, named) = match (approve, reject) {
        (Some(named), _) => (APPROVE_PLAN_ANNOTATION, named),
        (None, Some(named)) => (REJECT_PLAN_ANNOTATION, named),
        (None, None) => return None,
    };
    Some(Answer::Stale {
        message: format!(
            "{key} names plan {named:?}, not the current plan {current}: nothing changed; \
             answer the current plan (`ralph plan show feature/{}`)",
            feature.name_any()
        ),
    })
}

/// The answer annotations a Feature carries (removed once the answer is recorded).
pub(crate) fn answer_annotations(feature: &Feature) -> Vec<&'static str> {
    [
        APPROVE_PLAN_ANNOTATION,
        REJECT_PLAN_ANNOTATION,
        REJECT_COMMENT_ANNOTATION,
        PLAN_ANSWERED_BY_ANNOTATION,
    ]
    .into_iter()
    .filter(|key| feature.annotations().contains_key(*key))
    .collect()
}

/// `status.planning` as the planning Task shows it: its attempts, and while it plans, its
/// last message (the problems of a refused answer, or why planning failed).
pub(crate) fn with_attempts(
    mut planning: PlanningStatus,
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
) -> PlanningStatus {
    let name = planning_task_name(feature);
    let planner = tasks
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(&name))
        .and_then(|t| t.status.as_ref());
    if let Some(status) = planner {
        planning.attempts = status.attempt_count;
        if status.phase != TaskPhase::Done && status.message.is_some() {
            planning.message.clone_from(&status.message);
        }
    }
    planning
}

#[cfg(test)]
#[path = "planning_tests.rs"]
mod tests;
