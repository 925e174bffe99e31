use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::agent::{ClientFs, Confinement};
use crate::api::workspace::GitWorkspace;
use crate::api::{AgentSpec, VerifySpec};
use crate::controller::plan::pod::{AttemptPod, PodSettings, SidecarMode, attempt_pod};
use crate::controller::plan::pod_git::{GitAttemptKind, GitSteps, add_git_steps};
use crate::controller::testing::{args, container, pod_spec as spec};
use crate::engine::verification::AttemptKind;

const ANSWER: &str = "shop-planning-a1-answer";

fn agent() -> AgentSpec {
    AgentSpec {
        image: Some("ghcr.io/example/claude:1".to_owned()),
        command: vec!["claude-agent-acp".to_owned()],
        args: vec![],
        env: vec![],
        env_from: vec![],
        resources: None,
        idle_timeout_seconds: 600,
        total_timeout_seconds: 3600,
        client_fs: ClientFs::Auto,
        confinement: Confinement::BestEffort,
        gateway: None,
    }
}

/// The planning attempt's Pod of Feature `shop`, with its git steps when `git`.
fn planning_pod(mode: SidecarMode, git: bool) -> Pod {
    let agent = agent();
    let input = AttemptPod {
        namespace: "team",
        task: "shop-planning",
        task_id: "planning",
        feature: "shop",
        attempt_id: "shop-planning-a1",
        prompt: "# Plan the feature shop",
        owner: OwnerReference::default(),
        agent: &agent,
        model: None,
        overrides: None,
        kind: AttemptKind::Work,
        verify: &VerifySpec::default(),
        lease_duration_seconds: 60,
    };
    let settings = PodSettings {
        ralph_image: "ghcr.io/ralph/ralph:0.1".to_owned(),
        service_account: "ralph-agent".to_owned(),
        sidecar: mode,
        gateway_prices: Default::default(),
    };
    let mut pod = attempt_pod(&input, &settings).expect("pod builds");
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
                task_id: "planning",
                attempt: 1,
                agent_image: "ghcr.io/example/claude:1",
                kind: GitAttemptKind::Work {
                    verify_after: false,
                },
            },
        );
    }
    add_answer_upload(&mut pod, ANSWER);
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
    let env = container(&pod, SIDECAR_CONTAINER)
        .env
        .clone()
        .unwrap_or_default();
    let field = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
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
