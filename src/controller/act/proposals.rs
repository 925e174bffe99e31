//! Follow-up tasks workers propose in a cluster (docs/planning.md): a worker attempt's
//! claim-keeper uploads them as ConfigMap `<attempt>-proposal`
//! ([`crate::controller::sidecar::ProposalUpload`]). When the attempt ends done, its Task's
//! conclusion takes the ConfigMap over ([`keep`]): owned by the Feature from then on (the
//! Pod, and with it what it owns, may go at once), and named in the Task's annotation
//! `proposal.ralph.dev/a<N>` ([`crate::api::labels::PROPOSAL_ANNOTATION_PREFIX`]), so the
//! Feature's reconcile finds it in the Task cache it reads anyway, with no read of its own
//! while nothing was proposed. The Feature's reconcile
//! ([`reconcile`]) checks each proposal as a plan is checked (against every task of the
//! Feature and the room `maxTasks` leaves), extends the running plan with the valid ones
//! into a new plan, approved as any plan is, writes `status.planning` at once and only then
//! deletes the proposals it read: a proposal is read once, even from caches behind.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::error::TaskError;
use super::scope::TaskScope;
use crate::api::labels::proposal_annotation;
use crate::api::planning::{
    Approval, ApprovalState, PlanningStatus, plan_config_map_name, proposal_config_map_name,
};
use crate::api::{Feature, Task};
use crate::clock::rfc3339;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::plan_map::{HASH_KEY, PROBLEM_KEY, read_plan_map, text};
use crate::controller::plan::planning;
use crate::controller::plan::pod::SIDECAR_CONTAINER;
use crate::controller::runtime::context::{Context, FIELD_MANAGER};
use crate::engine::attempt::AttemptResult;
use crate::engine::lifecycle::attempt_id;
use crate::engine::planning::{document_hash, plan_hash};
use crate::manifest::answer::{Answer, AnswerLimits, AnswerTask, check_answer};

/// Takes over the proposal of the Task's current attempt, which ended done with `result`
/// saying it proposed tasks: re-owned to the Feature and named in the Task's annotation
/// for the attempt ([`crate::api::labels::PROPOSAL_ANNOTATION_PREFIX`]). `false` while its
/// claim-keeper may still upload it (the conclusion waits for the Pod's next change). A proposal that never came is a Warning
/// Event, never a failure of the done task.
pub(crate) async fn keep(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    result: &AttemptResult,
) -> Result<bool, TaskError> {
    if !result.proposed || scope.feature.spec.planning.is_none() {
        return Ok(true);
    }
    let (ctx, task) = (scope.ctx, &plan.task);
    let namespace = task.namespace().unwrap_or_default();
    let number = task.status.as_ref().map_or(0, |s| s.attempt_count);
    let attempt = attempt_id(&task.name_any(), number);
    let name = proposal_config_map_name(&attempt);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let uploaded = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    if uploaded.is_none() {
        if super::plan_maps::claim_keeper_runs(scope, &namespace, &attempt) {
            return Ok(false);
        }
        let note = format!(
            "attempt {attempt} proposed follow-up tasks, but its claim-keeper uploaded no \
             ConfigMap {name}: the proposal is lost (see `kubectl logs -n {namespace} \
             {attempt} -c {SIDECAR_CONTAINER}`)"
        );
        ctx.events
            .warning(&task.object_ref(&()), "ProposalLost", note)
            .await;
        return Ok(true);
    }
    let owner = scope.feature.controller_owner_ref(&());
    let patch = serde_json::json!({"metadata": {"ownerReferences": owner.map(|o| vec![o])}});
    bounded(
        ctx.api_timeout,
        format!("take over ConfigMap {namespace}/{name} for the Feature"),
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    let key = proposal_annotation(number);
    if task.proposals().get(&key) != Some(&name) {
        let added = serde_json::Map::from_iter([(key, serde_json::Value::String(name))]);
        annotate(ctx, task, added).await?;
    }
    Ok(true)
}

/// Merge-patches the Task's annotations with `changes` (a `null` value removes one); each
/// proposal has its own key, so concurrent changes of others are kept.
async fn annotate(
    ctx: &Context,
    task: &CachedTask,
    changes: serde_json::Map<String, serde_json::Value>,
) -> Result<(), CallError> {
    let namespace = task.namespace().unwrap_or_default();
    let name = task.name_any();
    let patch = serde_json::json!({"metadata": {"annotations": changes}});
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let patched = bounded(
        ctx.api_timeout,
        format!("annotate Task {namespace}/{name} with its proposals"),
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    match patched {
        Err(error) if error.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

/// One proposal the Feature's Tasks name.
struct Proposal {
    /// The proposing Task.
    task: Arc<CachedTask>,
    /// The Task's annotation naming it.
    annotation: String,
    /// Its ConfigMap.
    config_map: String,
}

/// What the read proposals give.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Judged {
    /// The valid proposed tasks, in the order they came.
    pub(crate) accepted: Vec<AnswerTask>,
    /// The tasks that proposed them.
    pub(crate) proposers: Vec<String>,
    /// Refused proposals: the proposing task and the problems.
    pub(crate) refused: Vec<(String, Vec<String>)>,
}

/// Checks `proposals` (proposing task, text of its ConfigMap's task list or its problem)
/// one after the other against `existing` (every task of the Feature) and the `room`
/// maxTasks leaves, each against the ones accepted before it too. A proposal whose tasks
/// the plan already holds as proposed (`proposed`) was read before: it is skipped. Pure.
pub(crate) fn judge(
    proposals: Vec<(String, Result<String, String>)>,
    existing: &[crate::api::TaskTemplate],
    proposed: &[String],
    mut room: u32,
) -> Judged {
    let mut judged = Judged::default();
    let mut known = existing.to_vec();
    for (task, text) in proposals {
        let text = match text {
            Ok(text) => text,
            Err(problem) => {
                judged.refused.push((task, vec![problem]));
                continue;
            }
        };
        let limits = AnswerLimits {
            max_tasks: room,
            existing: &known,
        };
        match check_answer(&text, limits) {
            Ok(answer) => {
                room -= u32::try_from(answer.tasks.len()).unwrap_or(room);
                known.extend(answer.templates());
                judged.proposers.push(task);
                judged.accepted.extend(answer.tasks);
            }
            Err(problems) => {
                let again = read_before(&text, proposed);
                if !again {
                    judged.refused.push((task, problems.messages()));
                }
            }
        }
    }
    judged
}

/// Whether the proposal `text` names only tasks the plan holds as proposed already: it was
/// read before (and its ConfigMap not yet deleted).
fn read_before(text: &str, proposed: &[String]) -> bool {
    let limits = AnswerLimits {
        max_tasks: u32::MAX,
        existing: &[],
    };
    check_answer(text, limits).is_ok_and(|answer| {
        !answer.tasks.is_empty() && answer.tasks.iter().all(|t| proposed.contains(&t.name))
    })
}

/// Reads the proposals the Feature's Tasks name (a running plan's stage): the valid ones
/// extend the plan into a new one, written to `<feature>-plan` and `status.planning`
/// (approved at once with Automatic approval, else waiting for a person while the running
/// plan goes on); a refused one is a Warning Event `ProposalRefused`. Every proposal read is
/// then deleted. `None` when nothing was proposed, or the plan is unchanged.
pub(crate) async fn reconcile(
    feature: &Feature,
    ctx: &Context,
    tasks: &[Arc<CachedTask>],
    status: &PlanningStatus,
    now_ms: i64,
) -> Result<Option<PlanningStatus>, CallError> {
    let pending: Vec<Proposal> = tasks
        .iter()
        .flat_map(|task| {
            task.proposals()
                .iter()
                .map(|(annotation, config_map)| Proposal {
                    task: Arc::clone(task),
                    annotation: annotation.clone(),
                    config_map: config_map.clone(),
                })
        })
        .collect();
    if pending.is_empty() {
        return Ok(None);
    }
    let Some(spec) = feature.spec.planning.as_ref() else {
        return Ok(None);
    };
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let read: Vec<&Proposal> = pending.iter().collect();
    let texts = proposal_texts(ctx, &api, &namespace, &pending).await?;
    let regarding = feature.object_ref(&());
    let mut next = None;
    if !texts.is_empty() {
        // Without a readable plan the proposals wait: the planning steps say what is wrong.
        let Some((current, plan, document)) =
            current_plan(feature, ctx, &api, &namespace, tasks, status).await?
        else {
            return Ok(None);
        };
        let mut existing = feature.spec.tasks.clone();
        existing.extend(plan.templates());
        let used = u32::try_from(plan.tasks.len()).unwrap_or(u32::MAX);
        let judged = judge(
            texts,
            &existing,
            &status.proposed,
            spec.max_tasks.saturating_sub(used),
        );
        for (task, problems) in &judged.refused {
            let note = format!(
                "the tasks task {task} proposed are refused (nothing changed): {}",
                problems.join("; ")
            );
            ctx.events
                .warning(&regarding, "ProposalRefused", note)
                .await;
        }
        if !judged.accepted.is_empty()
            && let Some(extended) = extend(
                feature, ctx, current, plan, document, status, &judged, now_ms,
            )
            .await?
        {
            write_planning(feature, ctx, &extended).await?;
            next = Some(extended);
        }
    }
    forget(ctx, &namespace, &read).await?;
    Ok(next)
}

/// The texts of the `pending` proposals whose ConfigMaps exist, with the proposing task.
async fn proposal_texts(
    ctx: &Context,
    api: &Api<ConfigMap>,
    namespace: &str,
    pending: &[Proposal],
) -> Result<Vec<(String, Result<String, String>)>, CallError> {
    let mut texts = Vec::new();
    for proposal in pending {
        let name = &proposal.config_map;
        let found = bounded(
            ctx.api_timeout,
            format!("get ConfigMap {namespace}/{name}"),
            api.get_opt(name),
        )
        .await?;
        let task_id = crate::controller::plan::decide::task_id(&proposal.task);
        if let Some(map) = found {
            texts.push((task_id, proposal_text(&map)));
        }
    }
    Ok(texts)
}

/// The Feature's plan ConfigMap, its task list and document (without an extension whose
/// status write was lost); `None` when there is no readable plan.
async fn current_plan(
    feature: &Feature,
    ctx: &Context,
    api: &Api<ConfigMap>,
    namespace: &str,
    tasks: &[Arc<CachedTask>],
    status: &PlanningStatus,
) -> Result<Option<(ConfigMap, Answer, Option<String>)>, CallError> {
    let plan_map = plan_config_map_name(&feature.name_any());
    let current = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{plan_map}"),
        api.get_opt(&plan_map),
    )
    .await?;
    Ok(current.and_then(|map| {
        let files = read_plan_map(&map).ok()?;
        let listed = files.tasks.as_deref()?;
        let limits = AnswerLimits {
            max_tasks: u32::MAX,
            existing: &feature.spec.tasks,
        };
        let mut plan = check_answer(listed, limits).ok()?;
        if text(&map, HASH_KEY) != status.dag_hash.as_deref() {
            without_lost_extension(&mut plan, feature, tasks);
        }
        Some((map, plan, files.document))
    }))
}

/// Drops from `plan` (the plan ConfigMap's, whose hash is not the running plan's) the tasks
/// that have no Task: an extension whose status write failed after the plan ConfigMap was
/// replaced. While a plan runs every task of it has its Task, so what is left is the
/// running plan, which the proposals (still there: they are deleted only after the status
/// write) extend again.
fn without_lost_extension(plan: &mut Answer, feature: &Feature, tasks: &[Arc<CachedTask>]) {
    let feature_name = feature.name_any();
    plan.tasks.retain(|planned| {
        let object = crate::api::task_object_name(&feature_name, &planned.name);
        tasks
            .iter()
            .any(|t| t.metadata.name.as_deref() == Some(object.as_str()))
    });
}

/// The task list a proposal ConfigMap holds, or why it holds none.
fn proposal_text(map: &ConfigMap) -> Result<String, String> {
    if let Some(problem) = text(map, PROBLEM_KEY) {
        return Err(problem.to_owned());
    }
    match read_plan_map(map) {
        Ok(files) => files
            .tasks
            .ok_or_else(|| "the proposal holds no task list".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

/// Extends the running plan (`plan`, with `document`, kept in `current`) with the accepted
/// proposals: the new plan is written to `<feature>-plan`; its status is returned (`None`:
/// the extended plan is larger than an object holds, and the proposals are refused).
#[allow(clippy::too_many_arguments)]
async fn extend(
    feature: &Feature,
    ctx: &Context,
    current: ConfigMap,
    mut plan: Answer,
    document: Option<String>,
    status: &PlanningStatus,
    judged: &Judged,
    now_ms: i64,
) -> Result<Option<PlanningStatus>, CallError> {
    let names: Vec<String> = judged.accepted.iter().map(|t| t.name.clone()).collect();
    plan.tasks.extend(judged.accepted.iter().cloned());
    let hash = plan_hash(&plan.canonical(), document.as_deref());
    let count = u32::try_from(plan.tasks.len()).unwrap_or(u32::MAX);
    let namespace = feature.namespace().unwrap_or_default();
    let name = plan_config_map_name(&feature.name_any());
    match super::plan_maps::plan_config_map(feature, &plan, document.clone(), &hash) {
        Ok(mut map) => {
            map.metadata.resource_version = current.resource_version();
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
            bounded(
                ctx.api_timeout,
                format!("replace ConfigMap {namespace}/{name}"),
                api.replace(&name, &PostParams::default(), &map),
            )
            .await?;
        }
        Err(error) => {
            let note = format!(
                "the tasks {} proposed are refused (nothing changed): {error}",
                judged.proposers.join(", ")
            );
            ctx.events
                .warning(&feature.object_ref(&()), "ProposalRefused", note)
                .await;
            return Ok(None);
        }
    }
    let planned_by = status.planned_by.clone().unwrap_or_default();
    let mut next = planning::proposed(
        feature,
        status,
        &planned_by,
        &hash,
        count,
        document.as_deref().map(document_hash),
        rfc3339(now_ms),
    );
    next.running = status.dag_hash.clone();
    next.proposed.extend(names.iter().cloned());
    let approved = next
        .approval
        .as_ref()
        .is_some_and(|a| a.state == ApprovalState::Approved);
    let note = proposed_note(feature, status, judged, &names, &hash, count, approved);
    ctx.events
        .normal(&feature.object_ref(&()), "TasksProposed", note)
        .await;
    Ok(Some(next))
}

/// Writes `status.planning` now (before the proposals it holds are deleted), and keeps it
/// for the reconciles the Feature watch has not caught up with. The whole status is
/// applied as the reconcile's status write applies it (same field manager), so that write,
/// What the `TasksProposed` Event says: who proposed what, the new plan, and whether it
/// was approved or waits.
fn proposed_note(
    feature: &Feature,
    status: &PlanningStatus,
    judged: &Judged,
    names: &[String],
    hash: &str,
    count: u32,
    approved: bool,
) -> String {
    let automatic = feature
        .spec
        .planning
        .as_ref()
        .is_none_or(|p| p.approval == Approval::Automatic);
    let how = if approved && automatic {
        "approved (automatic)".to_owned()
    } else {
        format!(
            "it waits for approval while plan {} runs: `ralph plan show feature/{1}`, then \
             `ralph plan approve feature/{1} --hash {hash}` (or reject it to keep the running \
             plan)",
            status.dag_hash.as_deref().unwrap_or_default(),
            feature.name_any()
        )
    };
    format!(
        "{} proposed {} ({}): plan {hash} of {count} tasks; {how}",
        judged.proposers.join(", "),
        if names.len() == 1 { "a task" } else { "tasks" },
        names.join(", "),
    )
}

/// moments later, still owns every field, `status.planning.running` among them.
async fn write_planning(
    feature: &Feature,
    ctx: &Context,
    planning: &PlanningStatus,
) -> Result<(), CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let name = feature.name_any();
    let status = crate::api::FeatureStatus {
        planning: Some(planning.clone()),
        ..feature.status.clone().unwrap_or_default()
    };
    let patch = serde_json::json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "Feature",
        "metadata": {"name": name},
        "status": status,
    });
    let api: Api<Feature> = Api::namespaced(ctx.client.clone(), &namespace);
    bounded(
        ctx.api_timeout,
        format!("write status.planning of Feature {namespace}/{name}"),
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        ),
    )
    .await?;
    ctx.cache.planning_writes.record(feature, Some(planning));
    Ok(())
}

/// Deletes the proposals that were read and removes them from their Tasks' annotations.
async fn forget(ctx: &Context, namespace: &str, read: &[&Proposal]) -> Result<(), CallError> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    for proposal in read {
        let name = &proposal.config_map;
        let deleted = bounded(
            ctx.api_timeout,
            format!("delete ConfigMap {namespace}/{name}"),
            api.delete(name, &DeleteParams::default()),
        )
        .await;
        match deleted {
            Err(error) if !error.is_not_found() => return Err(error),
            _ => {}
        }
    }
    let mut annotated: Vec<&Arc<CachedTask>> = read.iter().map(|p| &p.task).collect();
    annotated.dedup_by(|a, b| a.name_any() == b.name_any());
    for task in annotated {
        let removed = read
            .iter()
            .filter(|p| p.task.name_any() == task.name_any())
            .map(|p| (p.annotation.clone(), serde_json::Value::Null))
            .collect();
        annotate(ctx, task, removed).await?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "proposals_tests.rs"]
mod tests;
