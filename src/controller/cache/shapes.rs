//! Each Feature's validated task structure, kept between reconciles: a reconcile of a
//! Feature whose Tasks are structurally the same as last time builds its DAG from the
//! kept [`Shape`] (linear, no validation, no sort) instead of laying the tasks out and
//! validating them again. Only the adapter keeps it: the DAG and its rules stay the engine's.
//!
//! A kept shape is used only when it was built from the same Feature (uid and generation:
//! template order) and the same Tasks, each with the same fingerprint of everything its
//! place in the DAG depends on ([`fingerprint`]): a Task added, deleted or re-created, a
//! `dependsOn`, `parent` or `priority` edit, or a template reordered builds it again.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use crate::api::Feature;
use crate::controller::plan::cached::CachedTask;
use crate::engine::dag::{DagErrors, Shape};
use crate::sync::lock;

use crate::controller::plan::decide::{
    self, FeaturePlan, Layout, Snapshot, TemplatePositions, feature_key, lay_out,
};

/// How many Features' shapes are kept; the least recently used goes first.
const KEPT: usize = 64;

/// Features with fewer Tasks are laid out afresh each time (cheap at that size), and keep
/// no memory here.
const KEPT_FROM_TASKS: usize = 500;

/// The kept shapes, by Feature (`namespace/name`).
pub struct Shapes {
    entries: Mutex<Entries>,
    kept_from_tasks: usize,
}

impl Default for Shapes {
    fn default() -> Self {
        Shapes::kept_from(KEPT_FROM_TASKS)
    }
}

#[derive(Default)]
struct Entries {
    by_feature: HashMap<String, Entry>,
    uses: u64,
}

struct Entry {
    feature: FeatureIdentity,
    shape: Shape,
    /// Each position's Task fingerprint.
    fingerprints: Arc<[u64]>,
    last_use: u64,
}

/// What of the Feature a layout depends on: template positions change only with its spec.
#[derive(Clone, PartialEq, Eq)]
struct FeatureIdentity {
    uid: Option<String>,
    generation: Option<i64>,
}

impl FeatureIdentity {
    fn of(feature: &Feature) -> Self {
        FeatureIdentity {
            uid: feature.metadata.uid.clone(),
            generation: feature.metadata.generation,
        }
    }
}

impl Shapes {
    /// Keeps the shapes of Features with at least `tasks` Tasks.
    pub fn kept_from(tasks: usize) -> Self {
        Shapes {
            entries: Mutex::default(),
            kept_from_tasks: tasks,
        }
    }

    /// `tasks` of `feature` laid out for planning: from the kept shape when it still fits
    /// them, otherwise laid out and validated again (and kept when valid).
    pub fn layout(
        &self,
        key: &str,
        feature: &Feature,
        tasks: &[Arc<CachedTask>],
    ) -> Result<Layout, DagErrors> {
        let templates = TemplatePositions::of(feature);
        if tasks.len() < self.kept_from_tasks {
            return lay_out(&templates, tasks);
        }
        let identity = FeatureIdentity::of(feature);
        let kept = {
            let mut entries = lock(&self.entries);
            entries.uses += 1;
            let uses = entries.uses;
            entries
                .by_feature
                .get_mut(key)
                .filter(|e| e.feature == identity)
                .map(|e| {
                    e.last_use = uses;
                    (e.shape.clone(), Arc::clone(&e.fingerprints))
                })
        };
        if let Some((shape, fingerprints)) = kept
            && let Some(task_at) = fit(&shape, &fingerprints, &templates, tasks)
        {
            return Ok(Layout { shape, task_at });
        }
        let layout = lay_out(&templates, tasks)?;
        let fingerprints: Arc<[u64]> = layout
            .task_at
            .iter()
            .filter_map(|&i| tasks.get(i as usize))
            .map(|t| fingerprint(&templates, t))
            .collect();
        let mut entries = lock(&self.entries);
        entries.uses += 1;
        let last_use = entries.uses;
        if entries.by_feature.len() >= KEPT && !entries.by_feature.contains_key(key) {
            let oldest = entries
                .by_feature
                .iter()
                .min_by_key(|(_, e)| e.last_use)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                entries.by_feature.remove(&oldest);
            }
        }
        entries.by_feature.insert(
            key.to_owned(),
            Entry {
                feature: identity,
                shape: layout.shape.clone(),
                fingerprints,
                last_use,
            },
        );
        Ok(layout)
    }

    /// How many Features' shapes are kept.
    pub fn len(&self) -> usize {
        let entries = lock(&self.entries);
        entries.by_feature.len()
    }

    /// Whether no shape is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each position's index in `tasks` when `tasks` are exactly the Tasks `shape` was built
/// from, each with the same fingerprint; `None` otherwise.
fn fit(
    shape: &Shape,
    fingerprints: &[u64],
    templates: &TemplatePositions<'_>,
    tasks: &[Arc<CachedTask>],
) -> Option<Vec<u32>> {
    if shape.len() != tasks.len() || fingerprints.len() != tasks.len() {
        return None;
    }
    let mut task_at = vec![u32::MAX; tasks.len()];
    for (i, task) in tasks.iter().enumerate() {
        let position = shape.position(task.metadata.name.as_deref()?)?;
        let slot = task_at.get_mut(position)?;
        if *slot != u32::MAX || fingerprints.get(position) != Some(&fingerprint(templates, task)) {
            return None;
        }
        *slot = u32::try_from(i).ok()?;
    }
    Some(task_at)
}

/// A hash of everything a Task's place in its Feature's DAG depends on besides its name:
/// its identity (uid, creation time), `dependsOn`, `parent`, `priority` and template position.
fn fingerprint(templates: &TemplatePositions<'_>, task: &CachedTask) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    let mut write = |bytes: &[u8]| {
        hasher.write_usize(bytes.len());
        hasher.write(bytes);
    };
    write(task.metadata.uid.as_deref().unwrap_or("").as_bytes());
    let created = task
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(i64::MIN, |t| t.0.as_millisecond());
    write(&created.to_le_bytes());
    let fields = &task.spec.fields;
    write(&(fields.depends_on.len() as u64).to_le_bytes());
    for dependency in &fields.depends_on {
        write(dependency.as_bytes());
    }
    match &fields.parent {
        Some(parent) => write(parent.as_bytes()),
        None => write(&[0xff]),
    }
    write(&fields.priority.to_le_bytes());
    let template = templates.index_of(task).map_or(u64::MAX, |i| i as u64);
    write(&template.to_le_bytes());
    hasher.finish()
}

/// [`decide::plan`], with the feature's DAG structure from `shapes` while its Tasks' structure is
/// the same as when it was kept (a reconcile of a large feature validates nothing again).
pub(crate) fn plan_kept(snapshot: &Snapshot<'_>, shapes: &Shapes) -> FeaturePlan {
    let feature = snapshot.feature;
    let key = feature_key(
        feature.metadata.namespace.as_deref().unwrap_or(""),
        feature.metadata.name.as_deref().unwrap_or(""),
    );
    decide::plan_laid_out(snapshot, shapes.layout(&key, feature, snapshot.tasks))
}

#[cfg(test)]
#[path = "shapes_tests.rs"]
mod tests;
