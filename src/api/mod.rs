//! Custom resources `Feature` and `Task` (group `ralph.dev`, version `v1alpha1`).
//!
//! A [`Feature`] holds a DAG of inline task templates; the controller turns each template
//! into a [`Task`] object (see [`desired_tasks`] for the naming rule). Users may also apply
//! standalone [`Task`]s that point at a feature with `featureRef`. Only the controller
//! writes the status subresources ([`FeatureStatus`], [`TaskStatus`]).

pub mod agent;
pub mod budget;
pub mod conditions;
pub mod feature;
pub mod gateway;
pub mod labels;
pub mod memory;
pub mod names;
pub mod planning;
pub mod pool;
pub mod status;
pub mod task;
pub mod template;
pub mod verify;
pub mod workspace;

pub use agent::{AgentSpec, PodTemplateOverrides};
pub use budget::BudgetSpec;
pub use feature::{Feature, FeatureContext, FeatureSpec, RetryPolicy, TextSource};
pub use memory::{KnowledgeSeed, MemorySpec};
pub use pool::{ModelPolicy, NamedAgentSpec, PRIMARY_AGENT};
pub use status::{
    AttemptOutcome, AttemptRecord, ClaimStatus, FeaturePhase, FeatureStatus, MAX_ATTEMPT_HISTORY,
    TaskCounts, TaskStatus,
};
pub use task::{
    DesiredTasksError, Task, TaskSpec, desired_tasks, planned_tasks, planning_task,
    task_object_name,
};
pub use template::{TaskFields, TaskTemplate};
pub use verify::VerifySpec;

/// API group of the ralph custom resources.
pub const GROUP: &str = "ralph.dev";
/// API version of the ralph custom resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the ralph custom resources.
pub const API_VERSION: &str = "ralph.dev/v1alpha1";
pub use labels::{FEATURE_LABEL, TASK_LABEL};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CustomResourceDefinitions of the ralph resources: Feature, then Task, with their
/// descriptions reflowed for `kubectl explain`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![reflowed(Feature::crd()), reflowed(Task::crd())]
}

/// `crd` with every schema description reflowed into paragraphs (see [`reflow`]).
fn reflowed(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(node: &mut serde_json::Value) {
        match node {
            serde_json::Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    match child {
                        serde_json::Value::String(text) if key == "description" => {
                            *text = reflow(text);
                        }
                        _ => walk(child),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    if let Some(versions) = value.pointer_mut("/spec/versions") {
        walk(versions);
    }
    serde_json::from_value(value).unwrap_or(crd)
}

/// Joins hard-wrapped lines into paragraphs: a single line break becomes a space; blank
/// lines (paragraph breaks), line breaks before list items (`- `) and code blocks stay.
pub fn reflow(text: &str) -> String {
    if text.contains("```") {
        return text.to_owned();
    }
    text.trim()
        .split("\n\n")
        .map(|paragraph| {
            let mut out = String::new();
            for line in paragraph.lines().map(str::trim) {
                if !out.is_empty() {
                    out.push(if line.starts_with("- ") { '\n' } else { ' ' });
                }
                out.push_str(line);
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// [`crds`] as one multi-document YAML stream, each document starting with `---`.
/// The output is deterministic (it is committed as `crds/ralph.dev_crds.yaml`).
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}
