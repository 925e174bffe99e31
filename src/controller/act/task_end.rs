//! Ingesting an attempt that ended: its conclusion (the engine's, with the Feature's retry
//! policy), the Task's status, an exhausted agent's rest and the decision's Events.

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::error::TaskError;
use super::scope::TaskScope;
use super::task_status::write_status;
use crate::api::Feature;
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status::{self, FeatureEvents, Ingestion};
use crate::controller::runtime::context::Context;
use crate::engine::backoff::RetryBackoff;
use crate::engine::conclusion::{self, ConclusionPolicy, NextState, RecordedAttempt, TaskState};
use crate::engine::lifecycle::{AttemptEnd, attempt_id};
use crate::engine::policy::{AttemptOutcome, EventKind, FeatureEffect};
use crate::engine::workspace::WorkspaceReport;

/// The Feature's retry settings with the Task's own retry limit, if it sets one.
pub(super) fn retry_policy(feature: &Feature, task: &CachedTask) -> RetryBackoff {
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
    task: &CachedTask,
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
    task: &CachedTask,
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
pub(super) async fn ingest(
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
    if let AttemptEnd::Reported(result) = end
        && next.decision.outcome == AttemptOutcome::Done
        && !super::proposals::keep(scope, plan, result).await?
    {
        // The claim-keeper may still upload the proposal.
        return Ok(());
    }
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
pub(super) async fn record_rest(
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
pub(super) async fn report_decision(
    ctx: &Context,
    task: &CachedTask,
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

/// The finishing step's report of the task's current attempt, from the Pod cache.
pub(super) fn finish_report_of(ctx: &Context, task: &CachedTask) -> Option<WorkspaceReport> {
    let pod_name = task.status.as_ref()?.attempts.last()?.pod.clone()?;
    let namespace = task.namespace()?;
    let pod = ctx
        .cache
        .pods
        .get(&ObjectRef::new(&pod_name).within(&namespace))?;
    crate::controller::plan::pod_git::finish_report(&pod)
}

/// Records `ralph_claim_to_pod_seconds` once per attempt (when it ends): from taking the
/// claim to the agent container starting (or the kubelet acknowledging the Pod).
fn observe_claim_to_pod(ctx: &Context, task: &CachedTask, status: &crate::api::TaskStatus) {
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
