//! An agent Pod as the lifecycle sees it (pure): not started, pending, running, ended with
//! the runner's result from the agent container's termination message, or missing.

use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

use super::pod::AGENT_CONTAINER;
use crate::engine::attempt::AttemptResult;
use crate::engine::lifecycle::RunView;

/// The run of the task's last attempt: `pod` is that attempt's Pod if it exists,
/// `attempt_recorded` whether the task's status records the attempt (its Pod is created
/// before the status says Running, so a recorded attempt without a Pod lost its Pod).
pub fn run_view(pod: Option<&Pod>, attempt_recorded: bool) -> RunView {
    let Some(pod) = pod else {
        return if attempt_recorded {
            RunView::Missing
        } else {
            RunView::NotStarted
        };
    };
    super::pod_git::with_git_steps(pod, pod_view(pod))
}

fn pod_view(pod: &Pod) -> RunView {
    let status = pod.status.as_ref();
    if let Some(terminated) = agent_terminated(pod) {
        let (result, unreadable) = parse_result(terminated.message.as_deref());
        let reason = unreadable.or_else(|| terminated_reason(terminated));
        return RunView::Ended { result, reason };
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") | Some("Succeeded") => RunView::Ended {
            result: None,
            reason: Some(pod_failure_reason(pod)),
        },
        Some("Running") => RunView::Running,
        _ => RunView::Pending,
    }
}

/// When the agent container started (running or since ended), else when the kubelet
/// acknowledged the Pod.
pub fn started_at(pod: &Pod) -> Option<jiff::Timestamp> {
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
pub fn finished_at(pod: &Pod) -> Option<jiff::Timestamp> {
    agent_terminated(pod)?.finished_at.as_ref().map(|t| t.0)
}

fn agent_terminated(pod: &Pod) -> Option<&ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == AGENT_CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}

/// The result in a termination message, or why there is none.
fn parse_result(message: Option<&str>) -> (Option<Box<AttemptResult>>, Option<String>) {
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

fn terminated_reason(terminated: &ContainerStateTerminated) -> Option<String> {
    let reason = terminated.reason.as_deref().unwrap_or("Terminated");
    Some(match terminated.signal {
        Some(signal) => format!(
            "{reason} (exit code {}, signal {signal})",
            terminated.exit_code
        ),
        None => format!("{reason} (exit code {})", terminated.exit_code),
    })
}

fn pod_failure_reason(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let reason = status
        .and_then(|s| s.reason.as_deref())
        .unwrap_or("PodFailed");
    match status.and_then(|s| s.message.as_deref()) {
        Some(message) => format!("{reason}: {message}"),
        None => reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, PodStatus};

    use super::*;
    use crate::engine::attempt::{OutcomeClass, RESULT_SCHEMA_VERSION};

    fn pod(phase: &str, agent: Option<ContainerStateTerminated>) -> Pod {
        Pod {
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
            ..Pod::default()
        }
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
    fn assert_ended_without_result(pod: &Pod, reason: &str) {
        let expected = RunView::Ended {
            result: None,
            reason: Some(reason.to_owned()),
        };
        assert_eq!(run_view(Some(pod), true), expected);
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
        assert_eq!(run_view(None, false), RunView::NotStarted);
    }

    #[test]
    fn no_pod_for_a_recorded_attempt_is_missing() {
        assert_eq!(run_view(None, true), RunView::Missing);
    }

    #[test]
    fn scheduled_pod_is_pending_and_started_pod_is_running() {
        assert_eq!(
            run_view(Some(&pod("Pending", None)), true),
            RunView::Pending
        );
        assert_eq!(
            run_view(Some(&pod("Running", None)), true),
            RunView::Running
        );
    }

    #[test]
    fn terminated_agent_with_result_is_ended_with_that_result() {
        let p = pod(
            "Succeeded",
            Some(terminated("Completed", 0, Some(result_json()))),
        );
        let RunView::Ended { result, .. } = run_view(Some(&p), true) else {
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
            run_view(Some(&p), true),
            RunView::Ended {
                result: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn oom_killed_agent_without_result_carries_the_kubelet_reason() {
        let p = pod("Failed", Some(terminated("OOMKilled", 137, None)));
        assert_ended_without_result(&p, "OOMKilled (exit code 137)");
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
        let RunView::Ended { result, reason } = run_view(Some(&p), true) else {
            panic!("not ended");
        };
        assert!(result.is_none());
        assert!(reason.is_some_and(|r| r.starts_with("the runner's result is unreadable")),);
    }
}
