//! The agent a Feature runs, and overrides for its agent Pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, LocalObjectReference, ResourceRequirements, Toleration,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default `idleTimeoutSeconds`.
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: u64 = 600;
/// Default `totalTimeoutSeconds`.
pub const DEFAULT_TOTAL_TIMEOUT_SECONDS: u64 = 3600;

fn default_idle_timeout_seconds() -> u64 {
    DEFAULT_IDLE_TIMEOUT_SECONDS
}

fn default_total_timeout_seconds() -> u64 {
    DEFAULT_TOTAL_TIMEOUT_SECONDS
}

/// The agent CLI that works on the tasks: an Agent Client Protocol (ACP) server
/// speaking JSON-RPC over stdio, e.g. `claude-agent-acp`, `codex-acp`, `gemini --acp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// Container image holding the agent CLI. Required on a cluster; local runs ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,

    /// The agent command (the executable and any leading arguments), e.g. `["claude-agent-acp"]`.
    #[schemars(length(min = 1, max = 64))]
    pub command: Vec<String>,

    /// More arguments passed to the agent command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub args: Vec<String>,

    /// Environment variables of the agent process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Sources of environment variables of the agent container, e.g. a Secret holding
    /// the agent's API keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,

    /// CPU and memory requests and limits of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// An attempt whose agent sends nothing for this many seconds is treated as hung:
    /// the agent is stopped and the attempt recorded as crashed.
    #[serde(default = "default_idle_timeout_seconds")]
    #[schemars(range(min = 10, max = 86400))]
    pub idle_timeout_seconds: u64,

    /// An attempt running longer than this many seconds is stopped and recorded as crashed.
    #[serde(default = "default_total_timeout_seconds")]
    #[schemars(range(min = 10, max = 604800))]
    pub total_timeout_seconds: u64,

    /// Whether the runner offers the agent its file system over ACP (`fs/read_text_file`,
    /// `fs/write_text_file`); without it the agent reads and writes files itself, still
    /// asking permission for edits. `auto`: off for gemini-cli (it cannot create new files
    /// through it), on for other agents.
    #[serde(default, skip_serializing_if = "ClientFs::is_auto")]
    pub client_fs: ClientFs,

    /// The model gateway between the agent and its model API (docs/gateway.md). Unset: on
    /// for the agents ralph knows when a credential is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<super::gateway::GatewaySpec>,
    /// How the runner confines the agent process with the kernel (Landlock): it may write
    /// only its workspace (read-only for a verifier), its HOME and its temp directory.
    /// `BestEffort` runs unconfined where the kernel lacks Landlock (a warning, and the
    /// Task's `Confined` condition `False`); `Required` makes that a configuration error
    /// before the agent starts; `Disabled` does not confine (not `Off`, which YAML 1.1 reads as false) (docs/security.md).
    #[serde(default, skip_serializing_if = "Confinement::is_best_effort")]
    pub confinement: Confinement,
}

/// Whether the runner confines the agent process with Landlock (docs/security.md).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
pub enum Confinement {
    /// Confine where the kernel can; run with a warning where it cannot.
    #[default]
    #[value(name = "best-effort")]
    BestEffort,
    /// Confine, or end the attempt `misconfigured` before the agent starts.
    #[value(name = "required")]
    Required,
    /// Do not confine (the permission answers are the only guard).
    #[value(name = "disabled")]
    Disabled,
}

impl Confinement {
    fn is_best_effort(&self) -> bool {
        *self == Confinement::BestEffort
    }

    /// The `ralph runner` flags that select this setting (none for the default).
    pub fn runner_args(self) -> Vec<String> {
        match self {
            Confinement::BestEffort => Vec::new(),
            Confinement::Required => vec!["--confinement".to_owned(), "required".to_owned()],
            Confinement::Disabled => vec!["--confinement".to_owned(), "disabled".to_owned()],
        }
    }
}

/// Whether the runner advertises the ACP client `fs` capability to the agent.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ClientFs {
    /// Off for agents known to mishandle it (gemini-cli), on for the others.
    #[default]
    Auto,
    /// Always advertise it.
    Always,
    /// Never advertise it.
    Never,
}

impl ClientFs {
    fn is_auto(&self) -> bool {
        *self == ClientFs::Auto
    }
}

/// Overrides applied to every agent Pod of a Feature.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverrides {
    /// Extra labels on the agent Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Extra annotations on the agent Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Node labels an agent Pod's node must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the agent Pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Scheduling affinity of the agent Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Secrets used to pull the agent image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Service account of the agent Pod. Only the claim-renewing sidecar mounts its token;
    /// the agent container gets no Kubernetes API access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// PriorityClass of the agent Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// RuntimeClass of the agent Pods (e.g. a sandboxed runtime such as gVisor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
}
