use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::VerifySpec;
use crate::api::workspace::GitWorkspace;
use crate::controller::plan::pod::SIDECAR_CONTAINER;
use crate::controller::plan::pod::{AttemptPod, SidecarMode, attempt_pod};
use crate::controller::plan::pod_git::{GitAttemptKind, GitSteps, add_git_steps};
use crate::controller::testing::{
    agent_spec, args, container, env_entry, pod_settings, pod_spec as spec,
};
use crate::engine::verification::AttemptKind;

const ANSWER: &str = "shop-planning-a1-answer";

/// The planning attempt's Pod of Feature `shop`, with its git steps when `git`.
fn planning_pod(mode: SidecarMode, git: bool) -> Pod {
    let mut pod = pod_of("planning", mode, git);
    add_answer_upload(&mut pod, ANSWER);
    pod
}

const PROPOSAL: &str = "shop-api-a1-proposal";

/// A work attempt's Pod of task `api` of the planning Feature `shop`.
fn worker_pod(mode: SidecarMode, git: bool) -> Pod {
    let mut pod = pod_of("api", mode, git);
    add_proposal_upload(&mut pod, "api", PROPOSAL);
    pod
}

/// The first attempt's Pod of task `task_id` of Feature `shop`, with its git steps when
/// `git`.
fn pod_of(task_id: &str, mode: SidecarMode, git: bool) -> Pod {
    let agent = agent_spec();
    let task = format!("shop-{task_id}");
    let attempt = format!("{task}-a1");
    let input = AttemptPod {
        namespace: "team",
        task: &task,
        task_id,
        feature: "shop",
        attempt_id: &attempt,
        prompt: "# Plan the feature shop",
        owner: OwnerReference::default(),
        agent: &agent,
        model: None,
        overrides: None,
        kind: AttemptKind::Work,
        verify: &VerifySpec::default(),
        lease_duration_seconds: 60,
    };
    let mut pod = attempt_pod(&input, &pod_settings(mode)).expect("pod builds");
    if git {
        let repository = GitWorkspace {
            url: "https://git.example.com/shop.git".to_owned(),
            base_ref: "main".to_owned(),
            feature_branch: None,
            credentials_secret_ref: None,
            author: None,
            image: None,
        };
        add_git_steps(
            &mut pod,
            &GitSteps {
                git: &repository,
                feature: "shop",
                task_id,
                attempt: 1,
                agent_image: "ghcr.io/example/claude:1",
                kind: GitAttemptKind::Work {
                    verify_after: false,
                },
            },
        );
    }
    pod
}

fn flag(args: &[String], name: &str) -> Option<String> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

#[test]
fn the_claim_keeper_uploads_the_answer_from_the_workspace_to_the_named_config_map() {
    let pod = planning_pod(SidecarMode::Native, false);
    let args = args(&pod, SIDECAR_CONTAINER);
    assert_eq!(
        flag(&args, "--answer-dir").as_deref(),
        Some("/workspace/.ralph-planning")
    );
    assert_eq!(flag(&args, "--answer-config-map").as_deref(), Some(ANSWER));
    assert_eq!(flag(&args, "--answer-feature").as_deref(), Some("shop"));
}

#[test]
fn the_claim_keeper_mounts_the_workspace_read_only() {
    for mode in [SidecarMode::Native, SidecarMode::Plain] {
        let pod = planning_pod(mode, false);
        let mounted = container(&pod, SIDECAR_CONTAINER)
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "workspace")
            .cloned()
            .expect("the workspace is mounted");
        assert_eq!(mounted.mount_path, WORKSPACE);
        assert_eq!(mounted.read_only, Some(true), "{mode:?}");
    }
}

#[test]
fn the_claim_keeper_learns_its_pods_name_and_uid_from_the_downward_api() {
    let pod = planning_pod(SidecarMode::Native, false);
    let field = |name: &str| {
        env_entry(&pod, SIDECAR_CONTAINER, name)
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.clone())
    };
    assert_eq!(field(POD_NAME_ENV).as_deref(), Some("metadata.name"));
    assert_eq!(field(POD_UID_ENV).as_deref(), Some("metadata.uid"));
}

#[test]
fn a_planning_pod_in_a_git_workspace_clones_but_runs_no_finishing_step() {
    let pod = planning_pod(SidecarMode::Native, true);
    let spec = spec(&pod);
    assert!(
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == super::super::pod_git::PREPARE_CONTAINER),
        "the planner reads the repository"
    );
    assert!(!spec.containers.iter().any(|c| c.name == FINISH_CONTAINER));
    let args = args(&pod, SIDECAR_CONTAINER);
    assert!(
        !args.contains(&in_sidecar(GIT_FINISH_ENDED)),
        "the claim-keeper must not wait for a step that never runs: {args:?}"
    );
}

#[test]
fn only_the_claim_keeper_mounts_the_token_in_a_planning_pod() {
    let pod = planning_pod(SidecarMode::Plain, true);
    let spec = spec(&pod);
    let with_token: Vec<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| c.volume_mounts.iter().flatten().any(|m| m.name == "token"))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(with_token, [SIDECAR_CONTAINER]);
}

fn feature(planning: bool) -> Feature {
    let mut spec = serde_json::json!({"agent": {"image": "agent:1", "command": ["agent"]}});
    if planning {
        spec["planning"] = serde_json::json!({"maxTasks": 10});
    }
    crate::controller::testing::object(
        "Feature",
        serde_json::json!({"name": "shop", "namespace": "team", "uid": "f-1"}),
        spec,
    )
}

#[test]
fn only_work_attempts_of_a_planning_feature_upload_proposals() {
    assert!(uploads_proposals(&feature(true), false, AttemptKind::Work));
    assert!(!uploads_proposals(
        &feature(false),
        false,
        AttemptKind::Work
    ));
    assert!(!uploads_proposals(&feature(true), true, AttemptKind::Work));
    assert!(!uploads_proposals(
        &feature(true),
        false,
        AttemptKind::Verify
    ));
}

#[test]
fn a_worker_pods_runner_writes_proposals_to_the_run_directory_and_the_claim_keeper_uploads_them() {
    for (mode, git) in [(SidecarMode::Native, false), (SidecarMode::Plain, true)] {
        let pod = worker_pod(mode, git);
        let runner = container(&pod, AGENT_CONTAINER)
            .command
            .clone()
            .unwrap_or_default();
        let dashes = runner
            .iter()
            .position(|w| w == "--")
            .expect("the agent command");
        assert_eq!(
            flag(&runner[..dashes], "--proposal-file").as_deref(),
            Some(PROPOSAL_FILE),
            "a runner flag, before the agent command: {runner:?}"
        );
        let keeper = args(&pod, SIDECAR_CONTAINER);
        assert_eq!(
            flag(&keeper, "--proposal-file"),
            Some(in_sidecar(PROPOSAL_FILE))
        );
        assert_eq!(
            flag(&keeper, "--proposal-config-map").as_deref(),
            Some(PROPOSAL)
        );
        assert_eq!(flag(&keeper, "--proposal-feature").as_deref(), Some("shop"));
        assert_eq!(flag(&keeper, "--proposal-task").as_deref(), Some("api"));
        assert!(!keeper.contains(&"--answer-dir".to_owned()), "{keeper:?}");
    }
}

#[test]
fn a_worker_pod_keeps_its_finishing_step_and_never_shows_the_workspace_to_the_claim_keeper() {
    let pod = worker_pod(SidecarMode::Native, true);
    assert!(
        spec(&pod)
            .containers
            .iter()
            .any(|c| c.name == FINISH_CONTAINER)
    );
    let workspace_mounted = container(&pod, SIDECAR_CONTAINER)
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.name == "workspace");
    assert!(!workspace_mounted);
}

#[test]
fn a_planning_pod_uploads_no_proposal() {
    let pod = planning_pod(SidecarMode::Native, false);
    let runner = container(&pod, AGENT_CONTAINER)
        .command
        .clone()
        .unwrap_or_default();
    assert!(!runner.contains(&"--proposal-file".to_owned()));
    assert!(!args(&pod, SIDECAR_CONTAINER).contains(&"--proposal-file".to_owned()));
}
