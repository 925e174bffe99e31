use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::engine::testing::named_cases;

const CREATED_MS: i64 = 1_800_000_000_000;

/// A Pod whose `container` waits for `reason`, as the Pod cache keeps it.
fn waiting_pod(container: &str, init: bool, reason: &str, message: &str) -> CachedPod {
    let statuses = serde_json::json!([{
        "name": container, "image": "registry.invalid/agent:1", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": message}}
    }]);
    let key = if init {
        "initContainerStatuses"
    } else {
        "containerStatuses"
    };
    let created = jiff::Timestamp::from_millisecond(CREATED_MS)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string();
    match serde_json::from_value::<Pod>(serde_json::json!({
        "metadata": {
            "name": "f-build-a1", "namespace": "team", "creationTimestamp": created,
            "labels": {"ralph.dev/feature": "f", "ralph.dev/task": "build"}
        },
        "status": {"phase": "Pending", key: statuses}
    })) {
        Ok(pod) => CachedPod::from(pod),
        Err(error) => panic!("test pod does not parse: {error}"),
    }
}

fn agent_waiting(reason: &str, message: &str) -> CachedPod {
    waiting_pod(AGENT_CONTAINER, false, reason, message)
}

/// The misconfiguration of the result `view` ended with.
fn misconfiguration(view: &RunView) -> Misconfiguration {
    match view {
        RunView::Ended {
            result: Some(result),
            ..
        } => {
            assert_eq!(result.outcome, OutcomeClass::Misconfigured);
            result
                .misconfiguration
                .clone()
                .unwrap_or_else(|| panic!("no misconfiguration"))
        }
        other => panic!("not ended with a result: {other:?}"),
    }
}

fn assert_classified(reason: &str, expected: Option<StartFailure>, grace_ms: Option<i64>) {
    let failure = classify(reason);
    assert_eq!(failure, expected, "{reason}");
    assert_eq!(failure.map(StartFailure::grace_ms), grace_ms, "{reason}");
}

named_cases! { assert_classified;
    an_invalid_image_name_is_permanent(
        "InvalidImageName", Some(StartFailure::Image { permanent: true }), Some(0));
    an_image_the_node_may_never_pull_is_permanent(
        "ErrImageNeverPull", Some(StartFailure::Image { permanent: true }), Some(0));
    a_pull_error_waits_out_the_grace(
        "ErrImagePull", Some(StartFailure::Image { permanent: false }), Some(START_GRACE_MS));
    a_pull_back_off_waits_out_the_grace(
        "ImagePullBackOff", Some(StartFailure::Image { permanent: false }), Some(START_GRACE_MS));
    an_unavailable_registry_waits_out_the_grace(
        "RegistryUnavailable", Some(StartFailure::Image { permanent: false }), Some(START_GRACE_MS));
    a_missing_secret_or_config_map_waits_out_the_grace(
        "CreateContainerConfigError", Some(StartFailure::Config), Some(START_GRACE_MS));
    a_container_the_runtime_refused_waits_out_the_grace(
        "CreateContainerError", Some(StartFailure::Config), Some(START_GRACE_MS));
    a_container_being_created_is_no_problem("ContainerCreating", None, None);
    a_pod_initializing_is_no_problem("PodInitializing", None, None);
    a_crash_loop_is_no_start_problem("CrashLoopBackOff", None, None);
}

#[test]
fn a_pull_error_within_the_grace_leaves_the_run_pending() {
    let pod = agent_waiting("ErrImagePull", "pull access denied");
    let view = with_start_problem(
        Some(&pod),
        RunView::pending(),
        CREATED_MS + START_GRACE_MS - 1,
    );
    assert_eq!(view, RunView::pending());
}

#[test]
fn a_pull_error_past_the_grace_ends_the_run_misconfigured() {
    let pod = agent_waiting("ErrImagePull", "pull access denied");
    let view = with_start_problem(Some(&pod), RunView::pending(), CREATED_MS + START_GRACE_MS);
    assert!(
        misconfiguration(&view)
            .problem
            .starts_with("ErrImagePull: ")
    );
}

#[test]
fn an_invalid_image_name_ends_the_run_at_once() {
    let pod = agent_waiting("InvalidImageName", "couldn't parse image name");
    let view = with_start_problem(Some(&pod), RunView::pending(), CREATED_MS);
    assert!(
        misconfiguration(&view)
            .problem
            .starts_with("InvalidImageName: ")
    );
}

#[test]
fn the_ruling_ends_the_attempt_when_its_grace_ran_out_not_when_it_was_seen() {
    let pod = agent_waiting("ErrImagePull", "pull access denied");
    let view = with_start_problem(Some(&pod), RunView::pending(), CREATED_MS + 600_000);
    let RunView::Ended {
        result: Some(result),
        ..
    } = view
    else {
        panic!("not ended: {view:?}");
    };
    assert_eq!(result.timings.ended_at_ms, CREATED_MS + START_GRACE_MS);
    assert_eq!(result.attempt.as_deref(), Some("f-build-a1"));
    assert_eq!(result.task, "build");
}

#[test]
fn an_ended_run_is_left_as_it_ended() {
    let pod = agent_waiting("InvalidImageName", "bad");
    let ended = RunView::Ended {
        result: None,
        reason: Some("Error (exit code 1)".to_owned()),
    };
    assert_eq!(
        with_start_problem(Some(&pod), ended.clone(), CREATED_MS),
        ended
    );
}

#[test]
fn a_pod_waiting_for_an_ordinary_reason_is_no_start_problem() {
    let pod = agent_waiting("ContainerCreating", "");
    assert_eq!(start_problem(&pod), None);
    assert_eq!(never_started(&pod, CREATED_MS + 600_000), None);
}

#[test]
fn a_live_read_at_claim_expiry_rules_a_pod_that_never_started_misconfigured_within_its_grace() {
    let pod = agent_waiting("ImagePullBackOff", "Back-off pulling image");
    let result = never_started(&pod, CREATED_MS + 1_000).unwrap_or_else(|| panic!("no ruling"));
    assert_eq!(result.outcome, OutcomeClass::Misconfigured);
}

#[test]
fn the_problem_names_the_pod_container_image_and_the_kubelets_message() {
    let pod = agent_waiting("ErrImagePull", "failed to resolve reference");
    let view = with_start_problem(Some(&pod), RunView::pending(), CREATED_MS + START_GRACE_MS);
    let problem = misconfiguration(&view).problem;
    for part in [
        "team/f-build-a1",
        "container agent",
        "registry.invalid/agent:1",
        "failed to resolve reference",
    ] {
        assert!(problem.contains(part), "{part:?} not in {problem:?}");
    }
}

#[test]
fn the_fix_of_an_agent_image_names_spec_agent_image_and_pull_secrets() {
    let pod = agent_waiting("ErrImagePull", "denied");
    let fix = misconfiguration(&with_start_problem(
        Some(&pod),
        RunView::pending(),
        i64::MAX,
    ))
    .fix;
    for part in [
        "spec.agent.image",
        "Feature team/f",
        "imagePullSecrets",
        "ServiceAccount",
    ] {
        assert!(fix.contains(part), "{part:?} not in {fix:?}");
    }
}

#[test]
fn the_fix_of_a_ralph_image_names_the_controllers_image_setting() {
    let pod = waiting_pod("install-ralph", true, "ErrImagePull", "denied");
    let fix = misconfiguration(&with_start_problem(
        Some(&pod),
        RunView::pending(),
        i64::MAX,
    ))
    .fix;
    assert!(fix.contains("--ralph-image"), "{fix:?}");
}

#[test]
fn the_fix_of_a_missing_secret_says_to_create_it_in_the_namespace() {
    let pod = agent_waiting(
        "CreateContainerConfigError",
        "secret \"agent-key\" not found",
    );
    let view = with_start_problem(Some(&pod), RunView::pending(), i64::MAX);
    let misconfiguration = misconfiguration(&view);
    assert!(
        misconfiguration
            .problem
            .contains("secret \"agent-key\" not found")
    );
    assert!(misconfiguration.fix.contains("create the Secret"));
    assert!(misconfiguration.fix.contains("namespace team"));
}

#[test]
fn a_long_kubelet_message_is_bounded() {
    let pod = agent_waiting("ErrImagePull", &"y".repeat(5_000));
    let view = with_start_problem(Some(&pod), RunView::pending(), i64::MAX);
    assert!(misconfiguration(&view).problem.len() < 1_000);
}

#[test]
fn the_condition_reason_of_a_pod_that_could_not_start_is_the_kubelets() {
    let pod = agent_waiting("CreateContainerConfigError", "secret \"s\" not found");
    let view = with_start_problem(Some(&pod), RunView::pending(), i64::MAX);
    assert!(is_start_failure(&view));
    let RunView::Ended {
        result: Some(result),
        ..
    } = &view
    else {
        panic!("not ended");
    };
    let problem = task_problem(result).unwrap_or_else(|| panic!("no problem"));
    assert_eq!(problem.reason, "CreateContainerConfigError");
    assert_eq!(
        misconfiguration(&view).reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert!(halts_until_spec_changes(problem.reason));
}

#[test]
fn an_agents_own_misconfiguration_naming_a_kubelet_reason_is_no_pod_start_problem() {
    let result = crate::engine::testing::misconfigured("t", "ErrImagePull: quoted", "x");
    assert_eq!(problem_reason(&result), None);
    assert_eq!(
        task_problem(&result).map(|p| p.reason),
        Some(crate::api::conditions::REASON_AGENT_MISCONFIGURED)
    );
}

fn feature_configured(
    reason: &str,
    message: &str,
    observed: i64,
    generation: i64,
) -> crate::api::Feature {
    match serde_json::from_value(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
        "metadata": {"name": "f", "namespace": "team", "generation": generation},
        "spec": {"agent": {"command": ["agent"]}, "tasks": [{"name": "a"}]},
        "status": {"conditions": [{
            "type": "Configured", "status": "False", "reason": reason, "message": message,
            "observedGeneration": observed, "lastTransitionTime": "2026-11-23T10:00:00Z"
        }]}
    })) {
        Ok(feature) => feature,
        Err(error) => panic!("test feature does not parse: {error}"),
    }
}

#[test]
fn a_pod_start_problem_on_the_feature_alone_is_no_halt() {
    let pod = agent_waiting("ErrImagePull", "denied");
    let waiting = waiting_problem(&pod, CREATED_MS).unwrap_or_else(|| panic!("not shown"));
    let ruled = "the agent of Feature team/f is misconfigured: ErrImagePull: agent Pod \
                 team/f-a-a1 cannot start: container agent waits";
    for message in [waiting.message.as_str(), ruled] {
        let feature = feature_configured("ErrImagePull", message, 3, 3);
        assert_eq!(
            super::super::status::recorded_misconfiguration(&feature),
            None,
            "{message}"
        );
    }
}

#[test]
fn a_start_problem_is_shown_until_its_grace_ends_and_then_ruled() {
    let pod = agent_waiting("ErrImagePull", "denied");
    let end = CREATED_MS + START_GRACE_MS;
    assert_eq!(ruling_due(&pod, CREATED_MS), Some(end));
    assert!(waiting_problem(&pod, end - 1).is_some());
    assert_eq!(waiting_problem(&pod, end), None);
    assert_eq!(ruling_due(&pod, end), None);
}

/// A Task on its first attempt (ended with `outcome`, or running) showing `Configured`.
fn task_configured(
    status: &str,
    reason: &str,
    message: &str,
    outcome: Option<&str>,
) -> std::sync::Arc<CachedTask> {
    match serde_json::from_value::<crate::api::Task>(serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": "f-a", "namespace": "team"},
        "spec": {"featureRef": "f"},
        "status": {
            "attemptCount": 1,
            "attempts": [{"number": 1, "outcome": outcome}],
            "conditions": [{
                "type": "Configured", "status": status, "reason": reason, "message": message,
                "lastTransitionTime": "2026-11-23T10:00:00Z"
            }]
        }
    })) {
        Ok(task) => std::sync::Arc::new(CachedTask::from(task)),
        Err(error) => panic!("test task does not parse: {error}"),
    }
}

#[test]
fn a_task_ruled_misconfigured_for_its_pod_halts_the_feature() {
    let tasks = [task_configured(
        "False",
        "ErrImagePull",
        "ErrImagePull: agent Pod ...",
        Some("misconfigured"),
    )];
    assert_eq!(
        halt_shown_by_tasks(&tasks).map(|p| p.reason),
        Some("ErrImagePull")
    );
}

#[test]
fn a_task_whose_agent_reported_itself_misconfigured_halts_the_feature() {
    let tasks = [task_configured(
        "False",
        "AgentMisconfigured",
        "agent binary not found; fix: ...",
        Some("misconfigured"),
    )];
    assert_eq!(
        halt_shown_by_tasks(&tasks).map(|p| p.reason),
        Some("AgentMisconfigured")
    );
}

#[test]
fn a_task_within_its_grace_or_configured_again_halts_nothing() {
    let pod = agent_waiting("ErrImagePull", "denied");
    let waiting = waiting_problem(&pod, CREATED_MS).unwrap_or_else(|| panic!("not shown"));
    let within_grace = task_configured("False", "ErrImagePull", &waiting.message, None);
    let configured_again = task_configured(
        "True",
        "SpecChanged",
        "Feature changed",
        Some("misconfigured"),
    );
    let other_problem = task_configured("False", "PodRejected", "refused", None);
    let ended_otherwise = task_configured("False", "ErrImagePull", "...", Some("lost"));
    assert_eq!(
        halt_shown_by_tasks(&[
            within_grace,
            configured_again,
            other_problem,
            ended_otherwise
        ]),
        None
    );
}

#[test]
fn an_attempt_that_ended_otherwise_clears_the_start_problem_its_pod_got_past() {
    let shown = task_configured("False", "ErrImagePull", "ErrImagePull: ...", Some("done"));
    let mut status = shown.status.clone().unwrap_or_default();
    record_on_task(&mut status, None, Some(1), CREATED_MS);
    let configured = conditions::find(&status.conditions, conditions::CONFIGURED)
        .unwrap_or_else(|| panic!("no Configured condition"));
    assert_eq!(
        (configured.status.as_str(), configured.reason.as_str()),
        ("True", "PodStarted")
    );
}

#[test]
fn a_pull_that_flips_to_back_off_keeps_the_problem_as_shown() {
    let shown = Problem {
        reason: "ErrImagePull",
        message: "ErrImagePull: pull access denied".to_owned(),
    };
    let mut status = TaskStatus::default();
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            conditions::CONFIGURED,
            conditions::STATUS_FALSE,
            shown.reason,
            shown.message.clone(),
            None,
            crate::controller::plan::time::time(CREATED_MS),
        ),
    );
    let back_off = Problem {
        reason: "ImagePullBackOff",
        message: "ImagePullBackOff: Back-off pulling image".to_owned(),
    };
    assert_eq!(as_shown(Some(&status), back_off), shown);
}

#[test]
fn a_different_start_problem_replaces_the_one_shown() {
    let missing_secret = Problem {
        reason: "CreateContainerConfigError",
        message: "secret not found".to_owned(),
    };
    assert_eq!(as_shown(None, missing_secret.clone()), missing_secret);
}
