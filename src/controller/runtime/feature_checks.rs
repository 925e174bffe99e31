//! What keeps a Feature's attempts from starting: the problems its spec alone shows, the
//! missing agent ServiceAccount, the start limit they set, the problem its status shows
//! after a reconcile, and the one Warning Event when that problem appears.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::api::{Feature, conditions};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::pod::{AttemptPod, PodError, attempt_pod};
use crate::controller::plan::problem::Problem;
use crate::controller::plan::status::FeatureEvents;
use crate::engine::verification::AttemptKind;

/// How many attempts may be claimed in this reconcile: none while the configuration keeps
/// any Pod from existing; one to probe whether a refused Pod's cause was fixed, once the
/// refused task's wait is over.
pub(super) fn start_limit(
    precheck: Option<&Problem>,
    recorded: Option<&Problem>,
    tasks: &[Arc<CachedTask>],
    now_ms: i64,
) -> usize {
    match (precheck, recorded) {
        (Some(_), _) => 0,
        (None, Some(problem))
            if crate::controller::plan::pod_start::halts_until_spec_changes(problem.reason) =>
        {
            0
        }
        (None, Some(_)) => {
            let waiting = tasks.iter().filter_map(|t| t.status.as_ref()).any(|s| {
                conditions::find(&s.conditions, conditions::CONFIGURED)
                    .is_some_and(|c| c.status == conditions::STATUS_FALSE)
                    && s.next_attempt_after
                        .as_ref()
                        .is_some_and(|at| at.0.as_millisecond() > now_ms)
            });
            usize::from(!waiting)
        }
        (None, None) => usize::MAX,
    }
}

/// A configuration problem the Feature's spec alone shows: no Pod can be built from it, or
/// it asks for something this controller cannot do yet.
pub(super) fn configuration_problem(feature: &Feature, ctx: &Context) -> Option<Problem> {
    let namespace = feature.namespace().unwrap_or_default();
    let name = feature.name_any();
    if let Some(problem) = crate::controller::plan::budget::invalid_budget(feature) {
        return Some(problem);
    }
    if let Some(problem) = crate::controller::plan::verify::verify_problem(feature) {
        return Some(problem);
    }
    let probe = AttemptPod {
        namespace: &namespace,
        task: "probe",
        task_id: "probe",
        feature: &name,
        attempt_id: "probe-a1",
        prompt: "",
        owner: OwnerReference::default(),
        agent: &feature.spec.agent,
        model: None,
        overrides: feature.spec.pod_template.as_ref(),
        kind: AttemptKind::Work,
        verify: &feature.spec.verify,
        lease_duration_seconds: feature.spec.lease_duration_seconds,
    };
    let Some(error) = attempt_pod(&probe, &ctx.pod_settings).err() else {
        return crate::controller::plan::selection::fallback_problem(feature);
    };
    let (reason, fix) = match error {
        PodError::NoAgentImage { .. } => (
            conditions::REASON_MISSING_AGENT_IMAGE,
            "set spec.agent.image to an image that contains the agent CLI",
        ),
        PodError::NoAgentCommand { .. } => (
            conditions::REASON_MISSING_AGENT_COMMAND,
            "set spec.agent.command to the agent's ACP command",
        ),
    };
    Some(Problem {
        reason,
        message: format!("{error}: {fix}; no attempt starts until it is fixed"),
    })
}

/// The configuration problem the Feature shows after this reconcile.
pub(super) fn misconfiguration(
    feature: &Feature,
    precheck: Option<Problem>,
    recorded: Option<Problem>,
    effects: &FeatureEvents,
) -> Option<Problem> {
    let halted = effects.halt.as_ref().map(|halt| Problem {
        reason: halt.reason,
        message: format!(
            "the agent of Feature {}/{} is misconfigured: {}; fix spec.agent (image, \
             command, credentials); no attempt starts until the Feature's spec changes",
            feature.namespace().unwrap_or_default(),
            feature.name_any(),
            halt.message
        ),
    });
    let still_recorded = recorded.filter(|p| {
        !(crate::controller::plan::status::POD_REFUSED_REASONS.contains(&p.reason)
            && effects.started)
    });
    precheck
        .or(halted)
        .or_else(|| effects.pod_rejected.clone())
        .or(still_recorded)
        .or_else(|| effects.pod_start.clone())
}

/// One Warning Event when the Feature's configuration problem appears or changes (not one
/// per retry). An agent that reported itself misconfigured has its Warning on the Task
/// already (the outcome policy's event).
pub(super) async fn report_misconfiguration(
    feature: &Feature,
    ctx: &Context,
    problem: Option<&Problem>,
) {
    let Some(problem) =
        problem.filter(|p| !crate::controller::plan::pod_start::halts_until_spec_changes(p.reason))
    else {
        return;
    };
    let shown = feature
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, conditions::CONFIGURED))
        .is_some_and(|c| c.status == conditions::STATUS_FALSE && c.reason == problem.reason);
    if !shown {
        warn_of(ctx, feature, problem).await;
    }
}

/// A Warning event on `feature` that shows `problem`.
pub(super) async fn warn_of(ctx: &Context, feature: &Feature, problem: &Problem) {
    ctx.events
        .warning(
            &feature.object_ref(&()),
            problem.reason,
            problem.message.clone(),
        )
        .await;
}

/// The problem when the ServiceAccount the Feature's agent Pods run as does not exist.
pub(super) async fn missing_service_account(feature: &Feature, ctx: &Context) -> Option<Problem> {
    let account = feature
        .spec
        .pod_template
        .as_ref()
        .and_then(|t| t.service_account_name.as_deref())
        .unwrap_or(&ctx.pod_settings.service_account);
    let namespace = feature.namespace().unwrap_or_default();
    ctx.preflight
        .service_account(&ctx.client, ctx.api_timeout, &namespace, account)
        .await
}
