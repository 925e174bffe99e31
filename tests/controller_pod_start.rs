//! Agent Pods that cannot start (the real controller against the fake API server; the
//! kubelet stand-in leaves a Pod Pending with a container waiting, as a kubelet that cannot
//! pull an image or find a Secret does): the Task and the Feature say why, with the
//! kubelet's reason, in one Warning Event; the attempt ends misconfigured, no retry is
//! charged and no new Pod is created until the spec changes; a problem that clears within
//! its grace lets the attempt go on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{harness, kubelet_standin};

use harness::{Harness, assert_mentions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use ralph::api::AttemptOutcome;
use ralph::controller::plan::pod_start::START_GRACE_MS;
use ralph::engine::dag::TaskPhase;

const PULL_FAILED: &str = "failed to pull and unpack image \"agent:test\": pull access denied";

/// A harness whose kubelet stand-in confirms the graceful deletion of bound Pods.
async fn start() -> (Harness, kubelet_standin::KubeletStandIn) {
    let h = Harness::start().await;
    let kubelet = kubelet_standin::KubeletStandIn::manual(h.client.clone(), Some(harness::NS));
    (h, kubelet)
}

/// Starts the one-task Feature `name`; the kubelet cannot start the first attempt's agent
/// container for `reason` (saying `message`). Returns the Pod's name.
async fn cannot_start(h: &Harness, name: &str, reason: &str, message: &str) -> String {
    let pod = h.start_one_task_feature(name).await.name_any();
    kubelet_standin::manual::set_waiting(&h.pods(), &pod, "agent", reason, message)
        .await
        .expect("report the agent container waiting");
    pod
}

/// [`cannot_start`], until the kubelet's grace for the problem is over and the attempt is
/// ruled (the controller keeps the claim of a Pod that has not started meanwhile, so the
/// ruling comes from the grace, not from a lapsed claim).
async fn cannot_start_past_its_grace(
    h: &Harness,
    name: &str,
    reason: &str,
    message: &str,
) -> String {
    let pod = cannot_start(h, name, reason, message).await;
    let task = format!("{name}-a");
    let limit = std::time::Duration::from_millis(START_GRACE_MS.unsigned_abs()) * 2;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = h.task_status(&task).await;
        if attempt_outcomes(&status)
            .first()
            .copied()
            .flatten()
            .is_some()
        {
            return pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{task}: attempt never ruled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn attempt_outcomes(status: &ralph::api::TaskStatus) -> Vec<Option<AttemptOutcome>> {
    status.attempts.iter().map(|a| a.outcome).collect()
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_is_a_task_condition_naming_the_pod_image_and_fix() {
    let (h, _kubelet) = start().await;
    cannot_start(&h, "pull", "ErrImagePull", PULL_FAILED).await;

    let condition = h
        .wait_for_task_condition("pull-a", "Configured", "ErrImagePull")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(
        &condition.message,
        &[
            "team/pull-a-a1",
            "container agent",
            "agent:test",
            "pull access denied",
            "spec.agent.image",
            "imagePullSecrets",
        ],
    );
    h.stop().await;
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_is_the_features_configured_condition() {
    let (h, _kubelet) = start().await;
    cannot_start(&h, "pullf", "ErrImagePull", PULL_FAILED).await;

    let condition = h
        .wait_for_feature_condition("pullf", "Configured", "ErrImagePull")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(&condition.message, &["team/pullf-a-a1", "spec.agent.image"]);
    h.stop().await;
}

#[tokio::test]
async fn a_pod_that_cannot_start_ends_its_attempt_misconfigured_without_a_retry_or_a_new_pod() {
    let (h, _kubelet) = start().await;
    let pod = cannot_start_past_its_grace(&h, "noloop", "ErrImagePull", PULL_FAILED).await;
    h.wait_for_feature_condition("noloop", "Configured", "ErrImagePull")
        .await;
    // The Pod that cannot start is deleted (it never ran: there are no logs to keep).
    h.wait_for_pod_gone(&pod).await;

    let status = h.task_status("noloop-a").await;
    assert_eq!(status.phase, TaskPhase::Pending);
    assert_eq!(status.retry_count, 0);
    assert_eq!(
        attempt_outcomes(&status),
        vec![Some(AttemptOutcome::Misconfigured)]
    );
    assert!(h.agent_pods().await.is_empty());
    let mut warnings = 0;
    for reason in ["ErrImagePull", "AgentMisconfigured"] {
        warnings += h.events_with_reason(reason).await.len();
    }
    assert_eq!(warnings, 1, "one Warning Event for the problem");
    h.stop().await;
}

#[tokio::test]
async fn as_soon_as_the_pod_waits_the_task_and_feature_say_so_with_one_warning() {
    let (h, _kubelet) = start().await;
    cannot_start(&h, "early", "ErrImagePull", PULL_FAILED).await;

    let condition = h
        .wait_for_task_condition("early-a", "Configured", "ErrImagePull")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(
        &condition.message,
        &[
            "team/early-a-a1",
            "pull access denied",
            "unless the kubelet starts it first",
        ],
    );
    h.wait_for_feature_condition("early", "Configured", "ErrImagePull")
        .await;
    assert_eq!(h.events_with_reason("ErrImagePull").await.len(), 1);
    assert_eq!(h.task_status("early-a").await.phase, TaskPhase::Running);
    h.stop().await;
}

#[tokio::test]
async fn once_the_image_is_fixed_in_the_spec_the_work_resumes_and_succeeds() {
    let (h, _kubelet) = start().await;
    let pod = cannot_start_past_its_grace(&h, "fixed", "ErrImagePull", PULL_FAILED).await;
    h.wait_for_feature_condition("fixed", "Configured", "ErrImagePull")
        .await;
    h.wait_for_pod_gone(&pod).await;

    h.patch_feature_spec(
        "fixed",
        serde_json::json!({"agent": {"image": "agent:fixed", "command": ["scripted-agent"]}}),
    )
    .await;
    let retry = h.wait_for_pod("fixed-a-a2").await;
    h.finish_done_to_complete(&retry, "fixed").await;

    let status = h.task_status("fixed-a").await;
    assert_eq!(status.retry_count, 0);
    let configured = h
        .wait_for_feature_condition("fixed", "Configured", "Configured")
        .await;
    assert_eq!(configured.status, "True");
    h.stop().await;
}

#[tokio::test]
async fn a_missing_secret_is_a_condition_that_names_it_and_says_to_create_it() {
    let (h, _kubelet) = start().await;
    let message = "secret \"agent-credentials\" not found";
    cannot_start(&h, "nosecret", "CreateContainerConfigError", message).await;

    let condition = h
        .wait_for_task_condition("nosecret-a", "Configured", "CreateContainerConfigError")
        .await;
    assert_mentions(
        &condition.message,
        &[
            "team/nosecret-a-a1",
            "secret \"agent-credentials\" not found",
            "create the Secret",
            "namespace team",
        ],
    );
    h.wait_for_feature_condition("nosecret", "Configured", "CreateContainerConfigError")
        .await;
    h.stop().await;
}

#[tokio::test]
async fn an_invalid_image_name_ends_the_attempt_without_waiting_for_the_claim() {
    let (h, _kubelet) = start().await;
    cannot_start(
        &h,
        "badname",
        "InvalidImageName",
        "Failed to apply default image tag \"Agent:Test\": invalid reference format",
    )
    .await;

    h.wait_for_task_condition("badname-a", "Configured", "InvalidImageName")
        .await;
    let status = h.task_status("badname-a").await;
    assert_eq!(
        attempt_outcomes(&status),
        vec![Some(AttemptOutcome::Misconfigured)]
    );
    h.stop().await;
}

#[tokio::test]
async fn a_pull_error_that_clears_within_the_grace_lets_the_attempt_go_on() {
    let (h, _kubelet) = start().await;
    let pod = cannot_start(&h, "hiccup", "ErrImagePull", PULL_FAILED).await;
    h.wait_for_task_condition("hiccup-a", "Configured", "ErrImagePull")
        .await;
    // The registry answers again: the kubelet's next pull succeeds and the agent runs.
    let pod = kubelet_standin::manual::set_running(&h.pods(), &pod)
        .await
        .expect("report the Pod running");
    h.finish_done_to_complete(&pod, "hiccup").await;

    let status = h.task_status("hiccup-a").await;
    assert_eq!(attempt_outcomes(&status), vec![Some(AttemptOutcome::Done)]);
    assert_eq!(status.retry_count, 0);
    assert!(
        status
            .conditions
            .iter()
            .all(|c| !(c.type_ == "Configured" && c.status == "False")),
        "{:?}",
        status.conditions
    );
    assert!(h.events_with_reason("AgentMisconfigured").await.is_empty());
    let configured = h
        .wait_for_feature_condition("hiccup", "Configured", "Configured")
        .await;
    assert_eq!(configured.status, "True");
    h.stop().await;
}

#[tokio::test]
async fn once_the_missing_secret_exists_stamping_the_pod_template_resumes_the_work() {
    let (h, _kubelet) = start().await;
    let message = "secret \"agent-credentials\" not found";
    let pod =
        cannot_start_past_its_grace(&h, "stamped", "CreateContainerConfigError", message).await;
    h.wait_for_feature_condition("stamped", "Configured", "CreateContainerConfigError")
        .await;
    h.wait_for_pod_gone(&pod).await;

    // The user creates the Secret (outside the spec), then changes the spec without changing
    // the work, as `kubectl rollout restart` does (docs/deploy.md).
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent-credentials"}, "stringData": {"token": "t"}
    }))
    .expect("Secret");
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), harness::NS);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
    h.patch_feature_spec(
        "stamped",
        serde_json::json!({"podTemplate": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": "2026-11-23T16:00:00Z"
        }}}),
    )
    .await;
    let retry = h.wait_for_pod("stamped-a-a2").await;
    h.finish_done_to_complete(&retry, "stamped").await;
    assert_eq!(h.task_status("stamped-a").await.retry_count, 0);
    h.stop().await;
}

/// How late the controller's Feature watch delivers changes in the lagging-cache test.
const FEATURE_CACHE_LAG: std::time::Duration = std::time::Duration::from_millis(500);

#[tokio::test]
async fn a_feature_cache_behind_the_halt_starts_no_new_pod() {
    let h = Harness::start_lagging("features", FEATURE_CACHE_LAG).await;
    let _kubelet = kubelet_standin::KubeletStandIn::manual(h.client.clone(), Some(harness::NS));
    let pod = cannot_start(
        &h,
        "lagging",
        "InvalidImageName",
        "invalid reference format",
    )
    .await;
    h.wait_for_feature_condition("lagging", "Configured", "InvalidImageName")
        .await;
    h.wait_for_pod_gone(&pod).await;
    // Reconciles triggered meanwhile read a Feature without the halt; the Task shows it.
    tokio::time::sleep(FEATURE_CACHE_LAG * 4).await;

    assert!(h.agent_pods().await.is_empty());
    let status = h.task_status("lagging-a").await;
    assert_eq!(
        attempt_outcomes(&status),
        vec![Some(AttemptOutcome::Misconfigured)]
    );
    h.stop().await;
}

/// What runc says when a Pod mounts a directory where its image has a file.
const NOT_A_DIRECTORY: &str = "failed to create containerd task: failed to create shim task: \
    OCI runtime create failed: runc create failed: unable to start container process: error \
    during container init: error mounting \"/var/lib/kubelet/pods/x/volumes/kubernetes.io~empty-dir/ralph-bin\" \
    to rootfs at \"/ralph/bin\": not a directory: unknown";

#[tokio::test]
async fn a_container_the_runtime_could_not_start_is_misconfigured_at_once_and_never_parsed_as_a_result()
 {
    let (h, _kubelet) = start().await;
    let pod = h.start_one_task_feature("mount").await.name_any();
    let start_error = kubelet_standin::Termination {
        exit_code: 128,
        reason: "StartError".to_owned(),
        message: Some(NOT_A_DIRECTORY.to_owned()),
    };
    kubelet_standin::manual::set_terminated(&h.pods(), &pod, &start_error)
        .await
        .expect("report the agent container never started");

    let condition = h
        .wait_for_task_condition("mount-a", "Configured", "StartError")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(
        &condition.message,
        &[
            "team/mount-a-a1",
            "container agent",
            "not a directory",
            "spec.agent.image",
        ],
    );
    let status = h.task_status("mount-a").await;
    assert_eq!(status.retry_count, 0);
    assert_eq!(
        attempt_outcomes(&status),
        vec![Some(AttemptOutcome::Misconfigured)]
    );
    let crash = status.attempts.first().and_then(|a| a.crash.clone());
    assert_eq!(crash, None, "parsed as a result");
    h.stop().await;
}

#[tokio::test]
async fn a_pod_that_never_starts_is_released_at_its_start_timeout_without_charging_a_retry() {
    let (h, _kubelet) = start().await;
    let extra = serde_json::json!({"podStartTimeoutSeconds": 30, "leaseDurationSeconds": 15});
    h.create("late", harness::one_task(), extra).await;
    // No kubelet ever starts it (manual stand-in: the Pod stays Pending).
    let first = h.wait_for_pod("late-a-a1").await.name_any();
    let waiting = h
        .wait_for_task_condition("late-a", "AttemptStarted", "PodPending")
        .await;
    assert_eq!(waiting.status, "False");
    assert_mentions(
        &waiting.message,
        &["late-a-a1 waits to start", "no retry charged"],
    );

    let limit = std::time::Duration::from_secs(90);
    let deadline = tokio::time::Instant::now() + limit;
    let second = loop {
        if let Some(pod) = h.pods().get_opt("late-a-a2").await.expect("get") {
            break pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiting attempt was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    h.wait_for_pod_gone(&first).await;
    let status = h.task_status("late-a").await;
    assert_eq!(status.retry_count, 0);
    assert_eq!(
        attempt_outcomes(&status)[0],
        Some(AttemptOutcome::Interrupted)
    );
    h.finish_done_to_complete(&second, "late").await;
    h.stop().await;
}

#[tokio::test]
async fn a_feature_halted_on_a_pod_that_cannot_start_says_halted() {
    let (h, _kubelet) = start().await;
    cannot_start(&h, "halt", "InvalidImageName", "couldn't parse image name").await;
    let feature = h.wait_for_feature_phase("halt", "Halted").await;
    let status = feature.status.unwrap_or_default();
    assert_eq!(status.counts.running, 0);
    h.stop().await;
}
