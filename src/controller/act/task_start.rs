//! Starting an attempt: the claim recorded on the Task, its prompt rendered (the inputs read
//! only now), and its agent Pod created.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::claim::lease_transitions;
use super::error::TaskError;
use super::scope::TaskScope;
use super::task_end::retry_policy;
use super::task_status::write_status;
use crate::api::ClaimStatus;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::plan::decide::{TaskPlan, feature_key};
use crate::controller::plan::pod::{AttemptPod, attempt_pod};
use crate::controller::plan::status::{self};
use crate::controller::runtime::context::Context;
use crate::engine::lifecycle::attempt_id;
use crate::engine::prompt::{self, CompletedBlocker, PromptInput, TaskText};
use crate::engine::verification::AttemptKind;

/// Creates the attempt's Pod (idempotent; the prompt is in it), then records it started.
pub(super) async fn start(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    attempt: u32,
    lease: Option<&Lease>,
) -> Result<(), TaskError> {
    let ctx = scope.ctx;
    let task = &plan.task;
    let name = task.name_any();
    let namespace = task
        .namespace()
        .ok_or_else(|| TaskError::malformed(&name, "no namespace"))?;
    let feature_name = scope.feature.name_any();
    let id = attempt_id(&name, attempt);
    let owner = task
        .controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or_else(|| TaskError::malformed(&name, "no uid (not read from the API server)"))?;
    let kind = crate::controller::plan::verify::next_attempt_kind(scope.feature, task);
    let planning = super::planning::is_planning(scope.feature, plan);
    let prompt = if planning {
        super::planning::prompt(scope, plan).await?
    } else {
        prompt_of(scope, plan, kind).await?
    };
    let choice = match &plan.selection {
        Some(crate::engine::selection::Selection::Run(choice)) => Some(choice),
        _ => None,
    };
    let input = AttemptPod {
        namespace: &namespace,
        task: &name,
        task_id: &plan.task_id,
        feature: &feature_name,
        attempt_id: &id,
        prompt: &prompt,
        owner,
        agent: choice
            .and_then(|c| scope.feature.spec.pool_agent(&c.agent))
            .unwrap_or(&scope.feature.spec.agent),
        model: choice.and_then(|c| c.model.as_deref()),
        overrides: scope.feature.spec.pod_template.as_ref(),
        kind,
        verify: &scope.feature.spec.verify,
        lease_duration_seconds: scope.feature.spec.lease_duration_seconds,
    };
    let mut pod = attempt_pod(&input, &ctx.pod_settings)?;
    crate::controller::plan::git::add_to_attempt_pod(
        &mut pod,
        scope.feature,
        input.agent,
        &plan.task_id,
        attempt,
        kind,
    );
    crate::controller::plan::budget_share::add_to_attempt_pod(
        &mut pod,
        scope.feature,
        input.agent,
        || spent_by(scope, &namespace),
    );
    crate::controller::plan::pod_planning::add_uploads(
        &mut pod,
        scope.feature,
        &plan.task_id,
        planning,
        kind,
    );
    crate::controller::plan::pod::stamp_task_generation(&mut pod, task.metadata.generation);
    // A Pod created by an earlier start of this attempt may be built for an older spec.
    let pod = create_with_prompt(ctx, &namespace, pod).await?;
    let generation =
        crate::controller::plan::pod::built_for_generation(&pod).or(task.metadata.generation);
    record_started(scope, plan, attempt, generation, lease, kind, choice).await
}

/// Creates the attempt's `pod` (or finds it), its prompt in a ConfigMap of its own when it
/// is too large for the Pod's annotations.
async fn create_with_prompt(
    ctx: &Context,
    namespace: &str,
    mut pod: Pod,
) -> Result<Pod, TaskError> {
    let id = pod.name_any();
    let prompt_map = place_prompt(ctx, namespace, &mut pod).await?;
    let pod = create_attempt_pod(ctx, namespace, &id, &pod).await?;
    if let Some(map) = prompt_map {
        hand_to_pod(ctx, namespace, &map, &pod).await?;
    }
    Ok(pod)
}

/// Creates the ConfigMap that carries a prompt too large for `pod`'s annotations
/// ([`crate::controller::plan::pod_prompt::place_prompt`]); its name, if one was needed.
async fn place_prompt(
    ctx: &Context,
    namespace: &str,
    pod: &mut Pod,
) -> Result<Option<String>, TaskError> {
    let id = pod.name_any();
    let map = crate::controller::plan::pod_prompt::place_prompt(pod).map_err(|too_large| {
        TaskError::PromptTooLarge {
            pod: id.clone(),
            bytes: too_large.bytes,
        }
    })?;
    let Some(map) = map else {
        return Ok(None);
    };
    let name = map.name_any();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    create_idempotent(ctx.api_timeout, &api, &name, &map).await?;
    Ok(Some(name))
}

/// Makes the Pod the owner of its prompt's ConfigMap `map`: it goes when the Pod goes.
async fn hand_to_pod(
    ctx: &Context,
    namespace: &str,
    map: &str,
    pod: &Pod,
) -> Result<(), TaskError> {
    let (Some(name), Some(uid)) = (&pod.metadata.name, &pod.metadata.uid) else {
        return Ok(());
    };
    let owner = crate::controller::plan::pod::owned_by_pod(name, uid);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
    bounded(
        ctx.api_timeout,
        format!("hand ConfigMap {namespace}/{map} to Pod {}", pod.name_any()),
        api.patch(map, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    Ok(())
}

/// Records on the Task that the attempt started in a Pod built for the Task's `generation`
/// (its claim with the fencing token, its kind and its agent), and warns of a model hint the pool refused.
pub(super) async fn record_started(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    attempt: u32,
    generation: Option<i64>,
    lease: Option<&Lease>,
    kind: AttemptKind,
    choice: Option<&crate::engine::selection::Choice>,
) -> Result<(), TaskError> {
    let (ctx, task) = (scope.ctx, &plan.task);
    let name = task.name_any();
    let id = attempt_id(&name, attempt);
    let claim = ClaimStatus {
        lease: name.clone(),
        holder: id.clone(),
        attempt,
        acquired_at: lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.acquire_time.as_ref())
            .map(|t| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0)),
        fencing_token: lease.map_or(0, lease_transitions),
    };
    let mut started = status::started(task, attempt, &id, generation, claim, scope.now_ms);
    crate::controller::plan::verify::record_start(
        &mut started,
        kind,
        task.metadata.generation,
        scope.now_ms,
    );
    if let Some(choice) = choice {
        crate::controller::plan::selection::record_choice(&mut started, choice);
        if let Some(warning) = &choice.refused_hint {
            ctx.events
                .warning(
                    &task.object_ref(&()),
                    "ModelHintRefused",
                    format!("task {}: {warning}", plan.task_id),
                )
                .await;
        }
    }
    write_status(ctx, task, &started).await?;
    ctx.metrics.attempts_started.inc();
    tracing::debug!(task = %name, pod = %id, attempt, "attempt started");
    Ok(())
}

/// The attempt's prompt, from the descriptions of the Task and its parent (which no cache
/// keeps).
pub(super) async fn prompt_of(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    kind: AttemptKind,
) -> Result<String, TaskError> {
    let task = &plan.task;
    let name = task.name_any();
    let parent = task.spec.fields.parent.as_deref();
    let described: Vec<&str> = [
        Some(name.as_str()),
        parent.filter(|p| scope.siblings.contains_key(*p)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let descriptions = crate::controller::cache::texts::descriptions(
        scope.ctx,
        scope.feature,
        scope.siblings,
        &described,
    )
    .await?;
    Ok(render_prompt(scope, plan, kind, &descriptions))
}

/// The Feature's Tasks and its agent Pods by name: what its budget's shares are taken from.
pub(super) fn spent_by(
    scope: &TaskScope<'_>,
    namespace: &str,
) -> (Vec<Arc<CachedTask>>, BTreeMap<String, Arc<CachedPod>>) {
    let ctx = scope.ctx;
    let key = feature_key(namespace, &scope.feature.name_any());
    let pods = ctx.cache.indexes.pods.objects(&ctx.cache.pods, &key);
    let pods = pods
        .into_iter()
        .filter_map(|pod| pod.metadata.name.clone().map(|name| (name, pod)))
        .collect();
    (scope.siblings.values().cloned().collect(), pods)
}

/// The Feature's texts for a prompt: a planning Feature's work attempts are told after the
/// plan how to propose follow-up tasks (docs/planning.md), as `ralph run` tells them.
fn feature_text(scope: &TaskScope<'_>, kind: AttemptKind) -> prompt::FeatureText {
    let mut text = scope.texts.clone();
    if scope.feature.spec.planning.is_some() && kind == AttemptKind::Work {
        let help = crate::engine::planning::PROPOSE_HELP;
        text.plan = Some(match text.plan.take() {
            Some(plan) => format!("{plan}\n\n{help}"),
            None => help.to_owned(),
        });
    }
    text
}

/// Creates the attempt's Pod; one the API server refuses (403, 422) is
/// [`TaskError::PodRejected`].
pub(super) async fn create_attempt_pod(
    ctx: &Context,
    namespace: &str,
    id: &str,
    pod: &Pod,
) -> Result<Pod, TaskError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    create_idempotent(ctx.api_timeout, &pods, id, pod)
        .await
        .map_err(|source| match source.status_code() {
            Some(403 | 422) => TaskError::PodRejected {
                pod: id.to_owned(),
                source,
            },
            _ => source.into(),
        })
}

/// Creates `object`, or returns the existing one of that name (a repeated start).
pub(super) async fn create_idempotent<K>(
    timeout: Duration,
    api: &Api<K>,
    name: &str,
    object: &K,
) -> Result<K, CallError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let created = bounded(
        timeout,
        format!("create {kind} {name}"),
        api.create(&PostParams::default(), object),
    )
    .await;
    match created {
        Err(error) if error.is_conflict() => {
            bounded(timeout, format!("get {kind} {name}"), api.get(name)).await
        }
        other => other,
    }
}

/// The attempt's prompt; `descriptions` are the task's and its parent's
/// ([`crate::controller::cache::texts::descriptions`]: the Task cache keeps none).
pub(super) fn render_prompt(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    kind: AttemptKind,
    descriptions: &BTreeMap<String, String>,
) -> String {
    let task = &plan.task;
    let fields = &task.spec.fields;
    let text = |t: &CachedTask, id: String| TaskText {
        id,
        title: t.spec.fields.title.clone(),
        description: descriptions
            .get(t.metadata.name.as_deref().unwrap_or_default())
            .cloned()
            .unwrap_or_default(),
    };
    let parent = fields
        .parent
        .as_ref()
        .and_then(|p| scope.siblings.get(p))
        .map(|p| text(p, crate::controller::plan::decide::task_id(p)));
    let completed_blockers = fields
        .depends_on
        .iter()
        .filter_map(|d| scope.siblings.get(d))
        .map(|b| CompletedBlocker {
            id: crate::controller::plan::decide::task_id(b),
            title: b.spec.fields.title.clone(),
            summary: None,
        })
        .collect();
    let status = task.status.clone().unwrap_or_default();
    let input = PromptInput {
        task: text(task, plan.task_id.clone()),
        parent,
        completed_blockers,
        feature: feature_text(scope, kind),
        retry_count: status.retry_count,
        max_retries: retry_policy(scope.feature, task).max_retries,
        previous_attempt: status::previous_attempt(task),
        reported: crate::controller::plan::verify::reported_work(task),
        memory: super::memory::recall(
            scope.feature,
            task,
            &plan.task_id,
            scope.siblings,
            scope.knowledge,
        ),
    };
    match kind {
        AttemptKind::Work => prompt::render(&input),
        AttemptKind::Verify => prompt::render_verification(&input),
    }
}
