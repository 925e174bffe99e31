//! An agent Pod as the lifecycle sees it (pure): not started, pending, running, ended with
//! the runner's result from the agent container's termination message, or missing; and a
//! claim Lease as the lifecycle sees it.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus};

use super::pod::AGENT_CONTAINER;
use crate::controller::plan::cached::CachedPod;
use crate::engine::attempt::AttemptResult;
use crate::engine::lifecycle::{ClaimView, RunView, Waiting};

/// The run of the task's last attempt: `pod` is that attempt's Pod if it exists,
/// `attempt_recorded` whether the task's status records the attempt (its Pod is created
/// before the status says Running, so a recorded attempt without a Pod lost its Pod).
/// A Pod whose agent has not started is released `start_timeout_ms` after its creation
/// (`None`: never).
pub(crate) fn run_view(
    pod: Option<&CachedPod>,
    attempt_recorded: bool,
    start_timeout_ms: Option<i64>,
) -> RunView {
    let Some(pod) = pod else {
        return if attempt_recorded {
            RunView::Missing
        } else {
            RunView::NotStarted
        };
    };
    super::pod_git::with_git_steps(pod, pod_view(pod, start_timeout_ms))
}

fn pod_view(pod: &CachedPod, start_timeout_ms: Option<i64>) -> RunView {
    let status = pod.status.as_ref();
    if let Some(terminated) = agent_terminated(pod) {
        let (mut result, unreadable) = parse_result(terminated);
        let reason = unreadable.or_else(|| terminated_reason(terminated));
        if is_out_of_memory(terminated)
            && let Some(result) = result.as_mut()
            && let Some(crash) = result.crash.as_mut()
        {
            *crash = format!("{OUT_OF_MEMORY}; the runner saw: {crash}");
        }
        return RunView::Ended { result, reason };
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") | Some("Succeeded") => RunView::Ended {
            result: None,
            reason: Some(pod_failure_reason(pod)),
        },
        Some("Running") if agent_started(pod) != Some(false) => RunView::Running,
        _ => RunView::Pending(Waiting {
            reason: Some(waiting_reason(pod)),
            release_at_ms: start_timeout_ms
                .zip(pod.metadata.creation_timestamp.as_ref())
                .map(|(timeout, created)| created.0.as_millisecond().saturating_add(timeout)),
        }),
    }
}

/// Whether the agent container has started (it runs or ran); `None` when the Pod's status
/// does not say.
fn agent_started(pod: &CachedPod) -> Option<bool> {
    let state = agent_status(pod)?.state.as_ref();
    Some(state.is_some_and(|s| s.running.is_some() || s.terminated.is_some()))
}

/// Why a Pod's agent has not started: the scheduler's word when it could not place the Pod.
fn waiting_reason(pod: &CachedPod) -> String {
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        });
    match unschedulable {
        Some(c) => format!(
            "not scheduled: {}",
            c.message
                .as_deref()
                .or(c.reason.as_deref())
                .unwrap_or("no node fits it")
        ),
        None if pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some() =>
        {
            "on its node, its agent container not started yet".to_owned()
        }
        None => "not on a node yet".to_owned(),
    }
}

/// When the agent container started (running or since ended), else when the kubelet
/// acknowledged the Pod.
pub(crate) fn started_at(pod: &CachedPod) -> Option<jiff::Timestamp> {
    let status = pod.status.as_ref()?;
    let state = status
        .container_statuses
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.name == AGENT_CONTAINER))
        .and_then(|c| c.state.as_ref());
    let container = state.and_then(|s| {
        s.running
            .as_ref()
            .and_then(|r| r.started_at.as_ref())
            .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
    });
    container.or(status.start_time.as_ref()).map(|t| t.0)
}

/// When the Pod finished: the agent container's end, else `None` (not finished or unknown).
pub(crate) fn finished_at(pod: &CachedPod) -> Option<jiff::Timestamp> {
    agent_terminated(pod)?.finished_at.as_ref().map(|t| t.0)
}

fn agent_terminated(pod: &CachedPod) -> Option<&ContainerStateTerminated> {
    agent_status(pod)?.state.as_ref()?.terminated.as_ref()
}

/// The agent container's status, once the kubelet reports it.
fn agent_status(pod: &CachedPod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == AGENT_CONTAINER)
}

/// The result in a termination message, or why there is none. A container that never
/// started carries the runtime's error there, not a result ([`super::pod_start`] rules it).
fn parse_result(
    terminated: &ContainerStateTerminated,
) -> (Option<Box<AttemptResult>>, Option<String>) {
    if super::pod_start::never_ran(terminated) {
        return (None, None);
    }
    let message = terminated.message.as_deref();
    let Some(message) = message.map(str::trim).filter(|m| !m.is_empty()) else {
        return (None, None);
    };
    match serde_json::from_str::<AttemptResult>(message) {
        Ok(result) => (Some(Box::new(result)), None),
        Err(error) => (
            None,
            Some(format!("the runner's result is unreadable: {error}")),
        ),
    }
}

/// What the kubelet's `OOMKilled` means, and what to change.
const OUT_OF_MEMORY: &str = "out of memory: the kernel killed a process of the agent \
    container at its memory limit (OOMKilled); raise spec.agent.resources.limits.memory \
    (or the pool agent's) or give the agent less to hold";

fn is_out_of_memory(terminated: &ContainerStateTerminated) -> bool {
    terminated.reason.as_deref() == Some("OOMKilled")
}

fn terminated_reason(terminated: &ContainerStateTerminated) -> Option<String> {
    if is_out_of_memory(terminated) {
        return Some(format!(
            "{OUT_OF_MEMORY} (exit code {})",
            terminated.exit_code
        ));
    }
    let reason = terminated.reason.as_deref().unwrap_or("Terminated");
    Some(match terminated.signal {
        Some(signal) => format!(
            "{reason} (exit code {}, signal {signal})",
            terminated.exit_code
        ),
        None => format!("{reason} (exit code {})", terminated.exit_code),
    })
}

fn pod_failure_reason(pod: &CachedPod) -> String {
    let status = pod.status.as_ref();
    let reason = status
        .and_then(|s| s.reason.as_deref())
        .unwrap_or("PodFailed");
    match status.and_then(|s| s.message.as_deref()) {
        Some(message) => format!("{reason}: {message}"),
        None => reason.to_owned(),
    }
}

/// The Lease as the lifecycle sees it. A Lease with no holder is no claim; one with no
/// renew time counts as renewed at its acquire time (or never, i.e. expired).
pub(crate) fn claim_view(lease: &Lease) -> Option<ClaimView> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed_at_ms = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map_or(0, |t| t.0.as_millisecond());
    Some(ClaimView {
        holder,
        renewed_at_ms,
        duration_ms: i64::from(spec.lease_duration_seconds.unwrap_or(0)).saturating_mul(1000),
    })
}

/// The Lease's holder identity, if any.
pub fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::engine::attempt::{OutcomeClass, RESULT_SCHEMA_VERSION};

    fn pod(phase: &str, agent: Option<ContainerStateTerminated>) -> CachedPod {
        CachedPod {
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                container_statuses: Some(vec![ContainerStatus {
                    name: AGENT_CONTAINER.to_owned(),
                    state: Some(ContainerState {
                        terminated: agent,
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..CachedPod::default()
        }
    }

    fn running_pod() -> CachedPod {
        let mut p = pod("Running", None);
        if let Some(agent) = p
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c.first_mut())
        {
            agent.state = Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..ContainerState::default()
            });
        }
        p
    }

    fn unschedulable_pod(created: &str) -> CachedPod {
        let mut p = pod("Pending", None);
        p.metadata.creation_timestamp = Some(Time(created.parse().unwrap_or_default()));
        if let Some(status) = p.status.as_mut() {
            status.container_statuses = None;
            status.conditions = Some(vec![PodCondition {
                type_: "PodScheduled".to_owned(),
                status: "False".to_owned(),
                reason: Some("Unschedulable".to_owned()),
                message: Some("0/1 nodes are available: 1 Too many pods.".to_owned()),
                ..PodCondition::default()
            }]);
        }
        p
    }

    fn terminated(
        reason: &str,
        exit_code: i32,
        message: Option<String>,
    ) -> ContainerStateTerminated {
        ContainerStateTerminated {
            reason: Some(reason.to_owned()),
            exit_code,
            message,
            ..ContainerStateTerminated::default()
        }
    }

    /// Asserts that the attempt of `pod` ended without a result, for `reason`.
    fn assert_ended_without_result(pod: &CachedPod, reason: &str) {
        let expected = RunView::Ended {
            result: None,
            reason: Some(reason.to_owned()),
        };
        assert_eq!(run_view(Some(pod), true, None), expected);
    }

    fn result_json() -> String {
        serde_json::json!({
            "version": RESULT_SCHEMA_VERSION,
            "task": "build",
            "attempt": "hello-build-a1",
            "outcome": "finished",
            "stopReason": "end_turn",
            "sigils": {"taskDone": "build"}
        })
        .to_string()
    }

    #[test]
    fn no_pod_and_no_recorded_attempt_is_not_started() {
        assert_eq!(run_view(None, false, None), RunView::NotStarted);
    }

    #[test]
    fn no_pod_for_a_recorded_attempt_is_missing() {
        assert_eq!(run_view(None, true, None), RunView::Missing);
    }

    #[test]
    fn scheduled_pod_is_pending_and_started_pod_is_running() {
        assert!(matches!(
            run_view(Some(&pod("Pending", None)), true, None),
            RunView::Pending(_)
        ));
        assert_eq!(run_view(Some(&running_pod()), true, None), RunView::Running);
    }

    #[test]
    fn running_pod_whose_agent_container_has_not_started_is_pending() {
        assert!(matches!(
            run_view(Some(&pod("Running", None)), true, None),
            RunView::Pending(_)
        ));
    }

    #[test]
    fn unschedulable_pod_waits_with_the_schedulers_message() {
        let p = unschedulable_pod("2026-01-01T00:00:00Z");
        let RunView::Pending(waiting) = run_view(Some(&p), true, None) else {
            panic!("not pending");
        };
        assert_eq!(
            waiting.reason.as_deref(),
            Some("not scheduled: 0/1 nodes are available: 1 Too many pods.")
        );
        assert_eq!(waiting.release_at_ms, None);
    }

    #[test]
    fn waiting_pod_is_released_the_start_timeout_after_its_creation() {
        let p = unschedulable_pod("2026-01-01T00:00:00Z");
        let created: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap_or_default();
        let RunView::Pending(waiting) = run_view(Some(&p), true, Some(600_000)) else {
            panic!("not pending");
        };
        assert_eq!(
            waiting.release_at_ms,
            Some(created.as_millisecond() + 600_000)
        );
    }

    #[test]
    fn a_container_that_never_started_carries_no_result_to_parse() {
        let mut t = terminated(
            "StartError",
            128,
            Some("error mounting \"x\" to rootfs at \"/ralph/bin\": not a directory".to_owned()),
        );
        t.started_at = None;
        let RunView::Ended { result, reason } = run_view(Some(&pod("Failed", Some(t))), true, None)
        else {
            panic!("not ended");
        };
        assert!(result.is_none());
        assert_eq!(reason.as_deref(), Some("StartError (exit code 128)"));
    }

    #[test]
    fn terminated_agent_with_result_is_ended_with_that_result() {
        let p = pod(
            "Succeeded",
            Some(terminated("Completed", 0, Some(result_json()))),
        );
        let RunView::Ended { result, .. } = run_view(Some(&p), true, None) else {
            panic!("not ended");
        };
        let result = result.expect("result parsed");
        assert_eq!(result.outcome, OutcomeClass::Finished);
        assert_eq!(result.sigils.task_done.as_deref(), Some("build"));
    }

    #[test]
    fn agent_ended_while_sidecar_still_runs_counts_as_ended() {
        let p = pod(
            "Running",
            Some(terminated("Completed", 0, Some(result_json()))),
        );
        assert!(matches!(
            run_view(Some(&p), true, None),
            RunView::Ended {
                result: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn oom_killed_agent_without_result_carries_the_kubelet_reason() {
        let p = pod("Failed", Some(terminated("OOMKilled", 137, None)));
        let RunView::Ended {
            result: None,
            reason: Some(reason),
        } = run_view(Some(&p), true, None)
        else {
            panic!("not ended without a result");
        };
        assert!(reason.starts_with("out of memory"), "{reason}");
        assert!(
            reason.contains("spec.agent.resources.limits.memory"),
            "{reason}"
        );
    }

    #[test]
    fn an_agent_oom_killed_under_a_living_runner_says_out_of_memory_in_its_crash() {
        let result = serde_json::json!({
            "version": RESULT_SCHEMA_VERSION,
            "task": "build",
            "outcome": "crashed",
            "crash": "agent was killed by signal 9 (SIGKILL) before answering the prompt",
        });
        let p = pod(
            "Failed",
            Some(terminated("OOMKilled", 3, Some(result.to_string()))),
        );
        let RunView::Ended {
            result: Some(result),
            ..
        } = run_view(Some(&p), true, None)
        else {
            panic!("no result");
        };
        let crash = result.crash.unwrap_or_default();
        assert!(crash.starts_with("out of memory"), "{crash}");
        assert!(crash.ends_with("before answering the prompt"), "{crash}");
    }

    #[test]
    fn evicted_pod_is_ended_with_the_eviction_reason() {
        let mut p = pod("Failed", None);
        if let Some(status) = p.status.as_mut() {
            status.reason = Some("Evicted".to_owned());
            status.message = Some("node low on memory".to_owned());
        }
        assert_ended_without_result(&p, "Evicted: node low on memory");
    }

    #[test]
    fn garbage_termination_message_is_no_result_and_says_why() {
        let p = pod(
            "Failed",
            Some(terminated("Error", 1, Some("segfault".to_owned()))),
        );
        let RunView::Ended { result, reason } = run_view(Some(&p), true, None) else {
            panic!("not ended");
        };
        assert!(result.is_none());
        assert!(reason.is_some_and(|r| r.starts_with("the runner's result is unreadable")),);
    }
}
