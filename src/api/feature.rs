//! The `Feature` custom resource: a plan of tasks and how to run them.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMapKeySelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent::{AgentSpec, PodTemplateOverrides};
use super::budget::BudgetSpec;
use super::memory::MemorySpec;
use super::pool::{MAX_FALLBACK_AGENTS, ModelPolicy, NamedAgentSpec};
use super::status::FeatureStatus;
use super::template::{MAX_RETRIES_LIMIT, TaskTemplate};
use super::verify::VerifySpec;
use crate::engine::backoff::RetryBackoff;

/// Most tasks in one Feature (bounds the size of a Feature and the cost of its rules).
pub const MAX_TASKS: usize = 200;
/// Default `parallelism`.
pub const DEFAULT_PARALLELISM: u32 = 1;
/// Default `leaseDurationSeconds`.
pub const DEFAULT_LEASE_DURATION_SECONDS: u32 = 60;
/// Default `retry.maxRetries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Default `retry.backoffBaseSeconds`.
pub const DEFAULT_BACKOFF_BASE_SECONDS: u64 = 10;
/// Default `retry.backoffMaxSeconds`.
pub const DEFAULT_BACKOFF_MAX_SECONDS: u64 = 600;

fn default_parallelism() -> u32 {
    DEFAULT_PARALLELISM
}

fn default_lease_duration_seconds() -> u32 {
    DEFAULT_LEASE_DURATION_SECONDS
}

/// Default `podStartTimeoutSeconds`: long enough for a cluster autoscaler to add a node.
pub const DEFAULT_POD_START_TIMEOUT_SECONDS: u32 = 600;

fn default_pod_start_timeout_seconds() -> u32 {
    DEFAULT_POD_START_TIMEOUT_SECONDS
}

fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}

fn default_backoff_base_seconds() -> u64 {
    DEFAULT_BACKOFF_BASE_SECONDS
}

fn default_backoff_max_seconds() -> u64 {
    DEFAULT_BACKOFF_MAX_SECONDS
}

/// A feature to build: a DAG of tasks, the agent that works on them, and the limits of
/// the loop. The controller creates one Task object per entry of `tasks`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "ralph.dev",
    version = "v1alpha1",
    kind = "Feature",
    namespaced,
    shortname = "feat",
    category = "ralph",
    status = "FeatureStatus",
    derive = "PartialEq",
    doc = "A feature built by autonomous coding agents: a DAG of tasks, each attempted by an ACP agent in its own Pod until the plan is done.",
    validation = Rule::new("self.metadata.name.size() <= 63").message("a Feature name must be at most 63 characters (it is used as a label value)"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Where the feature stands"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.counts.ready", description = "Tasks ready to run"),
    printcolumn(name = "Done", type_ = "integer", json_path = ".status.counts.done", description = "Tasks done"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.counts.total", description = "Tasks in the plan"),
    printcolumn(name = "Cost", type_ = "string", json_path = ".status.usage.costUSD", description = "US dollars the agents reported (attempts without a reported cost are counted in usage.attemptsWithUnknownCost)"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct FeatureSpec {
    /// The plan: tasks with their dependencies. Names are unique; an empty plan ends the
    /// feature with outcome NoPlan.
    #[serde(default)]
    #[schemars(length(max = MAX_TASKS))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub tasks: Vec<TaskTemplate>,

    /// Shared context every agent prompt includes: the feature's specification and plan.
    #[serde(default, skip_serializing_if = "FeatureContext::is_empty")]
    pub context: FeatureContext,

    /// The agent that works on the tasks (named `primary` in the pool).
    pub agent: AgentSpec,

    /// More agents for the pool, tried in order when those before them are out of quota:
    /// an agent that reports exhaustion (usage limit, quota) leaves the pool until its reset
    /// time, for every Feature of the namespace using the same agent and credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_FALLBACK_AGENTS))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = Rule::new("self.all(a, a.name != 'primary')").message("the pool name primary is spec.agent's: give each of spec.fallbackAgents another name"))]
    pub fallback_agents: Vec<NamedAgentSpec>,

    /// Which model each attempt asks the agent for. Unset: the agent's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelPolicy>,

    /// Most attempts running at the same time.
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = 1, max = 100))]
    pub parallelism: u32,

    /// Attempt budget: once this many attempts have started, no new one starts and the
    /// feature ends with outcome LimitReached. Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_iterations: Option<u32>,

    /// Cost and token limits over all attempts: once one is reached, no new attempt
    /// starts, running ones finish and are counted, and the feature ends with outcome
    /// LimitReached. Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSpec>,

    /// How failed attempts are retried.
    #[serde(default)]
    pub retry: RetryPolicy,

    /// What agents remember between attempts: journal and knowledge budgets, seeded knowledge.
    #[serde(default, skip_serializing_if = "MemorySpec::is_empty")]
    pub memory: MemorySpec,

    /// How a task an agent reports done is verified before it counts as done: a command
    /// run in the workspace, a read-only verification agent, or both. Unset: the agent's
    /// word is enough.
    #[serde(default, skip_serializing_if = "VerifySpec::is_off")]
    pub verify: VerifySpec,

    /// When true, no new attempt starts and running attempts are cancelled.
    #[serde(default)]
    pub suspend: bool,

    /// Duration of a task's claim Lease; the agent Pod's sidecar renews it while the agent
    /// is alive. A claim not renewed in time is lost and the task retried.
    #[serde(default = "default_lease_duration_seconds")]
    #[schemars(range(min = 15, max = 3600))]
    pub lease_duration_seconds: u32,

    /// How long an attempt's agent Pod may wait to start (no node has room, a node is being
    /// added, images are pulled) before the attempt is released and tried again, no retry
    /// charged. The claim counts from the agent's start: until then the controller keeps it.
    #[serde(default = "default_pod_start_timeout_seconds")]
    #[schemars(range(min = 30, max = 86400))]
    pub pod_start_timeout_seconds: u32,

    /// Overrides for the agent Pods (scheduling, labels, service account, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateOverrides>,

    /// Planning: an agent writes the tasks from `context.spec` (and `context.plan`), in
    /// addition to the hand-written `tasks` (docs/planning.md). Unset: only `tasks` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planning: Option<super::planning::PlanningSpec>,

    /// Where the agents work: a git repository whose feature branch collects the tasks'
    /// work (see docs/git.md). Unset: an empty directory per attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<super::workspace::WorkspaceSpec>,
}

impl FeatureSpec {
    /// The Feature's git repository, when it names one.
    pub fn git(&self) -> Option<&super::workspace::GitWorkspace> {
        self.workspace.as_ref()?.git.as_ref()
    }
}

/// Text given to every agent prompt of a feature.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureContext {
    /// The feature's specification: what to build and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<TextSource>,

    /// The implementation plan the tasks come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<TextSource>,
}

impl FeatureContext {
    /// True when neither a spec nor a plan is given.
    pub fn is_empty(&self) -> bool {
        self.spec.is_none() && self.plan.is_none()
    }
}

/// A piece of text, given inline or read from a ConfigMap key. Exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.inline) != has(self.configMapKeyRef)").message("exactly one of inline and configMapKeyRef must be set"))]
pub struct TextSource {
    /// The text itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub inline: Option<String>,

    /// A key of a ConfigMap in the feature's namespace holding the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeySelector>,
}

/// How failed attempts are retried: exponential backoff with jitter,
/// `delay = backoffBaseSeconds * 2^retry + uniform(0, backoffBaseSeconds)`, at most
/// `backoffMaxSeconds`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.backoffBaseSeconds <= self.backoffMaxSeconds").message("backoffBaseSeconds must not exceed backoffMaxSeconds"))]
pub struct RetryPolicy {
    /// How many times a failed task is retried before it fails for good (a task's own
    /// `maxRetries` overrides it).
    #[serde(default = "default_max_retries")]
    #[schemars(range(max = MAX_RETRIES_LIMIT))]
    pub max_retries: u32,

    /// Base delay of the exponential backoff, in seconds.
    #[serde(default = "default_backoff_base_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub backoff_base_seconds: u64,

    /// Longest delay between two attempts of a task, in seconds.
    #[serde(default = "default_backoff_max_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub backoff_max_seconds: u64,
}

impl RetryPolicy {
    /// These settings as the engine's retry backoff (a task's own `maxRetries` applied with
    /// [`RetryBackoff::for_task`]).
    pub fn backoff(&self) -> RetryBackoff {
        RetryBackoff {
            base: Duration::from_secs(self.backoff_base_seconds),
            cap: Duration::from_secs(self.backoff_max_seconds),
            max_retries: self.max_retries,
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: DEFAULT_MAX_RETRIES,
            backoff_base_seconds: DEFAULT_BACKOFF_BASE_SECONDS,
            backoff_max_seconds: DEFAULT_BACKOFF_MAX_SECONDS,
        }
    }
}
