//! The Task status writes of agent Pods that cannot start, as
//! [`crate::controller::plan::pod_start`] rules them.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::task_status::write_status;
use crate::api::{Feature, conditions};
use crate::controller::client::call::CallError;
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::pod_start::{
    as_shown, halt_on, shown_on, shown_within_grace, started, waiting_problem,
};
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status;
use crate::controller::runtime::context::Context;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::{RunView, attempt_id};

/// Once the Feature's spec changed since its status was last written (the user's fix),
/// sets `Configured=True` on the Tasks that show a halt ([`halt_shown_by_tasks`]), so the next
/// attempt may start; returns the Tasks as they are now.
pub(crate) async fn clear_on_spec_change(
    ctx: &Context,
    feature: &Feature,
    tasks: Vec<Arc<CachedTask>>,
    now_ms: i64,
) -> Result<Vec<Arc<CachedTask>>, CallError> {
    let generation = feature.metadata.generation;
    let observed = feature.status.as_ref().and_then(|s| s.observed_generation);
    if observed.is_none() || observed >= generation {
        return Ok(tasks);
    }
    let mut now = Vec::with_capacity(tasks.len());
    for task in tasks {
        if halt_on(&task).is_none() {
            now.push(task);
            continue;
        }
        let mut status = task.status.clone().unwrap_or_default();
        let message = format!(
            "Feature {}/{} changed (generation {}): the next attempt may start",
            feature.namespace().unwrap_or_default(),
            feature.name_any(),
            generation.unwrap_or_default()
        );
        let condition = conditions::condition(
            conditions::CONFIGURED,
            conditions::STATUS_TRUE,
            "SpecChanged",
            message,
            task.metadata.generation,
            crate::controller::plan::time::time(now_ms),
        );
        conditions::set_condition(&mut status.conditions, condition);
        write_status(ctx, &task, &status).await?;
        now.push(ctx.cache.task_writes.newest(task));
    }
    Ok(now)
}

/// Shows on the Task a start problem of its running attempt's Pod that is still within its
/// grace (`Configured=False` with the kubelet's reason, and one Warning Event when it
/// appears), or clears one its Pod got past. Returns the problem (for the Feature's
/// condition) and whether the Task's status was written.
pub(crate) async fn show_waiting(
    ctx: &Context,
    plan: &TaskPlan,
    now_ms: i64,
) -> Result<(Option<Problem>, bool), CallError> {
    let task = &plan.task;
    let attempt = plan.view.attempt.as_ref().map(|a| a.number);
    let (Some(number), TaskPhase::Running) = (attempt, plan.view.phase) else {
        return Ok((None, false));
    };
    let namespace = task.namespace().unwrap_or_default();
    let id = attempt_id(&task.name_any(), number);
    let pod = ctx.cache.pods.get(&ObjectRef::new(&id).within(&namespace));
    let status = task.status.as_ref();
    let problem = pod
        .as_deref()
        .and_then(|p| waiting_problem(p, now_ms))
        .map(|problem| as_shown(status, problem));
    let new = match &problem {
        Some(problem) => {
            let first = !shown_on(status);
            let new = status::misconfigured(task, problem, None, now_ms);
            if new.is_some() && first {
                let regarding = task.object_ref(&());
                let message = problem.message.clone();
                ctx.events
                    .warning(&regarding, problem.reason, message)
                    .await;
            }
            new
        }
        None if shown_within_grace(status) && plan.run == RunView::Running => {
            let mut new = status.cloned().unwrap_or_default();
            let condition = started(task.metadata.generation, now_ms);
            conditions::set_condition(&mut new.conditions, condition);
            Some(new)
        }
        None => None,
    };
    let written = match new {
        Some(new) => {
            write_status(ctx, task, &new).await?;
            true
        }
        None => false,
    };
    Ok((problem, written))
}
