use k8s_openapi::api::core::v1::{EnvFromSource, SecretEnvSource, Toleration};

use super::*;
use crate::api::agent::{ClientFs, Confinement};
use crate::controller::testing::{
    agent_spec, container, env_entry, pod_settings, pod_spec as spec, volume,
};

/// The example agent, run with `--verbose` and its model key from Secret `anthropic`.
fn agent() -> AgentSpec {
    AgentSpec {
        args: vec!["--verbose".to_owned()],
        env_from: vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "anthropic".to_owned(),
                optional: None,
            }),
            ..EnvFromSource::default()
        }],
        ..agent_spec()
    }
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "ralph.dev/v1alpha1".to_owned(),
        kind: "Task".to_owned(),
        name: "hello-build".to_owned(),
        uid: "uid-1".to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn build_with(
    agent: &AgentSpec,
    overrides: Option<&PodTemplateOverrides>,
    mode: SidecarMode,
) -> Result<Pod, PodError> {
    let input = AttemptPod {
        namespace: "team",
        task: "hello-build",
        task_id: "build",
        feature: "hello",
        attempt_id: "hello-build-a2",
        prompt: "Work on task build.",
        owner: owner(),
        agent,
        model: None,
        overrides,
        kind: AttemptKind::Work,
        verify: &VerifySpec::default(),
        lease_duration_seconds: 60,
    };
    attempt_pod(&input, &pod_settings(mode))
}

fn build(mode: SidecarMode) -> Pod {
    match build_with(&agent(), None, mode) {
        Ok(pod) => pod,
        Err(error) => panic!("pod not built: {error}"),
    }
}

fn mounts(c: &Container) -> Vec<(&str, &str)> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect()
}

#[test]
fn pod_is_named_for_the_attempt_and_owned_by_the_task() {
    let pod = build(SidecarMode::Native);
    assert_eq!(pod.metadata.name.as_deref(), Some("hello-build-a2"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("team"));
    assert_eq!(pod.metadata.owner_references, Some(vec![owner()]));
}

#[test]
fn pod_carries_feature_task_and_attempt_labels() {
    let labels = build(SidecarMode::Native)
        .metadata
        .labels
        .unwrap_or_default();
    let label = |key: &str| labels.get(key).map(String::as_str);
    assert_eq!(
        [FEATURE_LABEL, TASK_LABEL, TASK_OBJECT_LABEL, ATTEMPT_LABEL].map(label),
        [
            Some("hello"),
            Some("build"),
            Some("hello-build"),
            Some("hello-build-a2")
        ]
    );
}

#[test]
fn pod_never_restarts_and_mounts_no_token_by_default() {
    let pod = build(SidecarMode::Native);
    assert_eq!(spec(&pod).restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec(&pod).automount_service_account_token, Some(false));
}

#[test]
fn init_container_installs_ralph_from_the_controller_image() {
    let pod = build(SidecarMode::Native);
    let first = &spec(&pod)
        .init_containers
        .as_ref()
        .expect("init containers")[0];
    assert_eq!(first.image.as_deref(), Some("ghcr.io/ralph/ralph:0.1"));
    assert_eq!(
        first.args,
        Some(strings(["install", "--to", "/install/ralph"]))
    );
    // `/ralph` is the binary in the ralph image, so the volume mounts beside it.
    assert_eq!(mounts(first), vec![("ralph-bin", "/install")]);
}

#[test]
fn agent_container_runs_the_runner_around_the_agent_command() {
    let pod = build(SidecarMode::Native);
    let agent = container(&pod, AGENT_CONTAINER);
    assert_eq!(agent.image.as_deref(), Some("ghcr.io/example/claude:1"));
    assert_eq!(
        agent.command,
        Some(strings([
            "/ralph/bin/ralph",
            "runner",
            "--task",
            "build",
            "--attempt",
            "hello-build-a2",
            "--prompt-file",
            "/ralph/prompt/prompt.md",
            "--workspace",
            "/workspace",
            "--heartbeat-file",
            "/ralph/run/runner.beat",
            "--ended-file",
            "/ralph/run/runner.ended",
            "--stop-file",
            "/ralph/run/claim-lost",
            "--result-file",
            "/dev/termination-log",
            "--idle-timeout",
            "600s",
            "--total-timeout",
            "3600s",
            "--",
            "claude-agent-acp",
            "--verbose",
        ]))
    );
    assert_eq!(agent.termination_message_policy.as_deref(), Some("File"));
}

#[test]
fn sidecar_reads_the_heartbeat_from_the_volume_the_runner_writes() {
    let pod = build(SidecarMode::Native);
    let sidecar = container(&pod, SIDECAR_CONTAINER);
    let agent = container(&pod, AGENT_CONTAINER);
    assert!(mounts(sidecar).contains(&("run", "/ralph-run")));
    assert!(mounts(agent).contains(&("run", "/ralph/run")));
}

#[test]
fn agent_container_gets_no_api_token_mount() {
    let pod = build(SidecarMode::Native);
    let agent = container(&pod, AGENT_CONTAINER);
    assert!(
        !mounts(agent).iter().any(|(name, _)| *name == "token"),
        "{:?}",
        mounts(agent)
    );
}

#[test]
fn agent_container_mounts_prompt_workspace_and_writable_scratch_dirs() {
    let pod = build(SidecarMode::Native);
    let m = mounts(container(&pod, AGENT_CONTAINER));
    for expected in [
        ("prompt", "/ralph/prompt"),
        ("workspace", "/workspace"),
        ("tmp", "/tmp"),
        ("home", "/home/agent"),
        ("run", "/ralph/run"),
    ] {
        assert!(m.contains(&expected), "missing {expected:?} in {m:?}");
    }
}

#[test]
fn prompt_travels_in_a_pod_annotation() {
    let pod = build(SidecarMode::Native);
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(PROMPT_ANNOTATION).map(String::as_str),
        Some("Work on task build.")
    );
}

#[test]
fn prompt_volume_mounts_the_prompt_annotation() {
    let pod = build(SidecarMode::Native);
    let files = volume(&pod, "prompt")
        .downward_api
        .as_ref()
        .and_then(|d| d.items.clone())
        .unwrap_or_default();
    let paths: Vec<(String, String)> = files
        .into_iter()
        .filter_map(|f| Some((f.path, f.field_ref?.field_path)))
        .collect();
    assert_eq!(
        paths,
        [(
            "prompt.md".to_owned(),
            "metadata.annotations['ralph.dev/prompt']".to_owned()
        )]
    );
}

#[test]
fn every_container_runs_restricted() {
    let pod = build(SidecarMode::Native);
    let s = spec(&pod);
    for c in s
        .containers
        .iter()
        .chain(s.init_containers.iter().flatten())
    {
        let sc = c.security_context.as_ref().expect("security context");
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()]),
            "{}",
            c.name
        );
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
    }
}

#[test]
fn agent_env_from_secrets_is_passed_by_reference_only() {
    let pod = build(SidecarMode::Native);
    let agent = container(&pod, AGENT_CONTAINER);
    assert_eq!(agent.env_from, Some(agent_spec_env_from()));
}

fn agent_spec_env_from() -> Vec<EnvFromSource> {
    agent().env_from
}

#[test]
fn agent_env_overrides_the_default_home() {
    let mut spec_with_home = agent();
    spec_with_home.env = vec![env_var("HOME", "/custom")];
    let pod = build_with(&spec_with_home, None, SidecarMode::Native).expect("pod");
    let env = container(&pod, AGENT_CONTAINER)
        .env
        .clone()
        .unwrap_or_default();
    let homes: Vec<_> = env.iter().filter(|e| e.name == "HOME").collect();
    assert_eq!(homes.len(), 1);
    assert_eq!(homes[0].value.as_deref(), Some("/custom"));
}

#[test]
fn native_sidecar_is_an_always_restarting_init_container_holding_the_token() {
    let pod = build(SidecarMode::Native);
    let inits = spec(&pod).init_containers.clone().unwrap_or_default();
    let sidecar = inits
        .iter()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .expect("sidecar among init containers");
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert!(mounts(sidecar).contains(&("token", TOKEN_DIR)));
    assert_eq!(
        sidecar.args,
        Some(strings([
            "sidecar",
            "--lease",
            "team/hello-build",
            "--holder",
            "hello-build-a2",
            "--heartbeat-file",
            "/ralph-run/runner.beat",
            "--ended-file",
            "/ralph-run/runner.ended",
            "--stop-file",
            "/ralph-run/claim-lost",
            "--heartbeat-max-age",
            "15s",
            "--lease-duration",
            "60s",
        ]))
    );
    assert_eq!(spec(&pod).containers.len(), 1);
}

#[test]
fn the_sidecar_may_write_the_stop_file_into_the_run_directory() {
    let pod = build(SidecarMode::Plain);
    let sidecar = container(&pod, SIDECAR_CONTAINER);
    let run = sidecar
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "run")
        .expect("run mounted");
    assert_eq!(run.read_only, None);
}

#[test]
fn agent_git_trusts_the_workspace_it_does_not_own() {
    let pod = build(SidecarMode::Native);
    let value = |name: &str| env_entry(&pod, AGENT_CONTAINER, name).and_then(|e| e.value.clone());
    assert_eq!(value("GIT_CONFIG_COUNT").as_deref(), Some("1"));
    assert_eq!(value("GIT_CONFIG_KEY_0").as_deref(), Some("safe.directory"));
    assert_eq!(value("GIT_CONFIG_VALUE_0").as_deref(), Some("/workspace"));
}

#[test]
fn plain_sidecar_is_a_regular_container_that_exits_when_the_attempt_is_over() {
    let pod = build(SidecarMode::Plain);
    let s = spec(&pod);
    assert!(
        !s.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == SIDECAR_CONTAINER)
    );
    let sidecar = container(&pod, SIDECAR_CONTAINER);
    assert_eq!(sidecar.restart_policy, None);
    assert!(
        sidecar
            .args
            .iter()
            .flatten()
            .any(|a| a == "--exit-when-done")
    );
}

#[test]
fn projected_token_is_short_lived() {
    let pod = build(SidecarMode::Native);
    let expiry = volume(&pod, "token")
        .projected
        .as_ref()
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s.iter().find_map(|p| p.service_account_token.as_ref()))
        .and_then(|t| t.expiration_seconds);
    assert_eq!(expiry, Some(3600));
}

#[test]
fn pod_template_overrides_are_applied_but_cannot_replace_ralph_labels() {
    let overrides = PodTemplateOverrides {
        labels: BTreeMap::from([
            ("team".to_owned(), "a".to_owned()),
            (TASK_LABEL.to_owned(), "spoofed".to_owned()),
        ]),
        annotations: BTreeMap::from([("note".to_owned(), "x".to_owned())]),
        node_selector: BTreeMap::from([("pool".to_owned(), "agents".to_owned())]),
        tolerations: vec![Toleration {
            key: Some("agents".to_owned()),
            ..Toleration::default()
        }],
        affinity: None,
        image_pull_secrets: vec![],
        service_account_name: Some("custom-sa".to_owned()),
        priority_class_name: Some("low".to_owned()),
        runtime_class_name: Some("gvisor".to_owned()),
    };
    let pod = build_with(&agent(), Some(&overrides), SidecarMode::Native).expect("pod");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(labels.get(TASK_LABEL).map(String::as_str), Some("build"));
    assert_eq!(
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("note")),
        Some(&"x".to_owned())
    );
    let s = spec(&pod);
    assert_eq!(s.service_account_name.as_deref(), Some("custom-sa"));
    assert_eq!(s.priority_class_name.as_deref(), Some("low"));
    assert_eq!(s.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(
        s.node_selector.as_ref().and_then(|n| n.get("pool")),
        Some(&"agents".to_owned())
    );
    assert_eq!(s.tolerations.as_ref().map(Vec::len), Some(1));
}

#[test]
fn default_service_account_is_the_controllers_agent_account() {
    let pod = build(SidecarMode::Native);
    assert_eq!(
        spec(&pod).service_account_name.as_deref(),
        Some("ralph-agent")
    );
}

#[test]
fn feature_without_agent_image_is_rejected_naming_the_feature() {
    let mut no_image = agent();
    no_image.image = None;
    let error = build_with(&no_image, None, SidecarMode::Native).expect_err("no image");
    assert_eq!(
        error.to_string(),
        "Feature hello: spec.agent.image is required to run on a cluster"
    );
}

#[test]
fn feature_with_empty_agent_command_is_rejected() {
    let mut no_command = agent();
    no_command.command.clear();
    assert_eq!(
        build_with(&no_command, None, SidecarMode::Native),
        Err(PodError::NoAgentCommand {
            feature: "hello".to_owned()
        })
    );
}

#[test]
fn a_client_fs_setting_reaches_the_runner_before_the_agent_command() {
    let agent = AgentSpec {
        client_fs: ClientFs::Never,
        ..agent()
    };
    let command = runner_command(&agent);
    let separator = command.iter().position(|arg| arg == "--").expect("--");
    assert_eq!(
        command[separator - 2..separator],
        ["--client-fs".to_owned(), "never".to_owned()]
    );
}

#[test]
fn a_required_confinement_reaches_the_runner() {
    let agent = AgentSpec {
        confinement: Confinement::Required,
        ..agent()
    };
    let command = runner_command(&agent);
    assert!(
        command
            .windows(2)
            .any(|pair| pair == ["--confinement", "required"]),
        "{command:?}"
    );
}

/// The agent container's command (`ralph runner ... -- AGENT`) of `agent`'s Pod.
fn runner_command(agent: &AgentSpec) -> Vec<String> {
    let pod = build_with(agent, None, SidecarMode::Native).expect("pod");
    container(&pod, AGENT_CONTAINER)
        .command
        .clone()
        .expect("command")
}
