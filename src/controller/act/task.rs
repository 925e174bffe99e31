//! Carrying out one task's lifecycle actions against the API: claim, start (`task_start.rs`:
//! the prompt, the Pod, the status), ingest (`task_end.rs`: the conclusion, the status),
//! cancel and delete. An attempt's conclusion spends its claim: the Lease is left to
//! expire, and the task's next claim takes it over.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use super::claims::{Claimed, Claims};
use super::error::TaskError;
pub use super::scope::TaskScope;
use super::task_end::ingest;
pub use super::task_end::{conclude, conclude_in_workspace};
use super::task_start::start;
use super::task_status::write_status;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status::{self, FeatureEvents};
use crate::controller::runtime::context::Context;
use crate::engine::lifecycle::{Action, AttemptEnd, RunView, attempt_id};

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
        .ok_or_else(|| TaskError::malformed(&name, "no namespace"))?;
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
                    Err(error) => {
                        let Some(problem) = refused(&namespace, &error, scope) else {
                            return Err(error);
                        };
                        reject_attempt(scope, plan, &claims, &problem).await?;
                        effects.pod_rejected = Some(problem);
                        return Ok(());
                    }
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

/// The problem an agent Pod that cannot exist shows the user: one the API server refused,
/// or one whose prompt it would refuse; `None` for any other failure.
fn refused(namespace: &str, error: &TaskError, scope: &TaskScope<'_>) -> Option<Problem> {
    match error {
        TaskError::PodRejected { pod, source } => Some(pod_rejected(namespace, pod, source, scope)),
        TaskError::PromptTooLarge { pod, bytes } => Some(Problem {
            reason: crate::api::conditions::REASON_PROMPT_TOO_LARGE,
            message: format!(
                "the prompt of attempt {pod} is {} KiB, and a ConfigMap, which carries a \
                 prompt too large for the Pod's annotations, holds at most {} KiB; shorten \
                 the texts every prompt carries (the Feature's spec.context.spec and \
                 spec.context.plan) or the task's description",
                bytes.div_ceil(1024),
                crate::controller::plan::pod_prompt::MAX_DATA_BYTES / 1024,
            ),
        }),
        _ => None,
    }
}

/// The problem a Pod the API server refused shows the user.
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
            let pod = live_pod()
                .await?
                .map(crate::controller::plan::cached::CachedPod::from);
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
