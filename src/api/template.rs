//! Task fields shared by a Feature's inline templates and by Task objects.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::names::{DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN};

/// Most entries in a task's `dependsOn` list (bounds the cost of validation rules).
pub const MAX_DEPENDENCIES: usize = 32;
/// Lowest task priority.
pub const MIN_PRIORITY: i32 = -1000;
/// Highest task priority.
pub const MAX_PRIORITY: i32 = 1000;
/// Highest per-task `maxRetries`.
pub const MAX_RETRIES_LIMIT: u32 = 100;
/// Longest task title, in bytes.
pub const MAX_TITLE_LEN: usize = 256;
/// Longest task description (the prompt text), in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 32768;

/// What a task is and where it sits in the DAG. Shared by Feature templates
/// (`spec.tasks[*]`) and by Task objects (`spec`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskFields {
    /// A short, human-readable title of the task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = MAX_TITLE_LEN))]
    pub title: String,

    /// What the agent must do: the prompt text of this task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = MAX_DESCRIPTION_LEN))]
    pub description: String,

    /// Names of the tasks that must be done before this one can run. In a Feature template
    /// these are template names; in a Task object they are Task object names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_DEPENDENCIES),
        inner(pattern(DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub depends_on: Vec<String>,

    /// Name of the parent task. A parent is never run itself: it is done when all its
    /// children are done, and failed when one of them fails. Template name or Task object
    /// name, as for `dependsOn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub parent: Option<String>,

    /// Scheduling priority among ready tasks: lower runs first; ties run in creation order.
    #[serde(default)]
    #[schemars(range(min = MIN_PRIORITY, max = MAX_PRIORITY))]
    pub priority: i32,

    /// How many times a failed attempt of this task is retried; overrides the feature's
    /// `retry.maxRetries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_RETRIES_LIMIT))]
    pub max_retries: Option<u32>,

    /// Tags that pick the feature's knowledge for this task's prompts (besides the words
    /// of its name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::memory::MAX_TAGS), inner(length(min = 1, max = super::memory::MAX_TAG_LEN)))]
    pub tags: Vec<String>,
}

/// One task of a Feature's plan. The controller turns it into a Task object named
/// `<feature>-<name>`. A template that depends on itself or is its own parent is reported by
/// the controller's plan check (the Feature's `Valid` condition), like a cycle: a CEL rule
/// per template would make every write of a 200-task Feature, status included, cost 200
/// times as much as one of a 1-task Feature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskTemplate {
    /// Name of the task, unique within the feature: an RFC 1123 DNS label
    /// (lower-case letters, digits and '-', at most 63 characters). Local runs use it as
    /// the task ID.
    #[schemars(pattern(DNS_LABEL_PATTERN), length(min = 1, max = 63))]
    pub name: String,

    /// The task itself.
    #[serde(flatten)]
    pub fields: TaskFields,
}

impl TaskTemplate {
    /// One line for a planner: `name: title (after a, b)`.
    pub fn outline(&self) -> String {
        if self.fields.depends_on.is_empty() {
            format!("{}: {}", self.name, self.fields.title)
        } else {
            let after = self.fields.depends_on.join(", ");
            format!("{}: {} (after {after})", self.name, self.fields.title)
        }
    }
}
