//! Agent Pods that cannot start (pure): a container the kubelet keeps `waiting` for a
//! reason only the user can fix (an image that cannot be pulled, a Secret or ConfigMap the
//! Pod references that is missing). Such a Pod would stay Pending until its claim expired,
//! and every retry would do the same; instead its attempt ends as `misconfigured` (the
//! outcome policy's path for configuration errors: no retry charged, the Feature halts
//! until its spec changes), with a result that names the Pod, the container, the image,
//! the kubelet's own reason and message, and the fix.
//!
//! When it ends: at once for a reason that cannot clear by itself (`InvalidImageName`,
//! `ErrImageNeverPull`); after [`START_GRACE_MS`] from the Pod's creation for the others
//! (the kubelet retries a pull and re-reads a Secret by itself, so a registry hiccup or a
//! Secret created a moment later recovers); and in any case when the claim expires first
//! (the live read of the Pod before ruling a claim lost). Within the grace the Task and its
//! Feature already show the problem (`Configured=False` with the kubelet's reason, one
//! Warning Event on the Task); the Pod getting past it clears it. The halt is kept on the
//! Task too ([`halt_shown_by_tasks`]) and lifted when the Feature's spec changes
//! (`clear_on_spec_change` in `act::pod_start`, which writes the Task
//! statuses this module decides on).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
};

use super::pod::{AGENT_CONTAINER, FEATURE_LABEL, TASK_LABEL};
use super::problem::Problem;

use crate::api::{TaskStatus, conditions};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::engine::attempt::{AttemptResult, Misconfiguration, OutcomeClass};
use crate::engine::lifecycle::RunView;
use crate::engine::policy::{AttemptOutcome, cut_chars};

/// How long after its Pod was created a container may wait for a reason that can clear by
/// itself before the attempt is ruled misconfigured: the kubelet retries a failed pull
/// after 10 s, 20 s, 40 s, so a short registry outage or a Secret created late recovers.
pub const START_GRACE_MS: i64 = 60_000;

/// The longest kubelet message a problem quotes (a pull error can be long; the runner's
/// result and the condition message are bounded).
const MAX_KUBELET_MESSAGE_CHARS: usize = 240;

/// What a container's waiting reason means for its Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFailure {
    /// The image cannot be pulled or looked up.
    Image {
        /// True when the kubelet will not succeed by retrying (the spec must change).
        permanent: bool,
    },
    /// The container cannot be created from its spec (a referenced Secret, ConfigMap or
    /// key is missing; the runtime refused the container).
    Config,
    /// The container runtime could not start the container (e.g. a volume mount onto a
    /// path that is a file in the image): it never ran, and will not with this spec.
    Runtime,
}

impl StartFailure {
    /// How long the kubelet may keep trying before the attempt is ruled misconfigured, ms.
    pub fn grace_ms(self) -> i64 {
        match self {
            StartFailure::Image { permanent: true } | StartFailure::Runtime => 0,
            StartFailure::Image { permanent: false } | StartFailure::Config => START_GRACE_MS,
        }
    }
}

/// The kubelet's reasons that keep a container from ever starting (waiting reasons, and
/// the terminated reasons of [`NEVER_RAN`]), and what each means. Anything else
/// (`ContainerCreating`, `PodInitializing`, `CrashLoopBackOff` ...) is no start problem.
const REASONS: [(&str, StartFailure); 11] = [
    ("InvalidImageName", StartFailure::Image { permanent: true }),
    ("ErrImageNeverPull", StartFailure::Image { permanent: true }),
    ("ErrImagePull", StartFailure::Image { permanent: false }),
    ("ImagePullBackOff", StartFailure::Image { permanent: false }),
    (
        "RegistryUnavailable",
        StartFailure::Image { permanent: false },
    ),
    (
        "SignatureValidationFailed",
        StartFailure::Image { permanent: false },
    ),
    ("CreateContainerConfigError", StartFailure::Config),
    ("CreateContainerError", StartFailure::Config),
    ("RunContainerError", StartFailure::Runtime),
    ("StartError", StartFailure::Runtime),
    ("ContainerCannotRun", StartFailure::Runtime),
];

/// Terminated reasons of a container the runtime could not start: it never ran, and its
/// termination message is the runtime's error, not anything the container wrote.
const NEVER_RAN: [&str; 2] = ["StartError", "ContainerCannotRun"];

/// True when the container ended without ever running ([`NEVER_RAN`]).
pub fn never_ran(terminated: &ContainerStateTerminated) -> bool {
    terminated
        .reason
        .as_deref()
        .is_some_and(|reason| NEVER_RAN.contains(&reason))
}

/// What a kubelet waiting `reason` means, when it is a start problem.
pub fn classify(reason: &str) -> Option<StartFailure> {
    REASONS
        .iter()
        .find(|(known, _)| *known == reason)
        .map(|(_, failure)| *failure)
}

/// The reason as a `'static` condition reason, when it is one of [`REASONS`].
pub fn condition_reason(reason: &str) -> Option<&'static str> {
    REASONS
        .iter()
        .map(|(known, _)| *known)
        .find(|known| *known == reason)
}

/// True for a condition reason that holds the Feature until its spec changes: an agent
/// that reported itself misconfigured, or an agent Pod that could not start.
pub fn halts_until_spec_changes(reason: &str) -> bool {
    reason == conditions::REASON_AGENT_MISCONFIGURED || condition_reason(reason).is_some()
}

/// A container of an agent Pod that cannot start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartProblem {
    /// The container.
    pub container: String,
    /// Its image, when the Pod's status names it.
    pub image: Option<String>,
    /// The kubelet's waiting reason (one of [`REASONS`]).
    pub reason: &'static str,
    /// The kubelet's message.
    pub message: Option<String>,
    /// What the reason means.
    pub failure: StartFailure,
}

/// The first container of `pod` (init containers first, as the kubelet starts them) that
/// waits for a start problem, or that the runtime could not start ([`never_ran`]).
pub fn start_problem(pod: &CachedPod) -> Option<StartProblem> {
    let status = pod.status.as_ref()?;
    let containers = status.init_container_statuses.iter().flatten();
    containers
        .chain(status.container_statuses.iter().flatten())
        .find_map(|container| {
            let state = container.state.as_ref()?;
            let (reason, message) = match (&state.waiting, &state.terminated) {
                (Some(waiting), _) => (waiting.reason.as_deref()?, waiting.message.as_ref()),
                (None, Some(ended)) if never_ran(ended) => {
                    (ended.reason.as_deref()?, ended.message.as_ref())
                }
                _ => return None,
            };
            let reason = condition_reason(reason)?;
            Some(StartProblem {
                container: container.name.clone(),
                image: Some(container.image.clone()).filter(|i| !i.is_empty()),
                reason,
                message: message
                    .map(|m| cut_chars(m.trim(), MAX_KUBELET_MESSAGE_CHARS))
                    .filter(|m| !m.is_empty()),
                failure: classify(reason)?,
            })
        })
}

/// Of a container's status, only a start problem's waiting state (reason, message bounded,
/// image): what the controller's Pod cache keeps of waiting containers.
pub fn trimmed_waiting(status: &ContainerStatus) -> Option<(ContainerStateWaiting, String)> {
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let reason = condition_reason(waiting.reason.as_deref()?)?;
    let message = waiting
        .message
        .as_deref()
        .map(|m| cut_chars(m.trim(), MAX_KUBELET_MESSAGE_CHARS));
    Some((
        ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        },
        status.image.clone(),
    ))
}

/// The run of an attempt whose Pod cannot start, as ended misconfigured, once the problem
/// is past its grace at `now_ms`; `view` otherwise. Only a run not yet ended is looked at,
/// or one that ended without a result because a container never ran.
pub fn with_start_problem(pod: Option<&CachedPod>, view: RunView, now_ms: i64) -> RunView {
    let Some(pod) = pod else {
        return view;
    };
    let Some(problem) = start_problem(pod) else {
        return view;
    };
    let applies = match &view {
        RunView::Pending(_) | RunView::Running => true,
        RunView::Ended { result: None, .. } => problem.failure == StartFailure::Runtime,
        _ => false,
    };
    let at = ruling_time(pod, &problem, now_ms);
    if applies && at <= now_ms {
        ended(pod, at)
    } else {
        view
    }
}

/// The problem the Task and its Feature show as soon as the agent Pod waits for a start
/// problem that is still within its grace (the kubelet keeps trying; `None` once ruled).
pub fn waiting_problem(pod: &CachedPod, now_ms: i64) -> Option<Problem> {
    let problem = start_problem(pod)?;
    let at = ruling_time(pod, &problem, now_ms);
    (at > now_ms).then(|| Problem {
        reason: problem.reason,
        message: format!(
            "{}; the attempt ends as misconfigured at {} unless the kubelet starts it first; \
             fix: {}",
            describe(pod, &problem),
            super::time::time(at).0,
            fix(pod, &problem)
        ),
    })
}

/// When the start problem of `pod`, still within its grace at `now_ms`, ends its attempt:
/// the reconcile must look again then (a waiting Pod's next status may be minutes away).
pub fn ruling_due(pod: &CachedPod, now_ms: i64) -> Option<i64> {
    let problem = start_problem(pod)?;
    Some(ruling_time(pod, &problem, now_ms)).filter(|at| *at > now_ms)
}

fn ruling_time(pod: &CachedPod, problem: &StartProblem, now_ms: i64) -> i64 {
    created_ms(pod)
        .unwrap_or(now_ms)
        .saturating_add(problem.failure.grace_ms())
}

/// The kubelet alternates `ErrImagePull` and `ImagePullBackOff` (with a poorer message) while
/// it retries a pull: one problem. Once the Task shows one of them, the problem stays as
/// shown, so neither the Task nor the Feature is rewritten on every flip.
pub(crate) fn as_shown(status: Option<&TaskStatus>, problem: Problem) -> Problem {
    let pulling = |reason: &str| matches!(reason, "ErrImagePull" | "ImagePullBackOff");
    let shown = status
        .and_then(|s| conditions::find(&s.conditions, conditions::CONFIGURED))
        .filter(|c| c.status == conditions::STATUS_FALSE && pulling(&c.reason));
    match shown.and_then(|c| Some((condition_reason(&c.reason)?, c.message.clone()))) {
        Some((reason, message)) if pulling(problem.reason) => Problem { reason, message },
        _ => problem,
    }
}

/// True when the Task's status shows a start problem of its Pod already (its Warning
/// Event was sent when it appeared): `Configured=False` with one of the kubelet's reasons.
pub fn shown_on(status: Option<&TaskStatus>) -> bool {
    status
        .and_then(|s| conditions::find(&s.conditions, conditions::CONFIGURED))
        .is_some_and(|c| {
            c.status == conditions::STATUS_FALSE && condition_reason(&c.reason).is_some()
        })
}

/// The result of an attempt whose Pod, read live before its claim is ruled lost, never
/// started for a start problem: misconfigured (whatever its grace), not lost.
pub fn never_started(pod: &CachedPod, now_ms: i64) -> Option<AttemptResult> {
    let problem = start_problem(pod)?;
    Some(result(pod, &problem, now_ms))
}

/// True when `view` is the end [`with_start_problem`] made: the Pod never ran, so nothing
/// in it is worth keeping for `kubectl logs`.
pub fn is_start_failure(view: &RunView) -> bool {
    match view {
        RunView::Ended {
            result: Some(result),
            ..
        } => problem_reason(result).is_some(),
        _ => false,
    }
}

fn ended(pod: &CachedPod, at_ms: i64) -> RunView {
    match never_started(pod, at_ms) {
        Some(result) => RunView::Ended {
            reason: problem_reason(&result).map(str::to_owned),
            result: Some(Box::new(result)),
        },
        None => RunView::pending(),
    }
}

fn created_ms(pod: &CachedPod) -> Option<i64> {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
}

/// The result standing in for the runner's: the agent never ran.
fn result(pod: &CachedPod, problem: &StartProblem, at_ms: i64) -> AttemptResult {
    let labels = pod.labels();
    let task = labels.get(TASK_LABEL).cloned().unwrap_or_default();
    let mut result =
        AttemptResult::new(task, pod.metadata.name.clone(), OutcomeClass::Misconfigured);
    result.misconfiguration = Some(Misconfiguration {
        problem: describe(pod, problem),
        fix: fix(pod, problem),
        reason: Some(problem.reason.to_owned()),
    });
    result.timings.started_at_ms = created_ms(pod).unwrap_or(at_ms);
    result.timings.ended_at_ms = at_ms;
    result
}

/// `<Reason>: agent Pod <ns>/<pod> cannot start: container <c> (image <i>) waits: <the
/// kubelet's message>`.
fn describe(pod: &CachedPod, problem: &StartProblem) -> String {
    let image = problem
        .image
        .as_deref()
        .map(|i| format!(" (image {i})"))
        .unwrap_or_default();
    let said = problem
        .message
        .as_deref()
        .map(|m| format!(": {}", cut_chars(m.trim(), MAX_KUBELET_MESSAGE_CHARS)))
        .unwrap_or_default();
    format!(
        "{}: agent Pod {}/{} cannot start: container {}{image} waits{said}",
        problem.reason,
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        problem.container,
    )
}

/// What the user should change, by container and reason.
fn fix(pod: &CachedPod, problem: &StartProblem) -> String {
    let namespace = pod.namespace().unwrap_or_default();
    let feature = format!(
        "Feature {namespace}/{}",
        pod.labels().get(FEATURE_LABEL).cloned().unwrap_or_default()
    );
    let agent = problem.container == AGENT_CONTAINER;
    let image_owner = if agent {
        format!("spec.agent.image (or the pool agent's image) of {feature}")
    } else {
        "the controller's ralph image (its --ralph-image setting, the chart's image)".to_owned()
    };
    let pull_secrets = format!(
        "imagePullSecrets in spec.podTemplate of {feature} or on the agent Pods' ServiceAccount"
    );
    match problem.failure {
        StartFailure::Image { permanent: true } if problem.reason == "InvalidImageName" => {
            format!("set {image_owner} to a valid image reference")
        }
        StartFailure::Image { .. } => format!(
            "set {image_owner} to an image that exists, and let the node pull it \
             ({pull_secrets}); then change the Feature's spec to resume"
        ),
        StartFailure::Config => format!(
            "create the Secret or ConfigMap (or key) the message names in namespace \
             {namespace}, or fix the reference in {feature} (spec.agent.env, envFrom, \
             spec.workspace.git credentials); then change the Feature's spec to resume"
        ),
        StartFailure::Runtime => format!(
            "the container runtime could not start it: when the message says a mount is \
             \"not a directory\", {image_owner} has a file where the agent Pod mounts a \
             directory ({}); use an image without files there. Otherwise fix what \
             the message names (command, user, security context); then change the Feature's \
             spec to resume",
            super::pod::AGENT_MOUNTS.join(", ")
        ),
    }
}

/// The kubelet's reason of an attempt that ended misconfigured because its Pod could not
/// start (`None` for any other result, an agent's own misconfiguration included).
pub fn problem_reason(result: &AttemptResult) -> Option<&'static str> {
    if result.outcome != OutcomeClass::Misconfigured {
        return None;
    }
    condition_reason(result.misconfiguration.as_ref()?.reason.as_deref()?)
}

/// The problem a Task shows after an attempt that ended misconfigured: the kubelet's
/// reason when its Pod could not start, else `AgentMisconfigured` (`None` for any other
/// result).
pub fn task_problem(result: &AttemptResult) -> Option<Problem> {
    if result.outcome != OutcomeClass::Misconfigured {
        return None;
    }
    let misconfiguration = result.misconfiguration.as_ref()?;
    Some(Problem {
        reason: problem_reason(result).unwrap_or(conditions::REASON_AGENT_MISCONFIGURED),
        message: format!(
            "{}; fix: {}",
            misconfiguration.problem, misconfiguration.fix
        ),
    })
}

/// Sets the Task's `Configured` condition once its attempt ended: `False` with the
/// kubelet's reason when its Pod could not start, `AgentMisconfigured` when the agent
/// reported itself misconfigured (the Task keeps the halt too: [`halt_shown_by_tasks`]);
/// `True` when the Pod got past a start
/// problem the Task showed within its grace; unchanged otherwise (a later attempt's Pod
/// sets it back to `True`).
pub fn record_on_task(
    status: &mut TaskStatus,
    result: Option<&AttemptResult>,
    generation: Option<i64>,
    now_ms: i64,
) {
    let condition = match result.and_then(task_problem) {
        Some(problem) => conditions::condition(
            conditions::CONFIGURED,
            conditions::STATUS_FALSE,
            problem.reason,
            problem.message,
            generation,
            super::time::time(now_ms),
        ),
        // Shown, and this attempt ended otherwise: its Pod got past the problem.
        None if shown_on(Some(status)) => started(generation, now_ms),
        None => return,
    };
    conditions::set_condition(&mut status.conditions, condition);
}

pub(crate) fn started(
    generation: Option<i64>,
    now_ms: i64,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    conditions::condition(
        conditions::CONFIGURED,
        conditions::STATUS_TRUE,
        "PodStarted",
        "the agent Pod got past its start problem",
        generation,
        super::time::time(now_ms),
    )
}

/// True when the Task shows a start problem ([`shown_on`]) of an attempt that goes on: its
/// grace has not ended (a ruled attempt has its outcome recorded).
pub(crate) fn shown_within_grace(status: Option<&TaskStatus>) -> bool {
    shown_on(status) && status.is_some_and(|s| last_outcome(s).is_none())
}

/// The outcome of the Task's latest attempt; `None` while it runs (or before the first).
fn last_outcome(status: &TaskStatus) -> Option<AttemptOutcome> {
    status
        .attempts
        .iter()
        .rev()
        .find(|a| a.number == status.attempt_count)
        .and_then(|a| a.outcome)
}

/// The halt the Feature's Tasks show: a Task whose latest attempt ended `misconfigured`
/// and that shows why (`Configured=False` with the kubelet's reason, or
/// `AgentMisconfigured`); a start problem within its grace is no halt (the attempt goes
/// on). The Tasks decide, not the Feature's condition: its write may have failed, or a
/// reconcile may read a Feature cache that has not caught up with it, while the Tasks are
/// read with this process's writes applied. `act::pod_start::clear_on_spec_change` lifts it.
pub fn halt_shown_by_tasks(tasks: &[Arc<CachedTask>]) -> Option<Problem> {
    tasks.iter().find_map(|task| halt_on(task))
}

pub(crate) fn halt_on(task: &CachedTask) -> Option<Problem> {
    let status = task.status.as_ref()?;
    let c = conditions::find(&status.conditions, conditions::CONFIGURED)?;
    let reason = condition_reason(&c.reason).or_else(|| {
        (c.reason == conditions::REASON_AGENT_MISCONFIGURED)
            .then_some(conditions::REASON_AGENT_MISCONFIGURED)
    })?;
    let ruled = c.status == conditions::STATUS_FALSE
        && last_outcome(status) == Some(AttemptOutcome::Misconfigured);
    ruled.then(|| Problem {
        reason,
        message: c.message.clone(),
    })
}

#[cfg(test)]
#[path = "pod_start_tests.rs"]
mod tests;
