//! Carrying out one task's lifecycle actions against the API: claim, start (prompt
//! Pod carrying the prompt, status), ingest (status), cancel and delete. An attempt's
//! conclusion spends its claim: the Lease is left to expire, and the task's next claim takes
//! it over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::claim::lease_transitions;
use super::claims::{Claimed, Claims};
use super::error::TaskError;
use super::task_status::write_status;
use crate::api::{ClaimStatus, Feature, Task, TaskStatus};
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::decide::{TaskPlan, feature_key};
use crate::controller::plan::pod::{AttemptPod, attempt_pod};
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status::{self, FeatureEvents, Ingestion};
use crate::controller::runtime::context::Context;
use crate::engine::backoff::RetryBackoff;
use crate::engine::conclusion::{self, ConclusionPolicy, NextState, RecordedAttempt, TaskState};
use crate::engine::lifecycle::{Action, AttemptEnd, RunView, attempt_id};
use crate::engine::policy::{AttemptOutcome, EventKind, FeatureEffect};
use crate::engine::prompt::{self, CompletedBlocker, FeatureText, PromptInput, TaskText};
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::WorkspaceReport;

/// Everything a task's actions need besides the plan.
pub struct TaskScope<'a> {
    /// Shared controller state.
    pub ctx: &'a Context,
    /// The task's Feature.
    pub feature: &'a Feature,
    /// All Tasks of the feature, by name (for prompts: parent and blockers).
    pub siblings: &'a BTreeMap<String, Arc<Task>>,
    /// Claim Leases by name.
    pub leases: &'a BTreeMap<String, Arc<Lease>>,
    /// The feature's spec and plan texts, resolved once per reconcile when needed.
    pub texts: &'a FeatureText,
    /// The feature's knowledge (seeded and learned), read when an attempt starts.
    pub knowledge: &'a [crate::engine::memory::KnowledgeEntry],
    /// The current time, Unix ms.
    pub now_ms: i64,
}

/// Applies `plan`'s actions in order; stops early (without error) when a claim is lost
/// to someone else. Feature-level effects (a promised FAILURE) go into `effects`.
pub async fn apply(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    effects: &mut FeatureEvents,
) -> Result<(), TaskError> {
    let task = &plan.task;
    let name = task.name_any();
    let namespace = task
        .namespace()
        .ok_or_else(|| malformed(&name, "no namespace"))?;
    let ctx = scope.ctx;
    let held = scope.leases.get(&name).map(|l| Lease::clone(l));
    let mut claims = Claims::new(ctx, &namespace, &name, held);
    let mut status_written = false;
    for action in &plan.actions {
        match action {
            Action::Claim { attempt, replace } => {
                let claimed = claims
                    .claim(scope.feature, plan, *attempt, *replace, scope.now_ms)
                    .await?;
                match claimed {
                    Claimed::Held => {}
                    Claimed::NoSlot => {
                        effects.waiting_for_slot = true;
                        return Ok(());
                    }
                    Claimed::Lost => return Ok(()),
                }
            }
            Action::StartAttempt { attempt } => {
                match start(scope, plan, *attempt, claims.held()).await {
                    Ok(()) => effects.started = true,
                    Err(TaskError::PodRejected { pod, source }) => {
                        let problem = pod_rejected(&namespace, &pod, &source, scope);
                        reject_attempt(scope, plan, &claims, &problem).await?;
                        effects.pod_rejected = Some(problem);
                        return Ok(());
                    }
                    Err(error) => return Err(error),
                }
                status_written = true;
            }
            Action::Cancel => {
                if let Some(number) = plan.view.attempt.as_ref().map(|a| a.number) {
                    delete_pod(ctx, &namespace, &attempt_id(&name, number)).await?;
                }
            }
            Action::Ingest(end) => {
                let end = match confirm_end(&claims, plan, end, &namespace, ctx).await? {
                    Confirmed::CacheBehind => return Ok(()),
                    Confirmed::As(end) => end,
                };
                let fenced = claims.fenced_off(plan, &end);
                ingest(scope, plan, fenced.as_ref().unwrap_or(&end), effects).await?;
                status_written = true;
            }
            // A finished Pod stays for `kubectl logs`; the retention sweep deletes it.
            Action::DeleteRun
                if matches!(plan.run, RunView::Ended { .. })
                    && !crate::controller::plan::pod_start::is_start_failure(&plan.run) => {}
            Action::DeleteRun => {
                if let Some(number) = plan.view.attempt.as_ref().map(|a| a.number) {
                    delete_pod(ctx, &namespace, &attempt_id(&name, number)).await?;
                }
            }
            Action::RenewClaim => {
                status_written |= keep_waiting_claim(scope, plan, &claims).await?;
            }
            Action::RequeueAt(_) => {}
        }
    }
    show_on_task(scope, plan, status_written, effects).await
}

/// When no action wrote the Task's status: shows its run started, or its Pod waiting with
/// a start problem (or past one), or else the phase the DAG derived.
async fn show_on_task(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    mut status_written: bool,
    effects: &mut FeatureEvents,
) -> Result<(), TaskError> {
    let (ctx, task) = (scope.ctx, &plan.task);
    if !status_written
        && plan.run == RunView::Running
        && let Some(new) = crate::controller::plan::pod_wait::shown_started(task, scope.now_ms)
    {
        write_status(ctx, task, &new).await?;
        status_written = true;
    }
    if !status_written {
        let (waiting, written) =
            crate::controller::act::pod_start::show_waiting(ctx, plan, scope.now_ms).await?;
        effects.pod_start = waiting;
        status_written = written;
    }
    if let (Some(phase), false) = (plan.derived_phase, status_written) {
        write_status(ctx, task, &status::with_phase(task, phase)).await?;
    }
    Ok(())
}

/// How long a task whose agent Pod was refused waits before it is tried again.
const POD_REJECTED_RETRY_MS: i64 = 30_000;

/// The problem a refused agent Pod shows the user.
fn pod_rejected(namespace: &str, pod: &str, source: &CallError, scope: &TaskScope<'_>) -> Problem {
    let account = &scope.ctx.pod_settings.service_account;
    let fix = match source.status_code() {
        Some(403) => format!(
            "check that ServiceAccount {namespace}/{account} exists (the chart's agent RBAC \
             creates it) and that no admission policy forbids the Pod"
        ),
        _ => format!(
            "fix the Feature's spec.agent or spec.podTemplate of Feature {namespace}/{}",
            scope.feature.name_any()
        ),
    };
    Problem {
        reason: crate::api::conditions::REASON_POD_REJECTED,
        message: format!("the API server refused agent Pod {namespace}/{pod}: {source}; {fix}"),
    }
}

/// After a refused Pod: gives the claim back (no claim is held while no Pod can exist) and
/// records the problem on the Task, which waits before it is tried again. No retry is charged.
async fn reject_attempt(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    claims: &Claims<'_>,
    problem: &Problem,
) -> Result<(), TaskError> {
    claims.release().await?;
    let retry_after = scope.now_ms + POD_REJECTED_RETRY_MS;
    if let Some(new) = status::misconfigured(&plan.task, problem, Some(retry_after), scope.now_ms) {
        write_status(scope.ctx, &plan.task, &new).await?;
    }
    Ok(())
}

/// Renews the claim of an attempt whose Pod waits to start (nothing in the Pod renews it
/// yet), and shows the wait on the Task. A claim changed meanwhile is left to the next
/// reconcile. Returns whether the Task's status was written.
async fn keep_waiting_claim(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    claims: &Claims<'_>,
) -> Result<bool, TaskError> {
    let Some(number) = plan.view.attempt.as_ref().map(|a| a.number) else {
        return Ok(false);
    };
    let id = attempt_id(&plan.view.name, number);
    let now = crate::controller::plan::time::time(scope.now_ms).0;
    if !claims.renew(&id, now).await? {
        return Ok(false);
    }
    let RunView::Pending(waiting) = &plan.run else {
        return Ok(false);
    };
    match crate::controller::plan::pod_wait::shown_waiting(&plan.task, &id, waiting, scope.now_ms) {
        Some(new) => {
            write_status(scope.ctx, &plan.task, &new).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// How an attempt end read from the caches stands after a live read.
enum Confirmed {
    /// The caches are behind: the claim is still held, or the Pod still exists.
    CacheBehind,
    /// Ingest this end (the cached one, or the result a live Pod reports).
    As(AttemptEnd),
}

/// A lost claim or a vanished run is destructive to act on, and the caches of Tasks,
/// Leases and Pods are filled by separate watches: confirm with live reads before ingesting
/// such an end. A claim is ruled lost only after reading the Pod: a Pod that finished with
/// the runner's result while it held the claim (e.g. the Lease expired during an API outage
/// that kept the sidecar from renewing) is ingested with that result.
async fn confirm_end(
    claims: &Claims<'_>,
    plan: &TaskPlan,
    end: &AttemptEnd,
    namespace: &str,
    ctx: &Context,
) -> Result<Confirmed, TaskError> {
    let Some(number) = plan.view.attempt.as_ref().map(|a| a.number) else {
        return Ok(Confirmed::As(end.clone()));
    };
    let id = attempt_id(&plan.view.name, number);
    let live_pod = || async {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
        bounded(
            ctx.api_timeout,
            format!("get Pod {namespace}/{id}"),
            pods.get_opt(&id),
        )
        .await
    };
    match end {
        AttemptEnd::ClaimLost { .. } => {
            if claims.is_still_held(&plan.view.name, &id).await? {
                return Ok(Confirmed::CacheBehind);
            }
            let pod = live_pod().await?;
            let now_ms = crate::clock::now_ms();
            if let Some(result) = pod
                .as_ref()
                .and_then(|p| crate::controller::plan::pod_start::never_started(p, now_ms))
            {
                return Ok(Confirmed::As(AttemptEnd::Reported(Box::new(result))));
            }
            Ok(
                match crate::controller::plan::run_view::run_view(pod.as_ref(), true, None) {
                    crate::engine::lifecycle::RunView::Ended {
                        result: Some(result),
                        ..
                    } => Confirmed::As(AttemptEnd::Reported(result)),
                    _ => Confirmed::As(end.clone()),
                },
            )
        }
        AttemptEnd::NoResult { .. } if plan.run == crate::engine::lifecycle::RunView::Missing => {
            Ok(if live_pod().await?.is_some() {
                Confirmed::CacheBehind
            } else {
                Confirmed::As(end.clone())
            })
        }
        _ => Ok(Confirmed::As(end.clone())),
    }
}

fn malformed(task: &str, problem: &'static str) -> TaskError {
    TaskError::Malformed {
        task: task.to_owned(),
        problem,
    }
}

/// Creates the attempt's Pod (idempotent; the prompt is in it), then records it started.
async fn start(
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
        .ok_or_else(|| malformed(&name, "no namespace"))?;
    let feature_name = scope.feature.name_any();
    let id = attempt_id(&name, attempt);
    let owner = task
        .controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or_else(|| malformed(&name, "no uid (not read from the API server)"))?;
    let kind = crate::controller::plan::verify::next_attempt_kind(scope.feature, task);
    let planning = super::planning::is_planning(scope.feature, plan);
    let prompt = if planning {
        super::planning::prompt(scope, plan)
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
    if planning {
        let answer = crate::api::planning::answer_config_map_name(&id);
        crate::controller::plan::pod_planning::add_answer_upload(&mut pod, &answer);
    }
    create_attempt_pod(ctx, &namespace, &id, &pod).await?;
    record_started(scope, plan, attempt, lease, kind, choice).await
}

/// Records on the Task that the attempt started (its claim with the fencing token, its
/// kind and its agent), and warns of a model hint the pool refused.
async fn record_started(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    attempt: u32,
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
    let mut started = status::started(task, attempt, &id, claim, scope.now_ms);
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
async fn prompt_of(
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
fn spent_by(
    scope: &TaskScope<'_>,
    namespace: &str,
) -> (Vec<Arc<Task>>, BTreeMap<String, Arc<Pod>>) {
    let ctx = scope.ctx;
    let key = feature_key(namespace, &scope.feature.name_any());
    let pods = ctx.cache.indexes.pods.objects(&ctx.cache.pods, &key);
    let pods = pods
        .into_iter()
        .filter_map(|pod| pod.metadata.name.clone().map(|name| (name, pod)))
        .collect();
    (scope.siblings.values().cloned().collect(), pods)
}

/// Creates the attempt's Pod; one the API server refuses (403, 422) is
/// [`TaskError::PodRejected`].
async fn create_attempt_pod(
    ctx: &Context,
    namespace: &str,
    id: &str,
    pod: &Pod,
) -> Result<(), TaskError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    create_idempotent(ctx.api_timeout, &pods, id, pod)
        .await
        .map_err(|source| match source.status_code() {
            Some(403 | 422) => TaskError::PodRejected {
                pod: id.to_owned(),
                source,
            },
            _ => source.into(),
        })?;
    Ok(())
}

/// Creates `object`, or returns the existing one of that name (a repeated start).
async fn create_idempotent<K>(
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
fn render_prompt(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    kind: AttemptKind,
    descriptions: &BTreeMap<String, String>,
) -> String {
    let task = &plan.task;
    let fields = &task.spec.fields;
    let text = |t: &Task, id: String| TaskText {
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
        feature: scope.texts.clone(),
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

/// The Feature's retry settings with the Task's own retry limit, if it sets one.
fn retry_policy(feature: &Feature, task: &Task) -> RetryBackoff {
    feature
        .spec
        .retry
        .backoff()
        .for_task(task.spec.fields.max_retries)
}

/// The task's next state after `end`: the engine's one conclusion, with the Feature's retry
/// settings and the Task's attempt history. Pure; `jitter` is uniform in `[0, 1)`.
pub fn conclude(
    feature: &Feature,
    task: &Task,
    task_id: &str,
    end: &AttemptEnd,
    now_ms: i64,
    jitter: f64,
) -> NextState {
    conclude_in_workspace(feature, task, task_id, end, None, now_ms, jitter)
}

/// [`conclude`] with what the attempt's git steps reported.
pub fn conclude_in_workspace(
    feature: &Feature,
    task: &Task,
    task_id: &str,
    end: &AttemptEnd,
    workspace: Option<&WorkspaceReport>,
    now_ms: i64,
    jitter: f64,
) -> NextState {
    let status = task.status.clone().unwrap_or_default();
    let state = TaskState::from_history(
        task_id,
        status.retry_count,
        feature.spec.verify.verification(),
        status.attempt_count,
        status.attempts.iter().map(|a| RecordedAttempt {
            number: a.number,
            kind: a.kind,
            outcome: a.outcome,
        }),
    );
    let policy = ConclusionPolicy::with_retry(retry_policy(feature, task));
    conclusion::conclude(end, workspace, &state, &policy, now_ms, jitter)
}

/// Records how the attempt ended, as the outcome policy judges it.
async fn ingest(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    end: &AttemptEnd,
    effects: &mut FeatureEvents,
) -> Result<(), TaskError> {
    let ctx = scope.ctx;
    let task = &plan.task;
    let status = task.status.clone().unwrap_or_default();
    observe_claim_to_pod(ctx, task, &status);
    let workspace = finish_report_of(ctx, task);
    let next = conclude_in_workspace(
        scope.feature,
        task,
        &plan.task_id,
        end,
        workspace.as_ref(),
        scope.now_ms,
        rand::random::<f64>(),
    );
    let planning = super::planning::is_planning(scope.feature, plan);
    let next = if planning {
        // None: the claim-keeper may still upload the answer.
        let Some(next) = super::planning::conclude(scope, plan, end, next).await? else {
            return Ok(());
        };
        next
    } else {
        next
    };
    if let Some(rest) = &next.agent_rest {
        record_rest(scope, plan, rest).await?;
    }
    let decision = &next.decision;
    let result = match end {
        AttemptEnd::Reported(result) => Some(result.as_ref()),
        _ => None,
    };
    let mut new_status = status::ingested(
        task,
        &Ingestion {
            decision,
            result,
            next_attempt_after_ms: next.next_attempt_after_ms,
            now_ms: scope.now_ms,
        },
    );
    crate::controller::plan::verify::record_end(
        &mut new_status,
        scope.feature,
        decision,
        task.metadata.generation,
        scope.now_ms,
    );
    if let Some(result) = result {
        let attempt = attempt_id(&task.name_any(), status.attempt_count);
        super::memory::keep_knowledge(ctx, scope.feature, task, result, &attempt, scope.now_ms)
            .await?;
    }
    crate::controller::plan::git::record_report(&mut new_status, workspace);
    crate::controller::plan::pod_start::record_on_task(
        &mut new_status,
        result,
        task.metadata.generation,
        scope.now_ms,
    );
    write_status(ctx, task, &new_status).await?;
    if planning {
        super::planning::forget_answer(scope, plan).await?;
    }
    report_decision(ctx, task, decision, result, effects).await;
    Ok(())
}

/// Records an exhausted agent's rest for the namespace.
async fn record_rest(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    rest: &crate::engine::conclusion::AgentRest,
) -> Result<(), TaskError> {
    let (ctx, task) = (scope.ctx, &plan.task);
    let (identity, agent) =
        crate::controller::plan::selection::exhausted_agent(scope.feature, task);
    let namespace = task.namespace().unwrap_or_default();
    let report = super::rests::RestReport {
        identity: &identity,
        rest,
        reported_by: format!(
            "agent {agent} of Feature {}, task {}",
            scope.feature.name_any(),
            plan.task_id
        ),
    };
    ctx.rests
        .rest(
            &ctx.client,
            ctx.api_timeout,
            &namespace,
            &report,
            scope.now_ms,
        )
        .await?;
    Ok(())
}

/// Passes the decision's feature effect on, counts it, and records its Event.
async fn report_decision(
    ctx: &Context,
    task: &Task,
    decision: &crate::engine::policy::Decision,
    result: Option<&crate::engine::attempt::AttemptResult>,
    effects: &mut FeatureEvents,
) {
    match &decision.feature {
        FeatureEffect::Stop { reason } => effects.stop_reason = Some(reason.clone()),
        FeatureEffect::Halt { reason } => {
            effects.halt = Some(Problem {
                reason: result
                    .and_then(crate::controller::plan::pod_start::problem_reason)
                    .unwrap_or(crate::api::conditions::REASON_AGENT_MISCONFIGURED),
                message: reason.clone(),
            })
        }
        FeatureEffect::None => {}
    }
    ctx.metrics.attempt_ended(decision.outcome.as_str());
    // A done task is in its status and the Feature's counts; one Normal Event per finished
    // task would be most of the operator's writes. Every other outcome gets its Event.
    // A Pod that could not start had its Warning when the Task first showed the problem.
    let shown = result
        .is_some_and(|r| crate::controller::plan::pod_start::problem_reason(r).is_some())
        && crate::controller::plan::pod_start::shown_on(task.status.as_ref());
    if !(shown
        || (decision.outcome == AttemptOutcome::Done && decision.event.kind == EventKind::Normal))
    {
        ctx.events
            .decision(&task.object_ref(&()), &decision.event)
            .await;
    }
}

/// Records `ralph_claim_to_pod_seconds` once per attempt (when it ends): from taking the
/// claim to the agent container starting (or the kubelet acknowledging the Pod).
fn observe_claim_to_pod(ctx: &Context, task: &Task, status: &TaskStatus) {
    let Some(claim) = status.claim.as_ref() else {
        return;
    };
    let Some(acquired) = claim.acquired_at.as_ref() else {
        return;
    };
    let namespace = task.namespace().unwrap_or_default();
    let pod = ctx
        .cache
        .pods
        .get(&kube::runtime::reflector::ObjectRef::new(&claim.holder).within(&namespace));
    let started = pod
        .as_ref()
        .and_then(|pod| crate::controller::plan::run_view::started_at(pod));
    if let Some(started) = started {
        let seconds = started.duration_since(acquired.0).as_secs_f64().max(0.0);
        ctx.metrics.claim_to_pod_seconds.observe(seconds);
    }
}

/// Deletes an agent Pod (gracefully: the runner gets SIGTERM and reports `cancelled`).
pub(crate) async fn delete_pod(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<(), CallError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let deleted = bounded(
        ctx.api_timeout,
        format!("delete Pod {namespace}/{name}"),
        pods.delete(name, &DeleteParams::default()),
    )
    .await;
    match deleted {
        Err(error) if error.is_not_found() => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The finishing step's report of the task's current attempt, from the Pod cache.
fn finish_report_of(ctx: &Context, task: &Task) -> Option<WorkspaceReport> {
    let pod_name = task.status.as_ref()?.attempts.last()?.pod.clone()?;
    let namespace = task.namespace()?;
    let pod = ctx
        .cache
        .pods
        .get(&ObjectRef::new(&pod_name).within(&namespace))?;
    crate::controller::plan::pod_git::finish_report(&pod)
}
