//! What planning writes besides its attempts (docs/planning.md): the Feature's planning
//! Task, the plan its planner wrote read into `status.planning`, a person's answer to it
//! recorded (and the answer's annotations removed), and an approved plan's Tasks created,
//! all of them or, while any is missing, no planned task running.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::api::labels::PLAN_LABEL;
use crate::api::planning::{ApprovalState, ApprovalStatus, PlanningStatus, plan_config_map_name};
use crate::api::{Feature, Task, TaskStatus, planned_tasks, planning_task, task_object_name};
use crate::clock::rfc3339;
use crate::controller::act::memory::task_journal;
use crate::controller::act::plan_maps::{keep_config_map, revision_config_map};
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::{FeaturePlan, task_id};
use crate::controller::plan::plan_map::read_plan_map;
use crate::controller::plan::planning::{self, Answer, Stage};
use crate::controller::runtime::context::Context;
use crate::engine::dag::TaskPhase;
use crate::engine::planning::{PLANNING_TASK, Revision, document_hash, journal_line, plan_hash};
use crate::manifest::answer::{Answer as TaskList, AnswerLimits, check_answer};

/// How many planned Tasks are created at once (the client's QPS paces them further).
const CONCURRENT_CREATES: usize = 32;

/// Where a planning Feature stands after this reconcile's planning writes.
#[derive(Debug)]
pub(crate) struct Planning {
    /// Its stage.
    pub(crate) stage: Stage,
    /// Its `status.planning` (`None`: the Feature does not plan).
    pub(crate) status: Option<PlanningStatus>,
    /// Whether Tasks were created or changed: the listing is behind.
    pub(crate) wrote: bool,
}

/// Takes a planning Feature one step on: creates its planning Task, reads a new plan,
/// records a person's answer, creates an approved plan's Tasks.
pub(crate) async fn reconcile(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    now_ms: i64,
) -> Result<Planning, CallError> {
    if feature.spec.planning.is_none() {
        return Ok(Planning {
            stage: Stage::NotPlanning,
            status: None,
            wrote: false,
        });
    }
    let mut status = ctx.cache.planning_writes.newest(feature);
    let mut wrote = false;
    // A plan read may be approved at once, and an approved plan's Tasks are created in the
    // same reconcile: at most three steps.
    for _ in 0..3 {
        let next = match planning::stage_with(feature, &status, tasks) {
            Stage::NotPlanning | Stage::Planning => None,
            Stage::Running => {
                super::proposals::reconcile(feature, ctx, tasks, &status, now_ms).await?
            }
            Stage::NoPlanningTask if ctx.cache.planning_writes.created(feature, PLANNING_TASK) => {
                None
            }
            Stage::NoPlanningTask => {
                if create_planning_task(feature, ctx).await? {
                    ctx.cache
                        .planning_writes
                        .record_created(feature, PLANNING_TASK);
                }
                wrote = true;
                None
            }
            Stage::PlanToRead { attempt } => {
                Some(read_plan(feature, ctx, tasks, &attempt, &status, now_ms).await?)
            }
            Stage::AwaitingApproval { hash, .. } => {
                record_answer(feature, ctx, tasks, &hash, &status, now_ms).await?
            }
            Stage::Creating { hash } => {
                wrote |= create_planned(feature, ctx, tasks, &hash, &mut status).await?;
                None
            }
        };
        match next {
            Some(next) if next != status => status = next,
            _ => break,
        }
    }
    let stage = planning::stage_with(feature, &status, tasks);
    if !matches!(stage, Stage::NoPlanningTask | Stage::Creating { .. }) {
        ctx.cache.planning_writes.seen(feature);
    }
    if stage == Stage::Running {
        status = planning::settled(status);
    }
    Ok(Planning {
        stage,
        status: Some(planning::with_attempts(status, feature, tasks)),
        wrote,
    })
}

/// Revises the plan when one of its Tasks failed for good and the Feature would end Failed
/// (`replan: OnFailure`, re-plans left): what the planner needs is kept in ConfigMap
/// `<feature>-revision`, the planning Task plans again, and the Feature does not fail. A
/// plan that cannot be read leaves the failure as it is.
pub(crate) async fn replan_if_failed(
    feature: &Feature,
    ctx: &Context,
    planning: &mut Planning,
    tasks: &[Arc<CachedTask>],
    plan: &mut FeaturePlan,
) -> Result<(), CallError> {
    let Some(status) = planning.status.as_ref() else {
        return Ok(());
    };
    let Some(failed) =
        planning::replan_after(feature, status, &planning.stage, tasks, plan.outcome)
    else {
        return Ok(());
    };
    let regarding = feature.object_ref(&());
    let (answer, _) = match plan_of(feature, ctx).await? {
        Ok(plan) => plan,
        Err(why) => {
            let message = format!("cannot revise the plan: {why}");
            ctx.events
                .warning(&regarding, "ReplanFailed", message)
                .await;
            return Ok(());
        }
    };
    let revision = revision(feature, tasks, failed, &answer);
    keep_config_map(ctx, revision_config_map(feature, &revision)).await?;
    let max = feature.spec.planning.as_ref().map_or(0, |p| p.max_replans);
    let why = format!(
        "task {} failed for good: {}; the planner revises the plan (re-plan {} of {max})",
        revision.failed_task,
        revision.failure,
        status.replans.saturating_add(1)
    );
    ctx.events
        .warning(&regarding, "Replanning", why.clone())
        .await;
    plan_again(feature, ctx, tasks, &why).await?;
    planning.status = Some(planning::revising(status, &revision.failed_task, why));
    planning.stage = Stage::Planning;
    planning.wrote = true;
    plan.outcome = None;
    Ok(())
}

/// What the planner revising `answer` (the running plan) after `failed` failed is told.
fn revision(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
    failed: &CachedTask,
    answer: &TaskList,
) -> Revision {
    let done: Vec<String> = answer
        .tasks
        .iter()
        .filter(|planned| {
            let name = task_object_name(&feature.name_any(), &planned.name);
            tasks.iter().any(|t| {
                t.metadata.name.as_deref() == Some(name.as_str())
                    && t.status.as_ref().map(|s| s.phase) == Some(TaskPhase::Done)
            })
        })
        .map(|planned| planned.name.clone())
        .collect();
    let pending = answer
        .tasks
        .iter()
        .filter(|planned| !done.contains(&planned.name))
        .cloned()
        .collect();
    let status = failed.status.as_ref();
    Revision {
        failed_task: task_id(failed),
        failure: status
            .and_then(|s| s.message.clone())
            .unwrap_or_else(|| "no message".to_owned()),
        journal: task_journal(failed).iter().map(journal_line).collect(),
        done,
        pending_yaml: TaskList { tasks: pending }.canonical(),
    }
}

/// Creates the Feature's planning Task; whether it exists now.
async fn create_planning_task(feature: &Feature, ctx: &Context) -> Result<bool, CallError> {
    let Ok(task) = planning_task(feature) else {
        return Ok(false);
    };
    Ok(matches!(
        create_task(ctx, task).await?,
        Created::Now | Created::Existed
    ))
}

/// How creating a Task went (other errors are the call's).
enum Created {
    /// It was created now.
    Now,
    /// It existed already (a listing behind the API server).
    Existed,
    /// The API server refused it: why.
    Refused(String),
}

/// Creates `task`.
async fn create_task(ctx: &Context, task: Task) -> Result<Created, CallError> {
    let namespace = task.namespace().unwrap_or_default();
    let name = task.name_any();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let _permit = ctx.template_applies.acquire().await;
    let created = bounded(
        ctx.api_timeout,
        format!("create Task {namespace}/{name}"),
        api.create(&PostParams::default(), &task),
    )
    .await;
    match created {
        Ok(_) => Ok(Created::Now),
        Err(error) if error.status_code() == Some(409) => Ok(Created::Existed),
        Err(error) if error.status_code() == Some(422) => Ok(Created::Refused(format!(
            "the API server rejected planned Task {namespace}/{name}: {error}"
        ))),
        Err(error) => Err(error),
    }
}

/// The plan the planner's attempt `attempt` kept in the Feature's plan ConfigMap, as
/// checked task list and document; `Err(message)` when it cannot be read.
async fn plan_of(
    feature: &Feature,
    ctx: &Context,
) -> Result<Result<(TaskList, Option<String>), String>, CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let name = plan_config_map_name(&feature.name_any());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let read = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    let Some(config_map) = read else {
        return Ok(Err(format!(
            "the plan's ConfigMap {namespace}/{name} is missing"
        )));
    };
    let files = match read_plan_map(&config_map) {
        Ok(files) => files,
        Err(error) => return Ok(Err(error.to_string())),
    };
    let Some(text) = files.tasks else {
        return Ok(Err(format!(
            "ConfigMap {namespace}/{name} holds no task list"
        )));
    };
    let limits = AnswerLimits {
        max_tasks: feature.spec.planning.as_ref().map_or(0, |p| p.max_tasks),
        existing: &feature.spec.tasks,
    };
    Ok(match check_answer(&text, limits) {
        Ok(answer) => Ok((answer, files.document)),
        Err(problems) => Err(format!(
            "the plan in ConfigMap {namespace}/{name} is invalid: {}",
            problems.messages().join("; ")
        )),
    })
}

/// Reads the plan attempt `attempt` wrote into the status (approved at once when approval
/// is Automatic); a plan that cannot be read sends the planning Task back to planning.
async fn read_plan(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    attempt: &str,
    status: &PlanningStatus,
    now_ms: i64,
) -> Result<PlanningStatus, CallError> {
    let regarding = feature.object_ref(&());
    match plan_of(feature, ctx).await? {
        Ok((answer, document)) => {
            let hash = plan_hash(&answer.canonical(), document.as_deref());
            let count = u32::try_from(answer.tasks.len()).unwrap_or(u32::MAX);
            let next = planning::proposed(
                feature,
                status,
                attempt,
                &hash,
                count,
                document.as_deref().map(document_hash),
                rfc3339(now_ms),
            );
            let approved = next
                .approval
                .as_ref()
                .is_some_and(|a| a.state == ApprovalState::Approved);
            let note = if approved {
                format!("plan {hash} of {count} tasks written by {attempt}; approved (automatic)")
            } else {
                format!(
                    "plan {hash} of {count} tasks written by {attempt} waits for approval: \
                     `ralph plan show feature/{0}`, then `ralph plan approve feature/{0} --hash \
                     {hash}` (or reject it with a comment)",
                    feature.name_any()
                )
            };
            ctx.events.normal(&regarding, "PlanProposed", note).await;
            Ok(next)
        }
        Err(why) => {
            let message = format!("{why}: planning again");
            ctx.events
                .warning(&regarding, "PlanUnreadable", message.clone())
                .await;
            plan_again(feature, ctx, tasks, &message).await?;
            Ok(PlanningStatus {
                planned_by: Some(attempt.to_owned()),
                message: Some(message),
                ..status.clone()
            })
        }
    }
}

/// Records the answer the Feature's annotations give to the plan of hash `hash` and removes
/// them; `None` when they give none.
async fn record_answer(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    hash: &str,
    status: &PlanningStatus,
    now_ms: i64,
) -> Result<Option<PlanningStatus>, CallError> {
    let Some(answer) = planning::answer(feature, hash, rfc3339(now_ms)) else {
        return Ok(None);
    };
    let regarding = feature.object_ref(&());
    let next = match answer {
        Answer::Approve(approval) => {
            let by = approval.by.clone().unwrap_or_default();
            let note = format!("plan {hash} approved by {by}");
            ctx.events.normal(&regarding, "PlanApproved", note).await;
            PlanningStatus {
                approval: Some(approval),
                message: None,
                ..status.clone()
            }
        }
        Answer::Reject(rejection) if planning::rejects_proposals(status) => {
            keep_running(feature, ctx, tasks, status, rejection).await?
        }
        Answer::Reject(rejection) => {
            let comment = rejection.comment.clone().unwrap_or_default();
            let note = format!("plan {hash} rejected: {comment}; planning again");
            ctx.events.normal(&regarding, "PlanRejected", note).await;
            plan_again(
                feature,
                ctx,
                tasks,
                &format!("plan {hash} rejected: {comment}"),
            )
            .await?;
            PlanningStatus {
                approval: Some(rejection),
                message: None,
                ..status.clone()
            }
        }
        Answer::Stale { message } => {
            ctx.events
                .warning(&regarding, "StalePlanAnswer", message.clone())
                .await;
            PlanningStatus {
                message: Some(message),
                ..status.clone()
            }
        }
    };
    remove_answer(feature, ctx).await?;
    Ok(Some(next))
}

/// Rejects the tasks workers proposed that the current plan adds: the plan without those
/// not created yet becomes the plan again, approved as it was; the running Tasks go on.
async fn keep_running(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    status: &PlanningStatus,
    rejection: ApprovalStatus,
) -> Result<PlanningStatus, CallError> {
    let regarding = feature.object_ref(&());
    let (answer, document) = match plan_of(feature, ctx).await? {
        Ok(plan) => plan,
        Err(why) => {
            return Ok(PlanningStatus {
                message: Some(why),
                ..status.clone()
            });
        }
    };
    let dropped = planning::not_created(feature, &status.proposed, tasks);
    let kept = TaskList {
        tasks: answer
            .tasks
            .into_iter()
            .filter(|t| !dropped.contains(&t.name.as_str()))
            .collect(),
    };
    let hash = plan_hash(&kept.canonical(), document.as_deref());
    let map = crate::controller::act::plan_maps::plan_config_map(feature, &kept, document, &hash);
    match map {
        Ok(map) => keep_config_map(ctx, map).await?,
        Err(error) => {
            return Ok(PlanningStatus {
                message: Some(error.to_string()),
                ..status.clone()
            });
        }
    }
    let comment = rejection.comment.clone().unwrap_or_default();
    let note = format!(
        "proposed tasks {} rejected: {comment}; plan {hash} goes on",
        dropped.join(", ")
    );
    ctx.events
        .normal(&regarding, "PlanRejected", note.clone())
        .await;
    let proposed = status
        .proposed
        .iter()
        .filter(|name| !dropped.contains(&name.as_str()))
        .cloned()
        .collect();
    Ok(PlanningStatus {
        dag_hash: Some(hash.clone()),
        tasks: u32::try_from(kept.tasks.len()).unwrap_or(u32::MAX),
        approval: Some(ApprovalStatus {
            state: ApprovalState::Approved,
            hash,
            comment: Some(note),
            ..rejection
        }),
        running: None,
        proposed,
        message: None,
        ..status.clone()
    })
}

/// Removes the answer annotations (the status records the answer now).
async fn remove_answer(feature: &Feature, ctx: &Context) -> Result<(), CallError> {
    let keys = planning::answer_annotations(feature);
    if keys.is_empty() {
        return Ok(());
    }
    let namespace = feature.namespace().unwrap_or_default();
    let name = feature.name_any();
    let removed: serde_json::Map<String, serde_json::Value> = keys
        .into_iter()
        .map(|key| (key.to_owned(), serde_json::Value::Null))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": removed}});
    let api: Api<Feature> = Api::namespaced(ctx.client.clone(), &namespace);
    bounded(
        ctx.api_timeout,
        format!("remove the plan answer from Feature {namespace}/{name}"),
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    Ok(())
}

/// Sends the planning Task back to Pending with its retries given back: the planner plans
/// again (after a rejection, or a plan that cannot be read).
async fn plan_again(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    why: &str,
) -> Result<(), CallError> {
    let name = planning::planning_task_name(feature);
    let Some(planner) = tasks.iter().find(|t| t.name_any() == name) else {
        return Ok(());
    };
    let old = planner.status.clone().unwrap_or_default();
    let status = TaskStatus {
        phase: TaskPhase::Pending,
        retry_count: 0,
        next_attempt_after: None,
        message: Some(why.to_owned()),
        ..old
    };
    crate::controller::act::task_status::write_status(ctx, planner, &status).await
}

/// Creates the approved plan's Tasks that do not exist yet; whether it created any. A Task
/// the API server refuses is shown in the status message (and an Event).
async fn create_planned(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    hash: &str,
    status: &mut PlanningStatus,
) -> Result<bool, CallError> {
    if ctx.cache.planning_writes.created(feature, hash) {
        // Created by this process: the Task listing is behind.
        return Ok(false);
    }
    let regarding = feature.object_ref(&());
    let (answer, _) = match plan_of(feature, ctx).await? {
        Ok(plan) => plan,
        Err(why) => {
            status.message = Some(why);
            return Ok(false);
        }
    };
    let Ok(planned) = planned_tasks(feature, &answer.templates(), hash) else {
        return Ok(false);
    };
    let changes = planning::changes(feature, status, tasks, planned, hash);
    let changed =
        !(changes.adopt.is_empty() && changes.delete.is_empty() && changes.retry.is_empty());
    change_kept(feature, ctx, &changes, hash).await?;
    let created: Vec<_> =
        futures::stream::iter(changes.create.into_iter().map(|t| create_task(ctx, t)))
            .buffer_unordered(CONCURRENT_CREATES)
            .collect()
            .await;
    let (mut count, mut refused) = (0, Vec::new());
    for result in created {
        match result? {
            Created::Now => count += 1,
            Created::Existed => {}
            Created::Refused(message) => refused.push(message),
        }
    }
    if let Some(first) = refused.first() {
        ctx.events
            .warning(&regarding, "PlannedTaskRejected", first.clone())
            .await;
        status.message = Some(first.clone());
    } else {
        ctx.cache.planning_writes.record_created(feature, hash);
    }
    if refused.is_empty() && count > 0 {
        let note = format!("created {count} Tasks of plan {hash}");
        ctx.events
            .normal(&regarding, "PlannedTasksCreated", note)
            .await;
    }
    Ok(count > 0 || changed)
}

/// Makes the Tasks an earlier plan left those of the plan `hash`: failed ones given their
/// retries back (a revision), kept ones labelled with it (and given its spec unless done),
/// dropped ones deleted.
async fn change_kept(
    feature: &Feature,
    ctx: &Context,
    changes: &planning::PlanChanges,
    hash: &str,
) -> Result<(), CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    // The status writes first: they carry the cached resourceVersion, which a patch of the
    // same Task would make stale.
    for task in &changes.retry {
        let old = task.status.clone().unwrap_or_default();
        let status = TaskStatus {
            phase: TaskPhase::Pending,
            retry_count: 0,
            next_attempt_after: None,
            message: Some(format!("kept by the revised plan {hash}: retried")),
            ..old
        };
        crate::controller::act::task_status::write_status(ctx, task, &status).await?;
    }
    for (task, existing) in &changes.adopt {
        let name = task.name_any();
        let done = existing.status.as_ref().map(|s| s.phase) == Some(TaskPhase::Done);
        let mut patch = serde_json::json!({"metadata": {"labels": {PLAN_LABEL: hash}}});
        if !done {
            // The cache keeps no description: the spec is compared with the live one.
            let live = bounded(
                ctx.api_timeout,
                format!("get Task {namespace}/{name}"),
                api.get(&name),
            )
            .await?;
            let (old, new) = (
                serde_json::to_value(&live.spec),
                serde_json::to_value(&task.spec),
            );
            if let (Ok(old), Ok(new)) = (old, new) {
                patch["spec"] = planning::merge_patch(&old, &new);
            }
        }
        bounded(
            ctx.api_timeout,
            format!("adopt Task {namespace}/{name} into plan {hash}"),
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?;
    }
    for task in &changes.delete {
        let name = task.name_any();
        let deleted = bounded(
            ctx.api_timeout,
            format!("delete Task {namespace}/{name} (dropped by plan {hash})"),
            api.delete(&name, &DeleteParams::default()),
        )
        .await;
        match deleted {
            Err(error) if error.status_code() == Some(404) => {}
            other => drop(other?),
        }
    }
    Ok(())
}
