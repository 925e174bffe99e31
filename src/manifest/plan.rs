//! The validated plan of each feature: its tasks (templates plus the standalone Tasks that
//! name it) as one DAG, ready to print or run.
//!
//! Task IDs: a plan identifies tasks by their *local* ID, which local mode (`ralph run`)
//! uses as the task ID: a template's ID is its template name (no `<feature>-` prefix), a
//! standalone Task's ID is its `metadata.name`. A standalone Task's `dependsOn`/`parent`
//! entry `<feature>-<template>` (the object name of a template's Task on a cluster) is
//! mapped to the template's ID, so the same manifests work in both modes.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;

use super::document::{Manifests, Sourced};
use super::error::{Location, ManifestError};
use crate::api::{Feature, Task, TaskFields, task_object_name};
use crate::engine::dag::{Dag, DagError, TaskNode, TaskPhase};

/// Every feature of a set of manifests, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The features, in file and document order.
    pub features: Vec<FeatureManifest>,
}

/// One feature's validated plan.
#[derive(Debug, Clone)]
pub struct FeatureManifest {
    /// The Feature as read.
    pub feature: Feature,
    /// Where the Feature was read.
    pub location: Location,
    /// Its tasks: the templates in order, then the standalone Tasks in file order.
    pub tasks: Vec<PlannedTask>,
    /// The task DAG (every task Pending), keyed by local task ID.
    pub dag: Dag,
}

impl FeatureManifest {
    /// The Feature's name.
    pub fn name(&self) -> String {
        self.feature.name_any()
    }

    /// The task with local ID `id`.
    pub fn task(&self, id: &str) -> Option<&PlannedTask> {
        self.tasks.iter().find(|task| task.id == id)
    }
}

/// Where a planned task comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOrigin {
    /// An entry of the Feature's `spec.tasks`.
    Template,
    /// A standalone Task object naming the feature in `featureRef`.
    Standalone(Location),
}

/// One task of a feature's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTask {
    /// Local task ID (see the module documentation).
    pub id: String,
    /// Name of the Task object on a cluster.
    pub object_name: String,
    /// The task, with `dependsOn` and `parent` as local IDs.
    pub fields: TaskFields,
    /// Where it comes from.
    pub origin: TaskOrigin,
}

impl PlannedTask {
    /// The title, or the ID when the task has none.
    pub fn title(&self) -> &str {
        if self.fields.title.is_empty() {
            &self.id
        } else {
            &self.fields.title
        }
    }
}

/// Builds each feature's plan, merging standalone Tasks into their feature, and checks
/// every DAG. Returns all problems found. A Task naming a Feature listed in
/// `unreadable_features` (one that failed to load, already reported) is skipped silently.
pub(crate) fn build(
    manifests: Manifests,
    unreadable_features: &HashSet<String>,
) -> Result<Plan, Vec<ManifestError>> {
    let mut errors = Vec::new();
    let mut standalone: HashMap<(Option<String>, String), Vec<Sourced<Task>>> = HashMap::new();
    let features: HashSet<(Option<String>, String)> = manifests
        .features
        .iter()
        .map(|f| (f.object.namespace(), f.object.name_any()))
        .collect();
    for task in manifests.tasks {
        let key = (
            task.object.namespace(),
            task.object.spec.feature_ref.clone(),
        );
        if features.contains(&key) {
            standalone.entry(key).or_default().push(task);
        } else if !unreadable_features.contains(&key.1) {
            errors.push(ManifestError::UnknownFeature {
                location: task.location.clone(),
                task: task.object.name_any(),
                feature: key.1,
            });
        }
    }
    let mut plans = Vec::new();
    for feature in manifests.features {
        let key = (feature.object.namespace(), feature.object.name_any());
        let tasks = standalone.remove(&key).unwrap_or_default();
        match feature_plan(feature, tasks) {
            Ok(plan) => plans.push(plan),
            Err(mut problems) => errors.append(&mut problems),
        }
    }
    if errors.is_empty() {
        Ok(Plan { features: plans })
    } else {
        Err(errors)
    }
}

/// Where the task a DAG error is about is defined: its template's line in the Feature, or
/// its standalone Task's document; the Feature's document when unknown.
fn task_location(feature: &Sourced<Feature>, tasks: &[PlannedTask], error: &DagError) -> Location {
    let task = task_of(error);
    let planned = task.and_then(|id| tasks.iter().find(|t| t.id == id));
    match planned.map(|t| &t.origin) {
        Some(TaskOrigin::Standalone(location)) => location.clone(),
        _ => Location {
            line: task
                .and_then(|id| feature.task_lines.get(id).copied())
                .unwrap_or(feature.location.line),
            ..feature.location.clone()
        },
    }
}

/// The task a DAG error is about, when it names one.
pub(crate) fn task_of(error: &DagError) -> Option<&str> {
    match error {
        DagError::DuplicateName { name: task, .. }
        | DagError::UnknownDependency { task, .. }
        | DagError::SelfDependency { task }
        | DagError::DependencyCycle { start: task, .. }
        | DagError::UnknownParent { task, .. }
        | DagError::SelfParent { task }
        | DagError::DependsOnAncestor { task, .. }
        | DagError::DependsOnDescendant { task, .. } => Some(task.as_str()),
        DagError::ParentCycle { path } => path.first().map(String::as_str),
    }
}

fn feature_plan(
    feature: Sourced<Feature>,
    standalone: Vec<Sourced<Task>>,
) -> Result<FeatureManifest, Vec<ManifestError>> {
    let name = feature.object.name_any();
    let mut errors = Vec::new();
    let template_ids: HashMap<String, String> = feature
        .object
        .spec
        .tasks
        .iter()
        .map(|t| (task_object_name(&name, &t.name), t.name.clone()))
        .collect();
    let mut tasks: Vec<PlannedTask> = feature
        .object
        .spec
        .tasks
        .iter()
        .map(|template| PlannedTask {
            id: template.name.clone(),
            object_name: task_object_name(&name, &template.name),
            fields: template.fields.clone(),
            origin: TaskOrigin::Template,
        })
        .collect();
    for task in standalone {
        let task_name = task.object.name_any();
        if let Some(template) = template_ids.get(&task_name) {
            errors.push(ManifestError::NameClash {
                location: task.location.clone(),
                task: task_name,
                feature: name.clone(),
                template: template.clone(),
            });
            continue;
        }
        let local_id = |object: &String| template_ids.get(object).unwrap_or(object).clone();
        let mut fields = task.object.spec.fields.clone();
        fields.depends_on = fields.depends_on.iter().map(local_id).collect();
        fields.parent = fields.parent.as_ref().map(local_id);
        tasks.push(PlannedTask {
            id: task_name.clone(),
            object_name: task_name,
            fields,
            origin: TaskOrigin::Standalone(task.location),
        });
    }
    let nodes = tasks
        .iter()
        .enumerate()
        .map(|(order, task)| TaskNode {
            name: task.id.clone(),
            depends_on: task.fields.depends_on.clone(),
            parent: task.fields.parent.clone(),
            priority: task.fields.priority,
            order: order as u64,
            phase: TaskPhase::Pending,
        })
        .collect();
    match Dag::new(nodes) {
        Ok(dag) if errors.is_empty() => Ok(FeatureManifest {
            feature: feature.object,
            location: feature.location,
            tasks,
            dag,
        }),
        Ok(_) => Err(errors),
        Err(dag_errors) => {
            errors.extend(dag_errors.0.into_iter().map(|source| {
                let location = task_location(&feature, &tasks, &source);
                ManifestError::Dag {
                    location,
                    feature: name.clone(),
                    source,
                }
            }));
            Err(errors)
        }
    }
}
