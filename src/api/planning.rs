//! `spec.planning` and `status.planning` of a Feature: an agent writes the task DAG from
//! the Feature's spec (docs/planning.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default `maxTasks`.
pub const DEFAULT_MAX_PLANNED_TASKS: u32 = 100;
/// Highest `maxTasks`.
pub const MAX_PLANNED_TASKS_LIMIT: u32 = 1000;
/// Default `maxReplans`.
pub const DEFAULT_MAX_REPLANS: u32 = 2;
/// Default `maxInvalidAnswers`.
pub const DEFAULT_MAX_INVALID_ANSWERS: u32 = 2;

fn default_max_tasks() -> u32 {
    DEFAULT_MAX_PLANNED_TASKS
}

fn default_max_replans() -> u32 {
    DEFAULT_MAX_REPLANS
}

fn default_max_invalid_answers() -> u32 {
    DEFAULT_MAX_INVALID_ANSWERS
}

/// How a Feature's tasks are planned by an agent from `spec.context.spec` (and
/// `spec.context.plan`). Planned tasks come in addition to the hand-written `tasks`, which
/// they may depend on and never replace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanningSpec {
    /// The agent that plans: `primary` (spec.agent, the default) or the name of one of
    /// spec.fallbackAgents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub agent: Option<String>,

    /// The model the planner asks its agent for. Unset: the Feature's model policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model: Option<String>,

    /// Most tasks a plan may hold, proposed follow-up tasks included.
    #[serde(default = "default_max_tasks")]
    #[schemars(range(min = 1, max = MAX_PLANNED_TASKS_LIMIT))]
    pub max_tasks: u32,

    /// Whether a plan runs at once (Automatic) or waits for a person to approve it (Manual).
    #[serde(default)]
    pub approval: Approval,

    /// Free text for the planner: task size, naming, which check each task must name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub guidance: Option<String>,

    /// Whether the pending part of the plan is revised when a task fails for good.
    #[serde(default)]
    pub replan: Replan,

    /// Most revisions of a plan after failures (with `replan: OnFailure`).
    #[serde(default = "default_max_replans")]
    #[schemars(range(max = 20))]
    pub max_replans: u32,

    /// How many invalid answers (prose, a cycle, an unknown dependency, ...) are sent back
    /// to the planner with their problems before planning fails. At most 8: a Task's status
    /// keeps its last 10 attempts, which must show the refusals in a row and the one before.
    #[serde(default = "default_max_invalid_answers")]
    #[schemars(range(max = 8))]
    pub max_invalid_answers: u32,
}

impl Default for PlanningSpec {
    fn default() -> Self {
        Self {
            agent: None,
            model: None,
            max_tasks: DEFAULT_MAX_PLANNED_TASKS,
            approval: Approval::default(),
            guidance: None,
            replan: Replan::default(),
            max_replans: DEFAULT_MAX_REPLANS,
            max_invalid_answers: DEFAULT_MAX_INVALID_ANSWERS,
        }
    }
}

/// Whether a plan needs a person's approval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Approval {
    /// A valid plan runs at once.
    #[default]
    Automatic,
    /// A valid plan waits until someone approves its hash.
    Manual,
}

/// When the pending part of a plan is revised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Replan {
    /// Never: a failed task fails the Feature as it would without planning.
    #[default]
    Never,
    /// When a task fails for good, the planner revises the tasks not yet done.
    OnFailure,
}

/// Where a Feature's planning stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanningStatus {
    /// Planning attempts started so far (invalid answers and re-plans included).
    #[serde(default)]
    pub attempts: u32,
    /// Re-plans after failures so far.
    #[serde(default)]
    pub replans: u32,
    /// Hash of the current plan document, when the planner wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_hash: Option<String>,
    /// Hash of the current plan (its tasks and document): what an approval names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dag_hash: Option<String>,
    /// The planning attempt that wrote the current plan (`<feature>-planning-a<N>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_by: Option<String>,
    /// How many tasks the current plan holds.
    #[serde(default)]
    pub tasks: u32,
    /// The approval of the current plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalStatus>,
    /// Hash of the approved plan whose Tasks run while the current plan (a revision after a
    /// failure, or proposed tasks added) waits for its approval or its Tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// Tasks of the current plan that workers proposed (the others the planner wrote).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proposed: Vec<String>,
    /// The planned task whose failure the plan is being revised after (`replan:
    /// OnFailure`), until the revised plan's Tasks exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revising: Option<String>,
    /// Why the last answer was refused, or why planning stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a plan's approval stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ApprovalState {
    /// Waiting for a person.
    #[default]
    Pending,
    /// Approved (by a person, or at once with `approval: Automatic`).
    Approved,
    /// Rejected: the planner plans again with the comment.
    Rejected,
}

/// A person's answer to one plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// Where it stands.
    pub state: ApprovalState,
    /// The plan's hash the answer is about.
    pub hash: String,
    /// A rejection's reason, given to the planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// Name of the ConfigMap that keeps a Feature's current plan (owned by the Feature).
pub fn plan_config_map_name(feature: &str) -> String {
    format!("{feature}-plan")
}

/// Name of the ConfigMap that keeps what the planner revising a Feature's plan after a
/// failure is told (owned by the Feature).
pub fn revision_config_map_name(feature: &str) -> String {
    format!("{feature}-revision")
}

/// Name of the ConfigMap the claim-keeper uploads a planning attempt's answer to (owned by
/// the attempt's Pod).
pub fn answer_config_map_name(attempt: &str) -> String {
    format!("{attempt}-answer")
}

/// Name of the ConfigMap the claim-keeper uploads the tasks a worker attempt proposed to
/// (owned by the attempt's Pod until the controller takes it over).
pub fn proposal_config_map_name(attempt: &str) -> String {
    format!("{attempt}-proposal")
}
