use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, PodStatus, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::workspace::{GitAuthor, GitCredentialsRef};
use crate::controller::plan::pod::{AttemptPod, SidecarMode, attempt_pod};
use crate::controller::testing::{
    agent_spec, args, container, pod_settings, pod_spec as spec, volume,
};
use crate::engine::sigils::{Sigils, Verdict};
use crate::engine::testing;

fn git(url: &str) -> GitWorkspace {
    GitWorkspace {
        url: url.to_owned(),
        base_ref: "main".to_owned(),
        feature_branch: None,
        credentials_secret_ref: Some(GitCredentialsRef {
            name: "repo-creds".to_owned(),
            username_key: None,
            token_key: Some("token".to_owned()),
            ssh_private_key_key: None,
            known_hosts_key: None,
        }),
        author: Some(GitAuthor {
            name: "Ralph Bot".to_owned(),
            email: "bot@example.com".to_owned(),
        }),
        image: None,
    }
}

fn pod_with(git: &GitWorkspace, kind: GitAttemptKind) -> Pod {
    let agent = agent_spec();
    let input = AttemptPod {
        namespace: "team",
        task: "login-api",
        task_id: "api",
        feature: "login",
        attempt_id: "login-api-a2",
        prompt: "Work on task api.",
        owner: OwnerReference::default(),
        agent: &agent,
        model: None,
        overrides: None,
        kind: match kind {
            GitAttemptKind::Verify => AttemptKind::Verify,
            GitAttemptKind::Work { .. } => AttemptKind::Work,
        },
        verify: &crate::api::verify::VerifySpec::default(),
        lease_duration_seconds: 60,
    };
    let mut pod = attempt_pod(&input, &pod_settings(SidecarMode::Native)).expect("pod builds");
    add_git_steps(
        &mut pod,
        &GitSteps {
            git,
            feature: "login",
            task_id: "api",
            attempt: 2,
            agent_image: "ghcr.io/example/claude:1",
            kind,
        },
    );
    pod
}

fn pod() -> Pod {
    pod_with(
        &git("https://git.example.com/team/app.git"),
        GitAttemptKind::Work {
            verify_after: false,
        },
    )
}

fn credentials_volume(pod: &Pod) -> &Volume {
    volume(pod, CREDENTIALS_VOLUME)
}

fn mounts_of(c: &Container) -> impl Iterator<Item = &VolumeMount> {
    c.volume_mounts.iter().flatten()
}

#[test]
fn the_clone_runs_in_an_init_container_after_ralph_is_installed() {
    let p = pod();
    let init: Vec<&str> = spec(&p)
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    let install = init.iter().position(|n| *n == "install-ralph");
    let prepare = init.iter().position(|n| *n == PREPARE_CONTAINER);
    assert!(install < prepare && prepare.is_some(), "{init:?}");
}

#[test]
fn the_clone_step_names_repository_branches_task_and_attempt() {
    let p = pod();
    let joined = args(&p, PREPARE_CONTAINER).join(" ");
    for part in [
        "git prepare",
        "--url https://git.example.com/team/app.git",
        "--base-ref main",
        "--feature login",
        "--task api",
        "--attempt 2",
        "--credentials-secret repo-creds",
        "--author-name Ralph Bot",
    ] {
        assert!(joined.contains(part), "{part} missing in {joined}");
    }
}

#[test]
fn the_finishing_step_integrates_after_reading_the_runners_result_copy() {
    let p = pod();
    let finish = args(&p, FINISH_CONTAINER);
    let joined = finish.join(" ");
    assert!(joined.contains("git finish"), "{joined}");
    assert!(
        joined.contains(&format!("--result-file {RESULT_COPY}")),
        "{joined}"
    );
    assert!(joined.contains("--mode integrate"), "{joined}");
    let agent = container(&p, AGENT_CONTAINER)
        .command
        .clone()
        .unwrap_or_default();
    let copy = agent.iter().position(|a| a == "--result-copy");
    let separator = agent.iter().position(|a| a == "--");
    assert!(copy.is_some() && copy < separator, "{agent:?}");
    assert_eq!(
        agent.get(copy.unwrap_or_default() + 1).map(String::as_str),
        Some(RESULT_COPY)
    );
}

#[test]
fn the_git_steps_report_in_their_termination_message() {
    let p = pod();
    for name in [PREPARE_CONTAINER, FINISH_CONTAINER] {
        let c = container(&p, name);
        assert_eq!(c.termination_message_path.as_deref(), Some(TERMINATION_LOG));
        assert!(c.args.iter().flatten().any(|a| a == TERMINATION_LOG));
    }
}

#[test]
fn https_credentials_map_the_secrets_username_and_token_keys() {
    let p = pod();
    let secret = credentials_volume(&p)
        .secret
        .as_ref()
        .expect("secret volume");
    assert_eq!(secret.secret_name.as_deref(), Some("repo-creds"));
    let items: Vec<(&str, &str)> = secret
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(items, vec![("username", "username"), ("token", "token")]);
}

#[test]
fn ssh_credentials_map_the_key_and_known_hosts() {
    let p = pod_with(
        &git("ssh://git@git.example.com/team/app.git"),
        GitAttemptKind::Work {
            verify_after: false,
        },
    );
    let secret = credentials_volume(&p)
        .secret
        .as_ref()
        .expect("secret volume");
    let keys: Vec<&str> = secret
        .items
        .iter()
        .flatten()
        .map(|i| i.key.as_str())
        .collect();
    assert_eq!(keys, vec!["ssh-privatekey", "known_hosts"]);
}

#[test]
fn only_the_git_steps_mount_the_credentials() {
    let p = pod();
    let s = spec(&p);
    let holders: Vec<&str> = s
        .containers
        .iter()
        .chain(s.init_containers.iter().flatten())
        .filter(|c| mounts_of(c).any(|m| m.name == CREDENTIALS_VOLUME))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(holders, vec![FINISH_CONTAINER, PREPARE_CONTAINER]);
}

#[test]
fn the_agent_container_has_no_credential_in_env_files_or_mounts() {
    let p = pod();
    let agent = container(&p, AGENT_CONTAINER);
    let secret_volumes: Vec<&str> = spec(&p)
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.secret.is_some() || v.projected.is_some())
        .map(|v| v.name.as_str())
        .collect();
    assert!(
        mounts_of(agent).all(|m| !secret_volumes.contains(&m.name.as_str())),
        "agent mounts {:?}",
        agent.volume_mounts
    );
    assert!(
        mounts_of(agent).all(|m| m.name != STATE_VOLUME && m.name != SCRATCH_VOLUME),
        "the agent sees no git step scratch space"
    );
    let env = agent.env.iter().flatten();
    assert!(
        env.clone().all(|e| e
            .value_from
            .as_ref()
            .is_none_or(|v| v.secret_key_ref.is_none())),
        "no env var from a Secret"
    );
    assert!(
        agent
            .env_from
            .iter()
            .flatten()
            .all(|e| e.secret_ref.as_ref().is_none_or(|s| s.name != "repo-creds"))
    );
    let command = agent
        .command
        .iter()
        .flatten()
        .chain(agent.args.iter().flatten());
    assert!(command.clone().all(|a| !a.contains(CREDENTIALS_DIR)));
}

#[test]
fn the_git_steps_run_restricted_with_a_private_scratch_home() {
    let p = pod();
    for name in [PREPARE_CONTAINER, FINISH_CONTAINER] {
        let c = container(&p, name);
        let sc = c.security_context.as_ref().expect("security context");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert!(mounts_of(c).any(|m| m.name == SCRATCH_VOLUME && m.mount_path == SCRATCH));
        assert_eq!(c.image.as_deref(), Some("ghcr.io/example/claude:1"));
    }
}

#[test]
fn a_work_attempt_to_be_verified_pushes_its_work_branch_only() {
    let p = pod_with(
        &git("https://git.example.com/team/app.git"),
        GitAttemptKind::Work { verify_after: true },
    );
    assert!(
        args(&p, FINISH_CONTAINER)
            .join(" ")
            .contains("--mode push-work-branch")
    );
}

#[test]
fn a_verifier_starts_from_the_work_branch_and_integrates() {
    let p = pod_with(
        &git("https://git.example.com/team/app.git"),
        GitAttemptKind::Verify,
    );
    let prepare = args(&p, PREPARE_CONTAINER);
    assert!(prepare.iter().any(|a| a == "--from-work-branch"));
    let finish = args(&p, FINISH_CONTAINER);
    assert!(finish.join(" ").contains("--mode integrate"));
    assert!(finish.iter().any(|a| a == "--verifier"));
}

fn with_statuses(
    mut pod: Pod,
    phase: &str,
    agent_message: Option<String>,
    finish_message: Option<String>,
) -> Pod {
    let terminated = |message: String| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 0,
            reason: Some("Completed".to_owned()),
            message: Some(message),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    };
    let status = |name: &str, message: Option<String>| ContainerStatus {
        name: name.to_owned(),
        state: message.map(terminated),
        ..ContainerStatus::default()
    };
    pod.status = Some(PodStatus {
        phase: Some(phase.to_owned()),
        container_statuses: Some(vec![
            status(AGENT_CONTAINER, agent_message),
            status(FINISH_CONTAINER, finish_message),
        ]),
        ..PodStatus::default()
    });
    pod
}

fn done_json() -> String {
    serde_json::to_string(&testing::done("api")).expect("json")
}

fn view(pod: &Pod) -> RunView {
    crate::controller::plan::run_view::run_view(Some(&cached(pod)), true, None)
}

/// `pod` as the Pod cache keeps it.
fn cached(pod: &Pod) -> CachedPod {
    CachedPod::from(pod.clone())
}

#[test]
fn a_done_attempt_runs_on_while_its_work_is_integrated() {
    let p = with_statuses(pod(), "Running", Some(done_json()), None);
    assert_eq!(view(&p), RunView::Running);
}

#[test]
fn the_wait_for_integration_holds_without_the_pod_spec_the_cache_drops() {
    let mut p = with_statuses(pod(), "Running", Some(done_json()), None);
    p.spec = None;
    assert_eq!(view(&p), RunView::Running);
}

#[test]
fn a_done_attempt_ends_once_the_finishing_step_reported() {
    let report = WorkspaceReport::new(WorkspaceOutcome::Integrated);
    let p = with_statuses(
        pod(),
        "Succeeded",
        Some(done_json()),
        Some(serde_json::to_string(&report).expect("json")),
    );
    assert!(matches!(
        view(&p),
        RunView::Ended {
            result: Some(_),
            ..
        }
    ));
    assert_eq!(finish_report(&cached(&p)), Some(report));
}

fn verifier_pod() -> Pod {
    pod_with(
        &git("https://git.example.com/team/app.git"),
        GitAttemptKind::Verify,
    )
}

fn verdict_json(verdict: Verdict) -> String {
    let sigils = Sigils {
        verdict: Some(verdict),
        ..Sigils::default()
    };
    serde_json::to_string(&testing::with_sigils("api", sigils)).expect("json")
}

#[test]
fn a_passing_verification_runs_on_while_the_work_is_integrated() {
    let pass = verdict_json(Verdict::Pass("api".to_owned()));
    let p = with_statuses(verifier_pod(), "Running", Some(pass), None);
    assert_eq!(view(&p), RunView::Running);
}

#[test]
fn a_rejecting_verification_ends_without_waiting_for_the_git_step() {
    let fail = verdict_json(Verdict::Fail("api".to_owned()));
    let p = with_statuses(verifier_pod(), "Running", Some(fail), None);
    assert!(matches!(
        view(&p),
        RunView::Ended {
            result: Some(_),
            ..
        }
    ));
}

#[test]
fn an_attempt_without_a_done_verdict_ends_without_waiting_for_the_git_step() {
    let failed = serde_json::to_string(&testing::failed("api", None)).expect("json");
    let p = with_statuses(pod(), "Running", Some(failed), None);
    assert!(matches!(
        view(&p),
        RunView::Ended {
            result: Some(_),
            ..
        }
    ));
}

/// The result of an attempt whose Pod `pod` ended with one.
fn ended_result(pod: &Pod) -> AttemptResult {
    match view(pod) {
        RunView::Ended {
            result: Some(result),
            ..
        } => *result,
        other => panic!("not ended with a result: {other:?}"),
    }
}

fn with_failed_clone(mut pod: Pod, report: &WorkspaceReport) -> Pod {
    pod.status = Some(PodStatus {
        phase: Some("Failed".to_owned()),
        init_container_statuses: Some(vec![ContainerStatus {
            name: PREPARE_CONTAINER.to_owned(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    message: Some(serde_json::to_string(report).expect("json")),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    });
    pod
}

#[test]
fn a_clone_refused_for_its_credentials_ends_the_attempt_misconfigured_naming_the_secret() {
    let report = WorkspaceReport {
        message: Some(
            "credentials Secret `repo-creds`: https://git.example.com refused".to_owned(),
        ),
        ..WorkspaceReport::new(WorkspaceOutcome::Misconfigured)
    };
    let mut p = with_failed_clone(pod(), &report);
    p.spec = None;
    p.metadata.labels = Some([(TASK_LABEL.to_owned(), "api".to_owned())].into());
    let result = ended_result(&p);
    assert_eq!(
        result.outcome,
        crate::engine::attempt::OutcomeClass::Misconfigured
    );
    let problem = result.misconfiguration.expect("misconfiguration").problem;
    assert!(problem.contains("repo-creds"), "{problem}");
}

#[test]
fn an_unreachable_server_at_clone_time_is_a_crash_to_retry() {
    let report = WorkspaceReport {
        message: Some("cannot reach https://git.example.com".to_owned()),
        ..WorkspaceReport::new(WorkspaceOutcome::Failed)
    };
    let p = with_failed_clone(pod(), &report);
    let result = ended_result(&p);
    assert_eq!(
        result.outcome,
        crate::engine::attempt::OutcomeClass::Crashed
    );
    assert!(result.crash.is_some_and(|c| c.contains("cannot reach")));
}

#[test]
fn a_finishing_step_that_ended_without_a_report_is_a_failed_integration() {
    let p = with_statuses(pod(), "Failed", Some(done_json()), Some(String::new()));
    let report = finish_report(&cached(&p)).expect("a report");
    assert_eq!(report.outcome, WorkspaceOutcome::Failed);
    assert!(
        report
            .message
            .is_some_and(|m| m.contains("nothing was integrated"))
    );
}

#[test]
fn a_pod_that_ended_before_its_finishing_step_is_a_failed_integration() {
    let p = with_statuses(pod(), "Failed", Some(done_json()), None);
    assert!(matches!(
        view(&p),
        RunView::Ended {
            result: Some(_),
            ..
        }
    ));
    let report = finish_report(&cached(&p)).expect("a report");
    assert_eq!(report.outcome, WorkspaceOutcome::Failed);
}
