//! Custom resources `Feature` and `Task` (group `ralph.dev`, version `v1alpha1`).
//!
//! A [`Feature`] holds a DAG of inline task templates; the controller turns each template
//! into a [`Task`] object (see [`desired_tasks`] for the naming rule). Users may also apply
//! standalone [`Task`]s that point at a feature with `featureRef`. Only the controller
//! writes the status subresources ([`FeatureStatus`], [`TaskStatus`]).

pub mod agent;
pub mod conditions;
pub mod feature;
pub mod labels;
pub mod names;
pub mod status;
pub mod task;
pub mod template;

pub use agent::{AgentSpec, PodTemplateOverrides};
pub use feature::{Feature, FeatureContext, FeatureSpec, RetryPolicy, TextSource};
pub use status::{
    AttemptOutcome, AttemptRecord, ClaimStatus, FeaturePhase, FeatureStatus, MAX_ATTEMPT_HISTORY,
    TaskCounts, TaskStatus,
};
pub use task::{DesiredTasksError, Task, TaskSpec, desired_tasks, task_object_name};
pub use template::{TaskFields, TaskTemplate};

/// API group of the ralph custom resources.
pub const GROUP: &str = "ralph.dev";
/// API version of the ralph custom resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the ralph custom resources.
pub const API_VERSION: &str = "ralph.dev/v1alpha1";
pub use labels::{FEATURE_LABEL, TASK_LABEL};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CustomResourceDefinitions of the ralph resources: Feature, then Task.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![Feature::crd(), Task::crd()]
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
