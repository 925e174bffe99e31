//! The Feature reconcile: fetch (caches) → decide (pure, [`super::decide`]) → apply (per
//! task, [`super::task`]) → status. It also keeps the Feature's Task objects in line with
//! its templates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};

use super::call::{CallError, bounded};
use super::context::{Context, FIELD_MANAGER};
use super::decide::{self, FeaturePlan, Snapshot};
use super::pod::FEATURE_LABEL;
use super::status::{self, FeatureEvents};
use super::task::{self, TaskError, TaskScope};
use crate::api::{Feature, Task, TextSource, desired_tasks};
use crate::engine::dag::TaskPhase;
use crate::engine::prompt::FeatureText;

/// How often a settled feature is looked at even without events.
const RESYNC: Duration = Duration::from_secs(300);
/// How many tasks of one feature have their actions applied at once.
const CONCURRENT_TASK_APPLIES: usize = 16;
/// Retry delay after a failed reconcile.
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// Retry delay after a write found the cache stale.
const STALE_RETRY: Duration = Duration::from_millis(200);

/// Why a Feature reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// A task's actions failed.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The Feature object lacks a namespace or name.
    #[error("Feature without {0}")]
    Malformed(&'static str),
}

/// Reconciles one Feature.
#[tracing::instrument(skip_all, fields(feature = %feature.name_any(), namespace = feature.namespace()))]
pub async fn reconcile(
    feature: Arc<Feature>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    let result = reconcile_inner(&feature, &ctx).await;
    ctx.metrics.reconciled("feature", result.is_err());
    result
}

/// After a failed reconcile: log, retry soon.
pub fn error_policy(feature: Arc<Feature>, error: &ReconcileError, _ctx: Arc<Context>) -> Requeue {
    if error.is_stale_cache() {
        tracing::debug!(feature = %feature.name_any(), %error, "cache behind a write; retrying");
        return Requeue::requeue(STALE_RETRY);
    }
    tracing::warn!(feature = %feature.name_any(), %error, "reconcile failed");
    Requeue::requeue(ERROR_RETRY)
}

impl ReconcileError {
    /// True for a resourceVersion conflict: the cache had not caught up with an earlier
    /// write yet, nothing is wrong.
    pub fn is_stale_cache(&self) -> bool {
        match self {
            ReconcileError::Call(error) | ReconcileError::Task(TaskError::Call(error)) => {
                error.is_conflict()
            }
            _ => false,
        }
    }
}

async fn reconcile_inner(feature: &Feature, ctx: &Context) -> Result<Requeue, ReconcileError> {
    let namespace = feature
        .namespace()
        .ok_or(ReconcileError::Malformed("namespace"))?;
    let name = feature.name_any();
    if feature.meta().deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    // Fetch: the feature's tasks, leases and pods, from the caches.
    sync_tasks(feature, ctx).await?;
    let tasks: Vec<Arc<Task>> = ctx.tasks.state_filter(|t| {
        t.namespace().as_deref() == Some(namespace.as_str()) && t.spec.feature_ref == name
    });
    let in_feature = |labels: &BTreeMap<String, String>, ns: Option<String>| {
        ns.as_deref() == Some(namespace.as_str())
            && labels.get(FEATURE_LABEL).map(String::as_str) == Some(name.as_str())
    };
    let leases = by_name(
        ctx.leases
            .state_filter(|l| in_feature(l.labels(), l.namespace())),
    );
    let pods = by_name(
        ctx.pods
            .state_filter(|p| in_feature(p.labels(), p.namespace())),
    );
    let now_ms = jiff::Timestamp::now().as_millisecond();

    // Decide.
    let plan = decide::plan(&Snapshot {
        feature,
        tasks: &tasks,
        leases: &leases,
        pods: &pods,
        now_ms,
    });

    // Apply.
    let mut effects = FeatureEvents::default();
    if plan.invalid.is_none() {
        let siblings = by_name(tasks.clone());
        let texts = feature_texts(feature, ctx, &plan).await?;
        let scope = TaskScope {
            ctx,
            feature,
            siblings: &siblings,
            leases: &leases,
            texts: &texts,
            now_ms,
        };
        let applies: Vec<_> = plan.tasks.iter().map(|t| apply_task(&scope, t)).collect();
        let outcomes: Vec<_> = futures::stream::iter(applies)
            .buffer_unordered(CONCURRENT_TASK_APPLIES)
            .collect()
            .await;
        let mut first_error = None;
        for (task_plan, result, task_effects) in outcomes {
            if effects.stop_reason.is_none() {
                effects.stop_reason = task_effects.stop_reason;
            }
            if let Err(error) = result {
                tracing::warn!(task = %task_plan.task.name_any(), %error, "task actions failed");
                first_error.get_or_insert(error);
            }
        }
        if let Some(error) = first_error {
            write_status(feature, ctx, &plan, &tasks, &effects, now_ms).await?;
            return Err(error.into());
        }
    } else if let Some(message) = &plan.invalid {
        let was_invalid = feature
            .status
            .as_ref()
            .is_some_and(|s| s.phase == crate::api::FeaturePhase::Invalid);
        if !was_invalid {
            ctx.events
                .warning(&feature.object_ref(&()), "InvalidPlan", message.clone())
                .await;
        }
    }

    // Status.
    write_status(feature, ctx, &plan, &tasks, &effects, now_ms).await?;
    count_tasks_by_phase(ctx);
    Ok(requeue(&plan, now_ms))
}

/// Sets the tasks-by-phase gauges from the cache (all watched features).
fn count_tasks_by_phase(ctx: &Context) {
    let mut counts: Vec<(TaskPhase, i64)> = [
        TaskPhase::Pending,
        TaskPhase::Running,
        TaskPhase::Done,
        TaskPhase::Failed,
        TaskPhase::Blocked,
    ]
    .into_iter()
    .map(|phase| (phase, 0))
    .collect();
    for task in ctx.tasks.state() {
        let phase = task.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if let Some((_, count)) = counts.iter_mut().find(|(p, _)| *p == phase) {
            *count += 1;
        }
    }
    for (phase, count) in counts {
        ctx.metrics
            .tasks_by_phase
            .get_or_create(&super::metrics::PhaseLabel {
                phase: format!("{phase:?}"),
            })
            .set(count);
    }
}

async fn apply_task<'p>(
    scope: &TaskScope<'_>,
    task_plan: &'p decide::TaskPlan,
) -> (&'p decide::TaskPlan, Result<(), TaskError>, FeatureEvents) {
    let mut effects = FeatureEvents::default();
    let result = task::apply(scope, task_plan, &mut effects).await;
    (task_plan, result, effects)
}

fn requeue(plan: &FeaturePlan, now_ms: i64) -> Requeue {
    match plan.requeue_at() {
        Some(at) => {
            let wait = u64::try_from(at.saturating_sub(now_ms)).unwrap_or(0);
            Requeue::requeue(Duration::from_millis(wait).max(Duration::from_millis(100)))
        }
        None => Requeue::requeue(RESYNC),
    }
}

fn by_name<K: Resource>(objects: Vec<Arc<K>>) -> BTreeMap<String, Arc<K>> {
    objects
        .into_iter()
        .filter_map(|o| o.meta().name.clone().map(|n| (n, o)))
        .collect()
}

/// Applies the Task objects the Feature's templates describe (only those that differ from
/// the cache) and deletes templated Tasks whose template is gone, unless they are running.
async fn sync_tasks(feature: &Feature, ctx: &Context) -> Result<(), ReconcileError> {
    let Ok(desired) = desired_tasks(feature) else {
        return Ok(());
    };
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let key = format!("{namespace}/{}", feature.name_any());
    let generation = feature.metadata.generation.unwrap_or(0);
    let already_applied = ctx.applied_generation(&key) == Some(generation);
    let mut wanted = std::collections::BTreeSet::new();
    let cached: BTreeMap<String, Arc<Task>> = by_name(
        ctx.tasks
            .state_filter(|t| t.namespace().as_deref() == Some(namespace.as_str())),
    );
    for task in &desired {
        let name = task.name_any();
        wanted.insert(name.clone());
        let up_to_date = match cached.get(&name) {
            Some(c) => {
                c.spec == task.spec
                    && task
                        .labels()
                        .iter()
                        .all(|(k, v)| c.labels().get(k) == Some(v))
                    && !c.owner_references().is_empty()
            }
            // Applied for this generation already; the cache has not caught up yet.
            None => already_applied,
        };
        if up_to_date {
            continue;
        }
        let mut body = serde_json::to_value(task).unwrap_or_default();
        if let Some(object) = body.as_object_mut() {
            object.remove("status");
        }
        bounded(
            ctx.api_timeout,
            format!("apply Task {namespace}/{name}"),
            api.patch(&name, &params, &Patch::Apply(&body)),
        )
        .await?;
    }
    ctx.set_applied_generation(&key, generation);
    let uid = feature.metadata.uid.clone().unwrap_or_default();
    let orphans = cached.values().filter(|t| {
        !wanted.contains(&t.name_any())
            && t.owner_references().iter().any(|o| o.uid == uid)
            && t.status.as_ref().map(|s| s.phase) != Some(TaskPhase::Running)
    });
    for orphan in orphans {
        let name = orphan.name_any();
        let deleted = bounded(
            ctx.api_timeout,
            format!("delete Task {namespace}/{name}"),
            api.delete(&name, &DeleteParams::default()),
        )
        .await;
        match deleted {
            Err(error) if !error.is_not_found() => return Err(error.into()),
            _ => {}
        }
    }
    Ok(())
}

/// The feature's spec and plan texts, read only when an attempt starts in this reconcile.
async fn feature_texts(
    feature: &Feature,
    ctx: &Context,
    plan: &FeaturePlan,
) -> Result<FeatureText, TaskError> {
    let name = feature.name_any();
    let mut texts = FeatureText {
        name: name.clone(),
        spec: None,
        plan: None,
    };
    let starting = plan.tasks.iter().any(|t| {
        t.actions
            .iter()
            .any(|a| matches!(a, crate::engine::lifecycle::Action::StartAttempt { .. }))
    });
    if !starting {
        return Ok(texts);
    }
    let context = &feature.spec.context;
    texts.spec = read_text(feature, ctx, context.spec.as_ref(), "spec.context.spec").await?;
    texts.plan = read_text(feature, ctx, context.plan.as_ref(), "spec.context.plan").await?;
    Ok(texts)
}

async fn read_text(
    feature: &Feature,
    ctx: &Context,
    source: Option<&TextSource>,
    what: &'static str,
) -> Result<Option<String>, TaskError> {
    let Some(source) = source else {
        return Ok(None);
    };
    if let Some(inline) = &source.inline {
        return Ok(Some(inline.clone()));
    }
    let Some(selector) = &source.config_map_key_ref else {
        return Ok(None);
    };
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let problem = |problem: String| TaskError::Context {
        feature: feature.name_any(),
        what,
        problem,
    };
    let config_map = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{}", selector.name),
        api.get_opt(&selector.name),
    )
    .await?;
    match config_map
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove(&selector.key))
    {
        Some(text) => Ok(Some(text)),
        None if selector.optional == Some(true) => Ok(None),
        None => Err(problem(format!(
            "ConfigMap {} has no key {}",
            selector.name, selector.key
        ))),
    }
}

/// Writes the Feature's status when it changed.
async fn write_status(
    feature: &Feature,
    ctx: &Context,
    plan: &FeaturePlan,
    tasks: &[Arc<Task>],
    effects: &FeatureEvents,
    now_ms: i64,
) -> Result<(), ReconcileError> {
    let new = status::feature_status(feature, plan, tasks, effects, now_ms);
    if feature.status.as_ref() == Some(&new) {
        return Ok(());
    }
    let old_phase = feature.status.as_ref().map(|s| s.phase);
    let name = feature.name_any();
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<Feature> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = serde_json::json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "Feature",
        "metadata": {"name": name},
        "status": new,
    });
    bounded(
        ctx.api_timeout,
        format!("write status of Feature {namespace}/{name}"),
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        ),
    )
    .await?;
    if old_phase != Some(new.phase) {
        ctx.events
            .normal(
                &feature.object_ref(&()),
                "FeaturePhase",
                format!(
                    "feature {name} is {:?}: {}",
                    new.phase,
                    new.message.clone().unwrap_or_default()
                ),
            )
            .await;
    }
    Ok(())
}
