//! The agent Pod of one attempt (pure: a Task and settings in, a Pod out).
//!
//! Layout: an init container copies the `ralph` binary into an emptyDir; the agent
//! container runs `ralph runner -- <agent command>` with no service-account token; a
//! sidecar (`ralph sidecar`, native where the cluster supports it) holds the only token, a
//! short-lived projected one, and renews the claim Lease while the runner lives, stopping
//! the moment it ended ([`super::sidecar`]). The ralph image's entrypoint must be the
//! `ralph` binary, and it must have no file where the agent container mounts a directory
//! ([`AGENT_MOUNTS`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, DownwardAPIProjection, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EmptyDirVolumeSource, EnvVar, KeyToPath, ObjectFieldSelector, Pod,
    PodSecurityContext, PodSpec, ProjectedVolumeSource, ResourceRequirements, SeccompProfile,
    SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use super::pod_gateway::PodGateway;
use crate::api::{AgentSpec, PodTemplateOverrides, VerifySpec};
use crate::engine::verification::AttemptKind;

pub use crate::api::labels::PROMPT_ANNOTATION;
pub use crate::api::labels::{
    ATTEMPT_KIND_LABEL, ATTEMPT_LABEL, FEATURE_LABEL, TASK_LABEL, TASK_OBJECT_LABEL,
};
use crate::api::labels::{MANAGED_BY, MANAGED_BY_LABEL, TASK_GENERATION_ANNOTATION};
/// Name of the agent container (its termination message is the attempt's result).
pub const AGENT_CONTAINER: &str = "agent";
/// Name of the claim-renewing sidecar container.
pub const SIDECAR_CONTAINER: &str = "claim-keeper";
/// Name of the volume the prompt is mounted from ([`super::pod_prompt`]).
pub(crate) const PROMPT_VOLUME: &str = "prompt";
/// File name of the prompt in the agent container's prompt directory.
pub const PROMPT_FILE: &str = "prompt.md";

const BIN_DIR: &str = "/ralph/bin";
pub(crate) const RALPH: &str = "/ralph/bin/ralph";
const PROMPT_DIR: &str = "/ralph/prompt";
pub(crate) const RUN_DIR: &str = "/ralph/run";
/// The runner's heartbeat, written every 2 s while it lives.
pub(crate) const RUNNER_BEAT: &str = "/ralph/run/runner.beat";
/// Written once the runner is done.
pub(crate) const RUNNER_ENDED: &str = "/ralph/run/runner.ended";
/// Where the runner writes the tasks a worker proposed (a Pod of a planning Feature).
pub(crate) const PROPOSAL_FILE: &str = "/ralph/run/proposal.yaml";
/// Written by the claim-keeper when it cannot keep the claim: the runner stops the agent.
pub(crate) const STOP_FILE: &str = "/ralph/run/claim-lost";
/// The git steps' heartbeat, written while they clone, commit and push.
pub(crate) const HEARTBEAT: &str = "/ralph/run/heartbeat";
/// Written once the finishing git step is done.
pub(crate) const GIT_FINISH_ENDED: &str = "/ralph/run/git-finish.ended";
/// A heartbeat silent this long means its writer is gone (the runner writes every 2 s).
pub(crate) const STALE_AFTER_SECONDS: u64 = 15;
/// The ralph image's own containers mount their volumes outside `/ralph` (images built
/// before the binary moved to /usr/local/bin held the binary at `/ralph`).
const INSTALL_DIR: &str = "/install";
const INSTALL_TARGET: &str = "/install/ralph";
const SIDECAR_RUN_DIR: &str = "/ralph-run";
pub(crate) const WORKSPACE: &str = "/workspace";
const HOME: &str = "/home/agent";
/// The directories the agent container mounts (its image must have no file at any of them).
pub(crate) const AGENT_MOUNTS: [&str; 6] = [BIN_DIR, PROMPT_DIR, RUN_DIR, WORKSPACE, HOME, "/tmp"];
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The UID and GID agent Pods run as unless overridden.
const NON_ROOT_ID: i64 = 65532;
/// Lifetime of the sidecar's projected token (the kubelet refreshes it).
const TOKEN_SECONDS: i64 = 3600;
/// Git as the agent runs it trusts the workspace: the emptyDir belongs to root (group
/// fsGroup), not to the agent's user, and git refuses a repository owned by someone else
/// ("detected dubious ownership"). Set through git's environment, so no file is written.
const AGENT_GIT_CONFIG: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "safe.directory"),
    ("GIT_CONFIG_VALUE_0", WORKSPACE),
];

/// `path` under the run directory as the claim-keeper sees it.
pub(crate) fn in_sidecar(path: &str) -> String {
    match path.strip_prefix(RUN_DIR) {
        Some(rest) => format!("{SIDECAR_RUN_DIR}{rest}"),
        None => path.to_owned(),
    }
}

/// How the claim-renewing sidecar runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SidecarMode {
    /// A native sidecar: an init container with `restartPolicy: Always` (Kubernetes ≥ 1.29);
    /// the kubelet stops it once the agent container ends.
    Native,
    /// A plain container that exits by itself once the attempt is over (every step ended, or
    /// the runner's heartbeat stale).
    Plain,
}

/// Controller-wide settings of agent Pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSettings {
    /// The controller's image (holds the `ralph` binary, its entrypoint).
    pub ralph_image: String,
    /// Service account of agent Pods (its token is mounted into the sidecar only), unless
    /// the Feature's podTemplate names one.
    pub service_account: String,
    /// Native or plain sidecar.
    pub sidecar: SidecarMode,
    /// Cluster-wide model prices for the gateways (docs/gateway.md); a Feature's own win.
    pub gateway_prices: crate::gateway::PriceTable,
}

/// Everything one attempt's Pod is built from.
#[derive(Clone, Debug)]
pub struct AttemptPod<'a> {
    /// Namespace of the Task, the Pod and the claim Lease.
    pub namespace: &'a str,
    /// The Task object's name (also the claim Lease's name).
    pub task: &'a str,
    /// The task id the agent reports sigils for.
    pub task_id: &'a str,
    /// The feature.
    pub feature: &'a str,
    /// The attempt id, `<task>-a<N>`: the Pod's name, the Lease holder.
    pub attempt_id: &'a str,
    /// The attempt's prompt (an annotation of the Pod, mounted as a file).
    pub prompt: &'a str,
    /// Owner reference to the Task.
    pub owner: OwnerReference,
    /// The pool agent that runs the attempt.
    pub agent: &'a AgentSpec,
    /// The model the attempt asks the agent for (`None`: its default).
    pub model: Option<&'a str>,
    /// The Feature's Pod overrides.
    pub overrides: Option<&'a PodTemplateOverrides>,
    /// What the attempt does: a work attempt runs `verify.command` after a done verdict; a
    /// verification attempt runs read-only. (Where a verification Pod gets the work from is
    /// the workspace's business: with `spec.workspace.git`, the task's work branch.)
    pub kind: AttemptKind,
    /// The Feature's `spec.verify`.
    pub verify: &'a VerifySpec,
    /// How long one renewal of the claim Lease is valid.
    pub lease_duration_seconds: u32,
}

/// Why an attempt's Pod cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// The Feature names no agent image.
    #[error("Feature {feature}: spec.agent.image is required to run on a cluster")]
    NoAgentImage {
        /// The feature.
        feature: String,
    },
    /// The Feature's agent command is empty.
    #[error("Feature {feature}: spec.agent.command must not be empty")]
    NoAgentCommand {
        /// The feature.
        feature: String,
    },
}

/// The labels every agent Pod carries.
pub fn attempt_labels(input: &AttemptPod<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (FEATURE_LABEL.to_owned(), input.feature.to_owned()),
        (TASK_LABEL.to_owned(), input.task_id.to_owned()),
        (TASK_OBJECT_LABEL.to_owned(), input.task.to_owned()),
        (ATTEMPT_LABEL.to_owned(), input.attempt_id.to_owned()),
        (
            ATTEMPT_KIND_LABEL.to_owned(),
            input.kind.as_str().to_owned(),
        ),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// The claim-keeper container of an attempt Pod's `spec`, native sidecar or plain container.
pub(crate) fn claim_keeper_mut(spec: &mut PodSpec) -> Option<&mut Container> {
    spec.init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
        .find(|c| c.name == SIDECAR_CONTAINER)
}

/// The owner reference that makes an object go when Pod `name` (of `uid`) goes: a
/// ConfigMap an attempt's Pod owns (its large prompt, its uploads).
pub fn owned_by_pod(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Records on `pod` the Task generation it is built for ([`TASK_GENERATION_ANNOTATION`]).
pub fn stamp_task_generation(pod: &mut Pod, generation: Option<i64>) {
    if let Some(generation) = generation {
        pod.annotations_mut().insert(
            TASK_GENERATION_ANNOTATION.to_owned(),
            generation.to_string(),
        );
    }
}

/// The Task generation `pod` was built for; `None` for a Pod without the annotation (created
/// before it existed) or with one that is not a number.
pub fn built_for_generation(pod: &Pod) -> Option<i64> {
    pod.annotations()
        .get(TASK_GENERATION_ANNOTATION)
        .and_then(|g| g.parse().ok())
}

/// The attempt's agent Pod.
pub fn attempt_pod(input: &AttemptPod<'_>, settings: &PodSettings) -> Result<Pod, PodError> {
    let image = input
        .agent
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| PodError::NoAgentImage {
            feature: input.feature.to_owned(),
        })?;
    if input.agent.command.is_empty() {
        return Err(PodError::NoAgentCommand {
            feature: input.feature.to_owned(),
        });
    }
    let overrides = input.overrides.cloned().unwrap_or_default();
    let mut labels = overrides.labels.clone();
    labels.extend(attempt_labels(input));
    let mut annotations = overrides.annotations.clone();
    annotations.insert(PROMPT_ANNOTATION.to_owned(), input.prompt.to_owned());
    let sidecar = sidecar_container(input, settings);
    let mut init_containers = vec![install_container(settings)];
    let mut containers = vec![agent_container(input, image)];
    match settings.sidecar {
        SidecarMode::Native => init_containers.push(sidecar),
        SidecarMode::Plain => containers.push(sidecar),
    }
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(input.attempt_id.to_owned()),
            namespace: Some(input.namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![input.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            service_account_name: Some(
                overrides
                    .service_account_name
                    .clone()
                    .unwrap_or_else(|| settings.service_account.clone()),
            ),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NON_ROOT_ID),
                run_as_group: Some(NON_ROOT_ID),
                fs_group: Some(NON_ROOT_ID),
                seccomp_profile: Some(runtime_default_seccomp()),
                ..PodSecurityContext::default()
            }),
            termination_grace_period_seconds: Some(30),
            init_containers: Some(init_containers),
            containers,
            volumes: Some(volumes()),
            node_selector: Some(overrides.node_selector).filter(|m| !m.is_empty()),
            tolerations: Some(overrides.tolerations).filter(|t| !t.is_empty()),
            affinity: overrides.affinity,
            image_pull_secrets: Some(overrides.image_pull_secrets).filter(|s| !s.is_empty()),
            priority_class_name: overrides.priority_class_name,
            runtime_class_name: overrides.runtime_class_name,
            ..PodSpec::default()
        }),
        status: None,
    })
}

fn install_container(settings: &PodSettings) -> Container {
    Container {
        name: "install-ralph".to_owned(),
        image: Some(settings.ralph_image.clone()),
        args: Some(strings(["install", "--to", INSTALL_TARGET])),
        volume_mounts: Some(vec![mount("ralph-bin", INSTALL_DIR, false)]),
        security_context: Some(restricted()),
        resources: Some(small_resources()),
        ..Container::default()
    }
}

fn agent_container(input: &AttemptPod<'_>, image: String) -> Container {
    let agent = input.agent;
    let mut command = strings([
        RALPH,
        "runner",
        "--task",
        input.task_id,
        "--attempt",
        input.attempt_id,
        "--prompt-file",
        &format!("{PROMPT_DIR}/{PROMPT_FILE}"),
        "--workspace",
        WORKSPACE,
        "--heartbeat-file",
        RUNNER_BEAT,
        "--ended-file",
        RUNNER_ENDED,
        "--stop-file",
        STOP_FILE,
        "--result-file",
        "/dev/termination-log",
        "--idle-timeout",
        &format!("{}s", agent.idle_timeout_seconds),
        "--total-timeout",
        &format!("{}s", agent.total_timeout_seconds),
    ]);
    command.extend(agent.client_fs.runner_args());
    command.extend(agent.confinement.runner_args());
    match input.kind {
        AttemptKind::Work => command.extend(input.verify.runner_args()),
        AttemptKind::Verify => command.push("--read-only".to_owned()),
    }
    if let Some(model) = input.model {
        command.extend(strings(["--model", model]));
    }
    let gateway = PodGateway::of(agent);
    command.extend(gateway.iter().flat_map(PodGateway::runner_args));
    command.push("--".to_owned());
    command.extend(agent.command.iter().cloned());
    command.extend(agent.args.iter().cloned());
    let mut env = vec![env_var("HOME", HOME), env_var("TMPDIR", "/tmp")];
    env.extend(AGENT_GIT_CONFIG.map(|(name, value)| env_var(name, value)));
    env.retain(|default| !agent.env.iter().any(|e| e.name == default.name));
    env.extend(agent.env.iter().cloned());
    if let Some(gateway) = &gateway {
        gateway.agent_env(&mut env);
    }
    Container {
        name: AGENT_CONTAINER.to_owned(),
        image: Some(image),
        command: Some(command),
        working_dir: Some(WORKSPACE.to_owned()),
        env: Some(env),
        env_from: Some(agent.env_from.clone()).filter(|e| !e.is_empty()),
        resources: agent.resources.clone(),
        termination_message_policy: Some("File".to_owned()),
        termination_message_path: Some("/dev/termination-log".to_owned()),
        security_context: Some(restricted()),
        volume_mounts: Some(vec![
            mount("ralph-bin", BIN_DIR, true),
            mount(PROMPT_VOLUME, PROMPT_DIR, true),
            mount("run", RUN_DIR, false),
            mount("workspace", WORKSPACE, false),
            mount("tmp", "/tmp", false),
            mount("home", HOME, false),
        ]),
        ..Container::default()
    }
}

fn sidecar_container(input: &AttemptPod<'_>, settings: &PodSettings) -> Container {
    let mut args = strings([
        "sidecar",
        "--lease",
        &format!("{}/{}", input.namespace, input.task),
        "--holder",
        input.attempt_id,
        "--heartbeat-file",
        &in_sidecar(RUNNER_BEAT),
        "--ended-file",
        &in_sidecar(RUNNER_ENDED),
        "--stop-file",
        &in_sidecar(STOP_FILE),
        "--heartbeat-max-age",
        &format!("{STALE_AFTER_SECONDS}s"),
        "--lease-duration",
        &format!("{}s", input.lease_duration_seconds),
    ]);
    let restart_policy = match settings.sidecar {
        SidecarMode::Native => Some("Always".to_owned()),
        SidecarMode::Plain => {
            args.push("--exit-when-done".to_owned());
            None
        }
    };
    let gateway = PodGateway::of(input.agent);
    args.extend(gateway.iter().flat_map(PodGateway::sidecar_args));
    Container {
        name: SIDECAR_CONTAINER.to_owned(),
        image: Some(settings.ralph_image.clone()),
        args: Some(args),
        env: gateway
            .as_ref()
            .map(|gateway| gateway.sidecar_env(&settings.gateway_prices)),
        restart_policy,
        security_context: Some(restricted()),
        resources: Some(small_resources()),
        volume_mounts: Some(vec![
            mount("run", SIDECAR_RUN_DIR, false),
            mount("token", TOKEN_DIR, true),
        ]),
        ..Container::default()
    }
}

fn volumes() -> Vec<Volume> {
    let empty = |name: &str| Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    vec![
        empty("ralph-bin"),
        Volume {
            name: PROMPT_VOLUME.to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: PROMPT_FILE.to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{PROMPT_ANNOTATION}']"),
                        api_version: None,
                    }),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Volume::default()
        },
        empty("run"),
        empty("workspace"),
        empty("tmp"),
        empty("home"),
        token_volume(),
    ]
}

/// The sidecar's API credentials: a short-lived projected token, the cluster CA and the
/// namespace, where in-cluster clients look for them.
fn token_volume() -> Volume {
    Volume {
        name: "token".to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(TOKEN_SECONDS),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            mode: None,
                        }]),
                        ..ConfigMapProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".to_owned(),
                                api_version: None,
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

pub(crate) fn restricted() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..SecurityContext::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        localhost_profile: None,
    }
}

fn small_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("10m".to_owned())),
            ("memory".to_owned(), Quantity("32Mi".to_owned())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_owned(),
            Quantity("64Mi".to_owned()),
        )])),
        ..ResourceRequirements::default()
    }
}

pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(read_only).filter(|r| *r),
        ..VolumeMount::default()
    }
}

pub(crate) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn strings<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
