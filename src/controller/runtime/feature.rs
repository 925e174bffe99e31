//! The Feature reconcile: gather (the caches, the checks of `feature_checks.rs`,
//! planning) → decide once (pure, `plan::decide`) → apply (per task, `act::task`) → status
//! (`feature_status.rs`). It also keeps the Feature's Task objects in line with its
//! templates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};

use super::context::Context;
use super::feature_checks::{
    configuration_problem, misconfiguration, missing_service_account, report_misconfiguration,
    start_limit, warn_of,
};
use super::feature_status::{patch_status, write_status};
use crate::api::{Feature, Task, conditions};
use crate::controller::act::claim;
use crate::controller::act::claims::Claims;
use crate::controller::act::error::TaskError;
use crate::controller::act::task::{self, TaskScope};
use crate::controller::cache::index::by_name;
use crate::controller::cache::shapes::plan_kept;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::plan::decide::feature_key;
use crate::controller::plan::decide::{self, FeaturePlan, Snapshot};
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status::{self, FeatureEvents};
use crate::engine::dag::TaskPhase;
use crate::engine::selection::Rests;

/// How often a settled feature is looked at even without events.
const RESYNC: Duration = Duration::from_secs(300);
/// How many tasks of one feature have their actions applied at once.
const CONCURRENT_TASK_APPLIES: usize = 16;
/// Retry delay after a failed reconcile.
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// Retry delay after a write found the cache stale, or while the caches are behind.
const STALE_RETRY: Duration = Duration::from_millis(200);
/// How often a feature whose ready tasks wait for a controller-wide attempt slot looks again.
const SLOT_RETRY: Duration = Duration::from_secs(1);
/// How often a feature whose configuration keeps attempts from starting is looked at again.
const MISCONFIGURED_RETRY: Duration = Duration::from_secs(30);
/// How often a feature waiting for its agent ServiceAccount looks for it again.
const SERVICE_ACCOUNT_RETRY: Duration = Duration::from_secs(5);

/// Why a Feature reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
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
pub(crate) async fn reconcile(
    feature: Arc<Feature>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    let result = reconcile_inner(&feature, &ctx).await;
    ctx.metrics.reconciled("feature", result.is_err());
    result
}

/// After a failed reconcile: log, retry soon.
pub(crate) fn error_policy(
    feature: Arc<Feature>,
    error: &ReconcileError,
    _ctx: Arc<Context>,
) -> Requeue {
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
    pub(crate) fn is_stale_cache(&self) -> bool {
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
    // No judgement from a half-filled cache: every store this reconcile reads has synced,
    // and holds every Task the Feature's templates say must exist.
    if !caches_synced(ctx) {
        tracing::debug!("caches not synced yet; not judging");
        return Ok(Requeue::requeue(STALE_RETRY));
    }
    let key = feature_key(&namespace, &name);
    let listed = ctx.cache.indexes.tasks.objects(&ctx.cache.tasks, &key);
    if feature.status.is_none() && listed.len() < feature.spec.tasks.len() {
        let now_ms = jiff::Timestamp::now().as_millisecond();
        patch_status(feature, ctx, &status::creating_tasks(feature, now_ms)).await?;
    }
    let synced = crate::controller::act::templates::sync_tasks(feature, ctx, &listed).await?;
    if !synced.missing.is_empty() {
        tracing::debug!(missing = ?synced.missing, "Task cache behind the templates; not judging");
        return Ok(Requeue::requeue(STALE_RETRY));
    }
    let listed = match synced.wrote {
        true => ctx.cache.indexes.tasks.objects(&ctx.cache.tasks, &key),
        false => listed,
    };
    let tasks = ctx.cache.task_writes.newest_of_all(listed);
    let rejected = synced.rejected.map(|(_, problem)| problem);
    match judge(feature, ctx, rejected.clone(), tasks).await {
        // A write found the Task cache behind (409): decide again from a fresh read, once,
        // instead of retrying the stale decision until the watch catches up.
        Err(error) if error.is_stale_cache() => {
            tracing::debug!(%error, "conflict; deciding again from a live read");
            let live = live_tasks(ctx, &namespace, &name).await?;
            judge(feature, ctx, rejected, live).await
        }
        other => other,
    }
}

/// What one reconcile decides on, gathered before it decides: the Feature's Tasks, Leases
/// and Pods (caches), the configuration checks (the Secrets read live, remembered per
/// period), a halt recorded on the Feature or its Tasks, and the agents' rests.
struct Gathered {
    tasks: Vec<Arc<CachedTask>>,
    leases: BTreeMap<String, Arc<Lease>>,
    pods: BTreeMap<String, Arc<CachedPod>>,
    now_ms: i64,
    /// What keeps any agent Pod from existing, found before deciding.
    precheck: Option<Problem>,
    /// A halt recorded on the Feature or shown by its Tasks.
    recorded: Option<Problem>,
    start_limit: usize,
    rests: Rests,
    /// Where planning stands (docs/planning.md); `NotPlanning` without `spec.planning`.
    planning: crate::controller::act::planned::Planning,
    /// The Feature's planning Task, while every other task waits for the plan.
    planning_only: Option<String>,
    /// The Feature's planning Task, while the Feature's outcome waits for the plan.
    plan_waits: Option<String>,
}

impl Gathered {
    fn snapshot<'a>(&'a self, feature: &'a Feature) -> Snapshot<'a> {
        Snapshot {
            feature,
            tasks: &self.tasks,
            leases: &self.leases,
            pods: &self.pods,
            now_ms: self.now_ms,
            start_limit: self.start_limit,
            rests: &self.rests,
            planning_only: self.planning_only.as_deref(),
            plan_waits: self.plan_waits.as_deref(),
        }
    }
}

/// Gathers, decides, applies and writes status from `tasks` (the feature's Tasks) and the
/// other caches.
async fn judge(
    feature: &Feature,
    ctx: &Context,
    rejected: Option<Problem>,
    tasks: Vec<Arc<CachedTask>>,
) -> Result<Requeue, ReconcileError> {
    let mut gathered = gather(feature, ctx, tasks).await?;
    let Some(mut plan) = decide_once(feature, ctx, &mut gathered, rejected).await? else {
        return Ok(Requeue::requeue(STALE_RETRY));
    };
    crate::controller::act::planned::replan_if_failed(
        feature,
        ctx,
        &mut gathered.planning,
        &gathered.tasks,
        &mut plan,
    )
    .await?;
    let mut effects = FeatureEvents::default();
    if let Some(invalid) = &plan.invalid {
        let namespace = feature.namespace().unwrap_or_default();
        release_claims(ctx, &namespace, &gathered.leases, &gathered.tasks, None).await?;
        stop_pods(ctx, &namespace, &gathered.pods).await?;
        if !was_invalid(feature) {
            warn_of(ctx, feature, invalid).await;
        }
    } else {
        effects = apply_plan(feature, ctx, &gathered, &plan).await?;
    }
    effects.planning = gathered.planning.status.clone();
    effects.plan_stage = Some(gathered.planning.stage.clone())
        .filter(crate::controller::plan::planning::Stage::holds_outcome);
    write_status(
        feature,
        ctx,
        &plan,
        &gathered.tasks,
        &effects,
        gathered.now_ms,
    )
    .await?;
    if gathered.planning.wrote {
        // The Tasks planning created are not in the listing yet.
        return Ok(Requeue::requeue(SLOT_RETRY));
    }
    Ok(requeue_after(&plan, &effects, gathered.now_ms))
}

/// Reads everything the decision needs (the configuration checks first: a halt lifted by a
/// spec change is written to the Tasks before they are read for the plan).
async fn gather(
    feature: &Feature,
    ctx: &Context,
    tasks: Vec<Arc<CachedTask>>,
) -> Result<Gathered, ReconcileError> {
    let namespace = feature.namespace().unwrap_or_default();
    let key = feature_key(&namespace, &feature.name_any());
    let leases = by_name(ctx.cache.indexes.leases.objects(&ctx.cache.leases, &key));
    let pods = by_name(ctx.cache.indexes.pods.objects(&ctx.cache.pods, &key));
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let mut precheck = match configuration_problem(feature, ctx) {
        Some(problem) => Some(problem),
        None => crate::controller::act::git_secret::configuration_problem(feature, ctx).await,
    };
    if precheck.is_none() {
        precheck =
            crate::controller::act::gateway_secret::configuration_problem(feature, ctx).await;
    }
    let tasks =
        crate::controller::act::pod_start::clear_on_spec_change(ctx, feature, tasks, now_ms)
            .await?;
    let recorded = status::recorded_misconfiguration(feature)
        .or_else(|| crate::controller::plan::pod_start::halt_shown_by_tasks(&tasks));
    let start_limit = start_limit(precheck.as_ref(), recorded.as_ref(), &tasks, now_ms);
    let rests = ctx
        .rests
        .current(&ctx.client, ctx.api_timeout, &namespace, now_ms)
        .await?;
    let planning = crate::controller::act::planned::reconcile(feature, ctx, &tasks, now_ms).await?;
    let planner = crate::controller::plan::planning::planning_task_name(feature);
    let planning_only = planning.stage.holds_tasks().then(|| planner.clone());
    let plan_waits = planning.stage.holds_outcome().then_some(planner);
    Ok(Gathered {
        tasks,
        leases,
        pods,
        now_ms,
        precheck,
        recorded,
        start_limit,
        rests,
        planning,
        planning_only,
        plan_waits,
    })
}

/// Plans the feature once from what was gathered. Two rare cases read once more and, for
/// correctness, decide again; neither is worth its read on every reconcile:
/// - a plan newly invalid or empty is confirmed against a live list of the Tasks
///   (standalone Tasks have no template that says they must exist, so only the API server
///   can tell a lagging cache): `None` when only the cache is behind;
/// - a plan that claims while the agent Pods' ServiceAccount is missing (read only then,
///   remembered per period) is planned again with no claim, as the API server would refuse
///   the Pod.
async fn decide_once(
    feature: &Feature,
    ctx: &Context,
    gathered: &mut Gathered,
    rejected: Option<Problem>,
) -> Result<Option<FeaturePlan>, ReconcileError> {
    let mut plan = plan_kept(&gathered.snapshot(feature), &ctx.cache.shapes);
    if let Some(rejected) = rejected {
        plan.invalid = Some(rejected);
        plan.tasks.clear();
    } else if newly_invalid_or_empty(feature, &plan) {
        let namespace = feature.namespace().unwrap_or_default();
        let live = live_tasks(ctx, &namespace, &feature.name_any()).await?;
        let fresh = decide::plan(&Snapshot {
            tasks: &live,
            ..gathered.snapshot(feature)
        });
        if !newly_invalid_or_empty(feature, &fresh) {
            tracing::debug!("plan invalid or empty only in the cache; not judging");
            return Ok(None);
        }
    }
    if gathered.precheck.is_none()
        && claims_any(&plan)
        && let Some(problem) = missing_service_account(feature, ctx).await
    {
        gathered.start_limit = 0;
        plan = plan_kept(&gathered.snapshot(feature), &ctx.cache.shapes);
        gathered.precheck = Some(problem);
    }
    Ok(Some(plan))
}

/// Carries out a valid plan: each task's actions (several tasks at once), then the claims
/// a suspended or halted feature gives back and the wait shown on its tasks. The prompts'
/// inputs (parent and blocker Tasks, the feature's texts, its knowledge) are read only when
/// an attempt starts.
async fn apply_plan(
    feature: &Feature,
    ctx: &Context,
    gathered: &Gathered,
    plan: &FeaturePlan,
) -> Result<FeatureEvents, ReconcileError> {
    let starting = starts_attempts(plan);
    let siblings = match starting {
        true => prompt_siblings(plan, &gathered.tasks),
        false => BTreeMap::new(),
    };
    let texts = crate::controller::cache::texts::feature_texts(feature, ctx, starting)
        .await
        .map_err(TaskError::from)?;
    let knowledge = match starting {
        true => crate::controller::act::memory::feature_knowledge(feature, ctx)
            .await
            .map_err(TaskError::from)?,
        false => Vec::new(),
    };
    let scope = TaskScope {
        ctx,
        feature,
        siblings: &siblings,
        leases: &gathered.leases,
        texts: &texts,
        knowledge: &knowledge,
        now_ms: gathered.now_ms,
    };
    let (mut effects, first_error) = apply_tasks(&scope, plan).await;
    let precheck = gathered.precheck.clone();
    effects.misconfiguration =
        misconfiguration(feature, precheck, gathered.recorded.clone(), &effects);
    if let Some(error) = first_error {
        let (tasks, now_ms) = (&gathered.tasks, gathered.now_ms);
        write_status(feature, ctx, plan, tasks, &effects, now_ms).await?;
        return Err(error.into());
    }
    if feature.spec.suspend || gathered.start_limit == 0 {
        let namespace = feature.namespace().unwrap_or_default();
        let (leases, tasks) = (&gathered.leases, &gathered.tasks);
        release_claims(ctx, &namespace, leases, tasks, Some(&gathered.pods)).await?;
    }
    if let Some(problem) = &gathered.precheck {
        mark_waiting_tasks(ctx, feature, plan, problem, gathered.now_ms).await?;
    }
    report_misconfiguration(feature, ctx, effects.misconfiguration.as_ref()).await;
    Ok(effects)
}

/// Applies the actions of every task that has any (several at once); the tasks' effects
/// merged, and the first error.
async fn apply_tasks(
    scope: &TaskScope<'_>,
    plan: &FeaturePlan,
) -> (FeatureEvents, Option<TaskError>) {
    let applies: Vec<_> = plan
        .tasks
        .iter()
        .filter(|t| !t.actions.is_empty() || t.derived_phase.is_some())
        .map(|t| apply_task(scope, t))
        .collect();
    let outcomes: Vec<_> = futures::stream::iter(applies)
        .buffer_unordered(CONCURRENT_TASK_APPLIES)
        .collect()
        .await;
    let mut effects = FeatureEvents::default();
    let mut first_error = None;
    for (task_plan, result, task_effects) in outcomes {
        effects.merge(task_effects);
        if let Err(error) = result {
            tracing::warn!(task = %task_plan.task.name_any(), %error, "task actions failed");
            first_error.get_or_insert(error);
        }
    }
    (effects, first_error)
}

/// When to reconcile the feature again.
fn requeue_after(plan: &FeaturePlan, effects: &FeatureEvents, now_ms: i64) -> Requeue {
    match &effects.misconfiguration {
        // A created ServiceAccount triggers nothing here: look again soon.
        Some(p)
            if plan.invalid.is_none() && p.reason == conditions::REASON_MISSING_SERVICE_ACCOUNT =>
        {
            Requeue::requeue(SERVICE_ACCOUNT_RETRY)
        }
        Some(_) if plan.invalid.is_none() => Requeue::requeue(MISCONFIGURED_RETRY),
        // Slots are freed by other features' Leases going, which do not trigger this one.
        _ if effects.waiting_for_slot => Requeue::requeue(SLOT_RETRY),
        _ => requeue(plan, now_ms),
    }
}

fn caches_synced(ctx: &Context) -> bool {
    ctx.cache.filled.all()
}

/// The feature's Tasks as the API server has them now, trimmed as the cache trims them
/// (listed a page at a time: a namespace may hold 10,000 Tasks of other Features).
async fn live_tasks(
    ctx: &Context,
    namespace: &str,
    feature: &str,
) -> Result<Vec<Arc<CachedTask>>, ReconcileError> {
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), namespace);
    let mut params = ListParams::default().limit(crate::controller::cache::trim::LIST_PAGE);
    let mut tasks = Vec::new();
    loop {
        let page = bounded(
            ctx.api_timeout,
            format!("list Tasks in {namespace}"),
            api.list(&params),
        )
        .await?;
        tasks.extend(
            page.items
                .into_iter()
                .filter(|t| t.spec.feature_ref == feature)
                .map(|t| Arc::new(CachedTask::from(t))),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(tasks),
        }
    }
}

/// True when `plan` would turn the Feature Invalid or NoPlan now (a ruling worth a live read).
fn newly_invalid_or_empty(feature: &Feature, plan: &FeaturePlan) -> bool {
    let phase = feature.status.as_ref().map(|s| s.phase);
    (plan.invalid.is_some() && phase != Some(crate::api::FeaturePhase::Invalid))
        || (plan.outcome == Some(crate::engine::dag::FeatureOutcome::NoPlan)
            && phase != Some(crate::api::FeaturePhase::NoPlan))
}

fn was_invalid(feature: &Feature) -> bool {
    feature
        .status
        .as_ref()
        .is_some_and(|s| s.phase == crate::api::FeaturePhase::Invalid)
}

/// Shows a configuration problem on the tasks that would start now if it were fixed.
async fn mark_waiting_tasks(
    ctx: &Context,
    feature: &Feature,
    plan: &FeaturePlan,
    problem: &Problem,
    now_ms: i64,
) -> Result<(), ReconcileError> {
    let waiting = plan
        .tasks
        .iter()
        .filter(|t| t.view.ready && t.view.phase == TaskPhase::Pending)
        .take(usize::try_from(feature.spec.parallelism).unwrap_or(usize::MAX));
    for task_plan in waiting {
        if let Some(new) = status::misconfigured(&task_plan.task, problem, None, now_ms) {
            crate::controller::act::task_status::write_status(ctx, &task_plan.task, &new).await?;
        }
    }
    Ok(())
}

/// Gives back the feature's claims while it cannot run: every claim when the plan is
/// invalid (`pods` is `None`), otherwise those that back no attempt (claimed, never
/// started: no Running task records the holder, and no Pod of that name exists).
async fn release_claims(
    ctx: &Context,
    namespace: &str,
    leases: &BTreeMap<String, Arc<Lease>>,
    tasks: &[Arc<CachedTask>],
    pods: Option<&BTreeMap<String, Arc<CachedPod>>>,
) -> Result<(), ReconcileError> {
    let now = jiff::Timestamp::now();
    for (name, lease) in leases {
        let holder = crate::controller::plan::run_view::holder(lease).filter(|h| !h.is_empty());
        // An expired claim (e.g. the spent claim of a task finished long ago) is free already.
        if holder.is_none() || claim::is_expired(lease, now) {
            continue;
        }
        let task = tasks.iter().find(|t| t.name_any() == *name);
        let status = task.and_then(|t| t.status.as_ref());
        // A claim whose attempt's end is recorded holds nothing: it is left to expire.
        let spent = holder.is_some_and(|h| {
            status.is_some_and(|s| {
                crate::engine::lifecycle::is_spent(name, s.phase, s.attempt_count, h)
            })
        });
        let backs_attempt = |pods: &BTreeMap<String, Arc<CachedPod>>| {
            holder.is_some_and(|h| pods.contains_key(h))
                || status.is_some_and(|s| {
                    s.phase == TaskPhase::Running
                        && s.claim.as_ref().map(|c| c.holder.as_str()) == holder
                })
        };
        if spent || pods.is_some_and(backs_attempt) {
            continue;
        }
        Claims::new(ctx, namespace, name, Some(Lease::clone(lease)))
            .release()
            .await?;
    }
    Ok(())
}

/// Sets the tasks-by-phase gauges from the cache (all watched features); called
/// periodically, not per reconcile (it reads every cached Task).
pub(crate) fn count_tasks_by_phase(ctx: &Context) {
    let mut counts: Vec<(TaskPhase, i64)> = TaskPhase::ALL.map(|phase| (phase, 0)).to_vec();
    for task in ctx.cache.tasks.state() {
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

/// True when `plan` claims a task.
fn claims_any(plan: &FeaturePlan) -> bool {
    plan.tasks.iter().any(|t| {
        t.actions
            .iter()
            .any(|a| matches!(a, crate::engine::lifecycle::Action::Claim { .. }))
    })
}

/// Stops the agent Pods of a Feature whose plan turned invalid (their claims are released:
/// their results would not count).
async fn stop_pods(
    ctx: &Context,
    namespace: &str,
    pods: &BTreeMap<String, Arc<CachedPod>>,
) -> Result<(), ReconcileError> {
    let running = pods.iter().filter(|(_, pod)| {
        pod.metadata.deletion_timestamp.is_none()
            && !matches!(
                crate::controller::plan::run_view::run_view(Some(pod), true, None),
                crate::engine::lifecycle::RunView::Ended { .. }
            )
    });
    for (name, _) in running {
        task::delete_pod(ctx, namespace, name).await?;
    }
    Ok(())
}

/// The Tasks the prompts of the attempts `plan` starts read (each starting Task, its
/// parent and the tasks it depends on), by name: not every Task of a large Feature.
fn prompt_siblings(
    plan: &FeaturePlan,
    tasks: &[Arc<CachedTask>],
) -> BTreeMap<String, Arc<CachedTask>> {
    let read: rustc_hash::FxHashSet<&str> = plan
        .tasks
        .iter()
        .filter(|t| starts_attempt(t))
        .flat_map(|t| {
            let fields = &t.task.spec.fields;
            std::iter::once(t.view.name.as_str())
                .chain(fields.parent.as_deref())
                .chain(fields.depends_on.iter().map(String::as_str))
        })
        .collect();
    tasks
        .iter()
        .filter(|t| t.metadata.name.as_deref().is_some_and(|n| read.contains(n)))
        .filter_map(|t| Some((t.metadata.name.clone()?, Arc::clone(t))))
        .collect()
}

/// True when `plan` starts an attempt.
fn starts_attempts(plan: &FeaturePlan) -> bool {
    plan.tasks.iter().any(starts_attempt)
}

/// True when `task`'s plan starts an attempt.
fn starts_attempt(task: &decide::TaskPlan) -> bool {
    task.actions
        .iter()
        .any(|a| matches!(a, crate::engine::lifecycle::Action::StartAttempt { .. }))
}
