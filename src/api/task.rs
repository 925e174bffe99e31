//! The `Task` custom resource, and the Task objects a Feature owns.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema, Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use super::feature::Feature;
use super::names::DNS_LABEL_PATTERN;
use super::status::TaskStatus;
use super::template::{TaskFields, TaskTemplate};
use super::{FEATURE_LABEL, TASK_LABEL};

/// One task of a feature's DAG, attempted by an agent until it is done.
///
/// Naming:
/// - A Task the controller creates from a Feature's task list is named
///   `<feature>-<task>`, labelled `ralph.dev/feature=<feature>` and `ralph.dev/task=<task>`,
///   and owned by the Feature. Its `dependsOn` and `parent` name Task objects
///   (`<feature>-<name>`), not the names in the Feature's list.
/// - A standalone Task (applied by a user, with `featureRef`) keeps its own name, and its
///   `dependsOn` and `parent` name Task objects of the same feature directly.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "ralph.dev",
    version = "v1alpha1",
    kind = "Task",
    namespaced,
    shortname = "rtask",
    category = "ralph",
    status = "TaskStatus",
    derive = "PartialEq",
    doc = "One task of a ralph Feature: a prompt for an agent, its place in the feature's DAG, and the record of its attempts.",
    validation = Rule::new("!has(self.spec.dependsOn) || !(self.metadata.name in self.spec.dependsOn)").message("a task must not depend on itself"),
    validation = Rule::new("!has(self.spec.parent) || self.spec.parent != self.metadata.name").message("a task must not be its own parent"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Lifecycle phase"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready", description = "Can be claimed now"),
    printcolumn(name = "Attempts", type_ = "integer", json_path = ".status.attemptCount", description = "Attempts started"),
    printcolumn(name = "Feature", type_ = "string", json_path = ".spec.featureRef", description = "The feature this task belongs to"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Name of the Feature (in the same namespace) this task belongs to.
    #[schemars(pattern(DNS_LABEL_PATTERN), length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("featureRef is immutable"))]
    pub feature_ref: String,

    /// The task itself.
    #[serde(flatten)]
    pub fields: TaskFields,
}

/// Name of the Task object the controller creates for template `template` of `feature`:
/// `<feature>-<template>`.
pub fn task_object_name(feature: &str, template: &str) -> String {
    format!("{feature}-{template}")
}

/// Why a Feature's Task objects cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredTasksError {
    /// The Feature has no `metadata.name`.
    #[error("the Feature has no metadata.name")]
    MissingName,
    /// The Feature has no `metadata.uid`, so its Tasks cannot carry an owner reference.
    #[error("Feature {feature} has no metadata.uid (it was not read from the API server)")]
    MissingUid {
        /// The Feature's name.
        feature: String,
    },
}

/// The Task objects a Feature owns, one per template, in template order (see [`Task`] for
/// the naming rule). Pure: the controller applies the result with server-side apply.
pub fn desired_tasks(feature: &Feature) -> Result<Vec<Task>, DesiredTasksError> {
    let owned = Owned::of(feature)?;
    Ok(feature
        .spec
        .tasks
        .iter()
        .map(|template| owned.task(template))
        .collect())
}

/// The Task objects of a plan of hash `plan` (its tasks as `templates`): named and linked as
/// templated Tasks are, owned by the Feature, labelled with the plan's hash
/// ([`crate::api::labels::PLAN_LABEL`]) and never with the Feature's own labels (a GitOps
/// tool's tracking label on them would have it prune them).
pub fn planned_tasks(
    feature: &Feature,
    templates: &[TaskTemplate],
    plan: &str,
) -> Result<Vec<Task>, DesiredTasksError> {
    let owned = Owned::of(feature)?;
    Ok(templates
        .iter()
        .map(|template| {
            let mut task = owned.task(template);
            task.labels_mut()
                .insert(crate::api::labels::PLAN_LABEL.to_owned(), plan.to_owned());
            task
        })
        .collect())
}

/// The Feature's planning Task (`<feature>-planning`): its attempts are the planner's
/// (docs/planning.md).
pub fn planning_task(feature: &Feature) -> Result<Task, DesiredTasksError> {
    let owned = Owned::of(feature)?;
    Ok(owned.task(&TaskTemplate {
        name: crate::engine::planning::PLANNING_TASK.to_owned(),
        fields: TaskFields {
            title: format!("Plan the tasks of Feature {}", owned.feature),
            description: "A planner writes this Feature's task DAG from its spec \
                          (spec.planning; docs/planning.md)."
                .to_owned(),
            ..TaskFields::default()
        },
    }))
}

/// What every Task a Feature owns shares: the Feature's name, namespace and owner reference.
struct Owned {
    feature: String,
    namespace: Option<String>,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
}

impl Owned {
    fn of(feature: &Feature) -> Result<Owned, DesiredTasksError> {
        let name = feature
            .metadata
            .name
            .clone()
            .ok_or(DesiredTasksError::MissingName)?;
        let owner = feature
            .controller_owner_ref(&())
            .filter(|owner| !owner.uid.is_empty())
            .ok_or_else(|| DesiredTasksError::MissingUid {
                feature: name.clone(),
            })?;
        Ok(Owned {
            feature: name,
            namespace: feature.namespace(),
            owner,
        })
    }

    /// The Task of `template`: its dependencies and parent named as Task objects.
    fn task(&self, template: &TaskTemplate) -> Task {
        let feature_name = &self.feature;
        let mut fields = template.fields.clone();
        fields.depends_on = fields
            .depends_on
            .iter()
            .map(|dependency| task_object_name(feature_name, dependency))
            .collect();
        fields.parent = fields
            .parent
            .as_deref()
            .map(|parent| task_object_name(feature_name, parent));
        let mut task = Task::new(
            &task_object_name(feature_name, &template.name),
            TaskSpec {
                feature_ref: feature_name.clone(),
                fields,
            },
        );
        task.metadata.namespace = self.namespace.clone();
        task.metadata.labels = Some(BTreeMap::from([
            (FEATURE_LABEL.to_owned(), feature_name.clone()),
            (TASK_LABEL.to_owned(), template.name.clone()),
        ]));
        task.metadata.owner_references = Some(vec![self.owner.clone()]);
        task
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;
    use crate::api::{AgentSpec, FeatureSpec, TaskTemplate};

    fn template(name: &str, depends_on: &[&str], parent: Option<&str>) -> TaskTemplate {
        TaskTemplate {
            name: name.to_owned(),
            fields: TaskFields {
                title: format!("title of {name}"),
                depends_on: depends_on.iter().map(|d| (*d).to_owned()).collect(),
                parent: parent.map(str::to_owned),
                priority: 3,
                ..TaskFields::default()
            },
        }
    }

    fn feature(tasks: Vec<TaskTemplate>) -> Feature {
        let spec: FeatureSpec = match serde_json::from_value(serde_json::json!({
            "agent": {"command": ["claude-agent-acp"]}
        })) {
            Ok(spec) => spec,
            Err(error) => panic!("test spec does not parse: {error}"),
        };
        let mut feature = Feature::new("hello", FeatureSpec { tasks, ..spec });
        feature.metadata = ObjectMeta {
            name: Some("hello".into()),
            namespace: Some("team-a".into()),
            uid: Some("0b5c-uid".into()),
            ..ObjectMeta::default()
        };
        feature
    }

    fn desired(feature: &Feature) -> Vec<Task> {
        match desired_tasks(feature) {
            Ok(tasks) => tasks,
            Err(error) => panic!("desired_tasks failed: {error}"),
        }
    }

    #[test]
    fn task_object_name_prefixes_the_template_with_the_feature() {
        assert_eq!(task_object_name("hello", "write-test"), "hello-write-test");
    }

    #[test]
    fn desired_tasks_creates_one_task_per_template_in_template_order() {
        let tasks = desired(&feature(vec![
            template("a", &[], None),
            template("b", &[], None),
        ]));
        let names: Vec<_> = tasks.iter().map(|t| t.name_any()).collect();
        assert_eq!(names, ["hello-a", "hello-b"]);
    }

    #[test]
    fn desired_tasks_rewrites_dependencies_and_parent_to_object_names() {
        let tasks = desired(&feature(vec![
            template("epic", &[], None),
            template("a", &[], Some("epic")),
            template("b", &["a"], Some("epic")),
        ]));
        assert_eq!(tasks[2].spec.fields.depends_on, ["hello-a"]);
        assert_eq!(tasks[2].spec.fields.parent.as_deref(), Some("hello-epic"));
    }

    #[test]
    fn desired_tasks_keeps_the_rest_of_the_template() {
        let tasks = desired(&feature(vec![template("a", &[], None)]));
        assert_eq!(tasks[0].spec.feature_ref, "hello");
        assert_eq!(tasks[0].spec.fields.title, "title of a");
        assert_eq!(tasks[0].spec.fields.priority, 3);
    }

    #[test]
    fn desired_tasks_labels_tasks_with_feature_and_template() {
        let tasks = desired(&feature(vec![template("a", &[], None)]));
        let labels = tasks[0].labels();
        assert_eq!(labels.get(FEATURE_LABEL).map(String::as_str), Some("hello"));
        assert_eq!(labels.get(TASK_LABEL).map(String::as_str), Some("a"));
        assert_eq!(tasks[0].namespace().as_deref(), Some("team-a"));
    }

    #[test]
    fn desired_tasks_are_controlled_by_the_feature() {
        let tasks = desired(&feature(vec![template("a", &[], None)]));
        let owners = tasks[0].owner_references();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "Feature");
        assert_eq!(owners[0].uid, "0b5c-uid");
        assert_eq!(owners[0].controller, Some(true));
    }

    #[test]
    fn desired_tasks_requires_the_feature_uid() {
        let mut feature = feature(vec![template("a", &[], None)]);
        feature.metadata.uid = None;
        assert_eq!(
            desired_tasks(&feature),
            Err(DesiredTasksError::MissingUid {
                feature: "hello".into()
            })
        );
    }

    #[test]
    fn desired_tasks_of_an_empty_plan_is_empty() {
        assert!(desired(&feature(Vec::new())).is_empty());
    }

    #[test]
    fn agent_spec_defaults_apply_when_fields_are_missing() {
        let agent: AgentSpec = match serde_json::from_value(serde_json::json!({"command": ["x"]})) {
            Ok(agent) => agent,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(agent.idle_timeout_seconds, 600);
        assert_eq!(agent.total_timeout_seconds, 3600);
    }
}
