//! Where a planning Feature stands (docs/planning.md), from its spec, its status and its
//! Tasks; and what a person's answer to its plan changes. Pure: `act::planned` reads and
//! writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::labels::{
    APPROVE_PLAN_ANNOTATION, PLAN_ANSWERED_BY_ANNOTATION, REJECT_COMMENT_ANNOTATION,
    REJECT_PLAN_ANNOTATION,
};
use crate::api::planning::{Approval, ApprovalState, ApprovalStatus, PlanningStatus, Replan};
use crate::api::{Feature, task_object_name};
use crate::controller::plan::cached::CachedTask;
use crate::engine::dag::{FeatureOutcome, TaskPhase};
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
        /// Whether an approved plan's Tasks go on meanwhile (the waiting plan revises or
        /// extends it).
        running: bool,
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
    /// Whether every task but the planning Task waits (starts nothing).
    pub(crate) fn holds_tasks(&self) -> bool {
        !matches!(
            self,
            Stage::NotPlanning | Stage::Running | Stage::AwaitingApproval { running: true, .. }
        )
    }

    /// Whether the Feature's outcome waits for its plan: it is neither Complete, Blocked nor
    /// Failed by its tasks while a plan is made, waits or its Tasks are created.
    pub(crate) fn holds_outcome(&self) -> bool {
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
            let planned = || {
                tasks
                    .iter()
                    .filter(|t| t.origin().is_planned_by(uid, &hash))
            };
            // A revision gives the failed Tasks it keeps their retries back before it runs.
            let failed_kept = planning.revising.is_some()
                && planned().any(|t| t.status.as_ref().map(|s| s.phase) == Some(TaskPhase::Failed));
            if planned().count() < planning.tasks as usize || failed_kept {
                Stage::Creating { hash }
            } else {
                Stage::Running
            }
        }
        Some(a) if a.hash == hash && a.state == ApprovalState::Rejected => Stage::Planning,
        _ => Stage::AwaitingApproval {
            hash,
            running: planning.running.is_some(),
        },
    }
}

/// The planned Task whose failure makes the planner revise the plan (`replan: OnFailure`,
/// docs/planning.md): the Feature would end Failed (`outcome`) while its approved plan's
/// Tasks run, re-plans are left, and a Task of that plan failed for good (one that ran
/// before a parent that failed through it). A hand-written task's failure is never re-planned.
pub(crate) fn replan_after<'t>(
    feature: &Feature,
    planning: &PlanningStatus,
    stage: &Stage,
    tasks: &'t [Arc<CachedTask>],
    outcome: Option<FeatureOutcome>,
) -> Option<&'t Arc<CachedTask>> {
    let spec = feature.spec.planning.as_ref()?;
    let replans_left = planning.replans < spec.max_replans;
    if spec.replan != Replan::OnFailure
        || !replans_left
        || outcome != Some(FeatureOutcome::Failed)
        || *stage != Stage::Running
    {
        return None;
    }
    let uid = feature.metadata.uid.as_deref()?;
    let hash = planning.dag_hash.as_deref()?;
    let failed = |t: &&Arc<CachedTask>| {
        t.origin().is_planned_by(uid, hash)
            && t.status.as_ref().map(|s| s.phase) == Some(TaskPhase::Failed)
    };
    let ran = |t: &&Arc<CachedTask>| t.status.as_ref().is_some_and(|s| s.attempt_count > 0);
    let mut candidates = tasks.iter().filter(failed);
    let first = candidates.clone().next();
    candidates.find(ran).or(first)
}

/// `previous` once the plan is being revised after `failed` failed (`why`): one more
/// re-plan, the failed plan runs (its done Tasks are kept) until the revised one's Tasks
/// exist.
pub(crate) fn revising(previous: &PlanningStatus, failed: &str, why: String) -> PlanningStatus {
    PlanningStatus {
        replans: previous.replans.saturating_add(1),
        running: previous.dag_hash.clone(),
        revising: Some(failed.to_owned()),
        message: Some(why),
        ..previous.clone()
    }
}

/// `planning` once the current plan's Tasks all exist: no other plan runs, and no revision
/// is under way.
pub(crate) fn settled(planning: PlanningStatus) -> PlanningStatus {
    PlanningStatus {
        running: None,
        revising: None,
        ..planning
    }
}

fn name_of(task: &crate::api::Task) -> &str {
    task.metadata.name.as_deref().unwrap_or_default()
}

fn cached_name(task: &CachedTask) -> &str {
    task.metadata.name.as_deref().unwrap_or_default()
}

/// What it takes for the Feature's Tasks to be those of the plan `desired` (its Tasks, as
/// `api::planned_tasks` makes them).
#[derive(Debug, Default)]
pub(crate) struct PlanChanges {
    /// Tasks of the plan that do not exist: create them.
    pub(crate) create: Vec<crate::api::Task>,
    /// Tasks of the plan that exist as Tasks of an earlier plan (the plan's, the existing):
    /// label them with the plan and, when not done, give them its spec.
    pub(crate) adopt: Vec<(crate::api::Task, Arc<CachedTask>)>,
    /// Planned Tasks, not done, that the plan dropped: delete them.
    pub(crate) delete: Vec<Arc<CachedTask>>,
    /// Tasks of a revised plan that Failed or are Blocked: they get their retries back.
    pub(crate) retry: Vec<Arc<CachedTask>>,
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: keys `new` lacks are removed,
/// objects are patched key by key, anything else replaced.
pub(crate) fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in new {
                match old.get(key) {
                    Some(was) if was == value => {}
                    Some(was) => {
                        patch.insert(key.clone(), merge_patch(was, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// The changes from the Feature's `tasks` to the plan `desired` of hash `hash`.
pub(crate) fn changes(
    feature: &Feature,
    planning: &PlanningStatus,
    tasks: &[Arc<CachedTask>],
    desired: Vec<crate::api::Task>,
    hash: &str,
) -> PlanChanges {
    let uid = feature.metadata.uid.as_deref().unwrap_or_default();
    let by_name: BTreeMap<&str, &Arc<CachedTask>> =
        tasks.iter().map(|t| (cached_name(t), t)).collect();
    let phase = |t: &CachedTask| t.status.as_ref().map(|s| s.phase).unwrap_or_default();
    let mut changes = PlanChanges::default();
    for task in &desired {
        let Some(&existing) = by_name.get(name_of(task)) else {
            continue;
        };
        if existing.origin().plan != Some(hash) {
            changes.adopt.push((task.clone(), Arc::clone(existing)));
        }
        let failed = matches!(phase(existing), TaskPhase::Failed | TaskPhase::Blocked);
        if planning.revising.is_some() && failed {
            changes.retry.push(Arc::clone(existing));
        }
    }
    let wanted: BTreeSet<&str> = desired.iter().map(name_of).collect();
    changes.delete = tasks
        .iter()
        .filter(|t| {
            let from = t.origin();
            from.feature_uid == Some(uid)
                && from.plan.is_some()
                && !wanted.contains(cached_name(t))
                && phase(t) != TaskPhase::Done
        })
        .cloned()
        .collect();
    changes.create = desired
        .into_iter()
        .filter(|t| !by_name.contains_key(name_of(t)))
        .collect();
    changes
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

/// Whether rejecting the current plan keeps the running one: the current plan only added
/// tasks workers proposed to it (no revision is under way).
pub(crate) fn rejects_proposals(planning: &PlanningStatus) -> bool {
    planning.running.is_some() && planning.revising.is_none() && !planning.proposed.is_empty()
}

/// The names of `proposed` tasks of the Feature `feature` that have no Task yet (those a
/// rejection drops).
pub(crate) fn not_created<'p>(
    feature: &Feature,
    proposed: &'p [String],
    tasks: &[Arc<CachedTask>],
) -> Vec<&'p str> {
    let feature_name = feature.name_any();
    proposed
        .iter()
        .filter(|name| {
            let object = task_object_name(&feature_name, name);
            !tasks.iter().any(|t| cached_name(t) == object)
        })
        .map(String::as_str)
        .collect()
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
