//! Bringing the stored tasks in line with the manifest: new tasks join, removed ones are
//! dropped unless running, and an edited task's generation bumps.

use std::collections::HashSet;

use rusqlite::params;

use super::rows::NewEvent;
use super::{Store, StoreError, claims, events, keys, read_meta, tasks, write_meta};
use crate::engine::dag::TaskPhase;
use crate::local::feature::LocalFeature;

/// What a sync changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Tasks new in the manifest.
    pub added: Vec<String>,
    /// Tasks whose spec changed (generation bumped).
    pub edited: Vec<String>,
    /// Tasks no longer in the manifest and dropped.
    pub removed: Vec<String>,
    /// Tasks no longer in the manifest but kept until their running attempt ends.
    pub removed_later: Vec<String>,
}

fn to_json<T: serde::Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::corrupt(what, error))
}

impl Store {
    /// Syncs the stored tasks with `feature` (one transaction) and records the feature spec;
    /// a store holding another Feature is refused.
    pub fn sync(&mut self, feature: &LocalFeature, now_ms: i64) -> Result<SyncReport, StoreError> {
        let tx = self.conn.transaction()?;
        if let Some(recorded) = read_meta(&tx, keys::FEATURE_NAME)?
            && recorded != feature.name
        {
            return Err(StoreError::OtherFeature {
                dir: self.dir.clone(),
                recorded,
                wanted: feature.name.clone(),
            });
        }
        write_meta(&tx, keys::FEATURE_NAME, Some(&feature.name))?;
        let mut report = SyncReport::default();
        let existing = tasks::load_all(&tx)?;
        let wanted: HashSet<&str> = feature.tasks.iter().map(|t| t.name.as_str()).collect();
        for (index, spec) in feature.tasks.iter().enumerate() {
            let json = to_json(&format!("task {:?}", spec.name), spec)?;
            let order = i64::try_from(index).unwrap_or(i64::MAX);
            match existing.iter().find(|row| row.spec.name == spec.name) {
                None => {
                    // A task put back after it was dropped keeps its earlier attempts:
                    // its numbering goes on after them.
                    tx.execute(
                        "INSERT INTO tasks (name, spec, ord, generation, phase, attempt_count)
                         VALUES (?1, ?2, ?3, 1, ?4,
                             (SELECT COALESCE(MAX(number), 0) FROM attempts WHERE task = ?1))",
                        params![spec.name, json, order, TaskPhase::Pending.as_str()],
                    )?;
                    report.added.push(spec.name.clone());
                }
                Some(row) => {
                    let edited = row.spec != *spec;
                    let generation = row.generation + i64::from(edited);
                    tx.execute(
                        "UPDATE tasks SET spec = ?2, ord = ?3, generation = ?4, removed = 0
                         WHERE name = ?1",
                        params![spec.name, json, order, generation],
                    )?;
                    if edited {
                        report.edited.push(spec.name.clone());
                    }
                }
            }
        }
        for row in existing.iter().filter(|row| !wanted.contains(row.name())) {
            if claims::load(&tx, row.name())?.is_some() {
                tx.execute("UPDATE tasks SET removed = 1 WHERE name = ?1", [row.name()])?;
                report.removed_later.push(row.spec.name.clone());
            } else {
                tx.execute("DELETE FROM tasks WHERE name = ?1", [row.name()])?;
                report.removed.push(row.spec.name.clone());
            }
        }
        for (names, kind, message) in [
            (&report.added, "added", "new in the manifest"),
            (
                &report.edited,
                "edited",
                "changed in the manifest: generation bumped",
            ),
            (
                &report.removed,
                "removed",
                "no longer in the manifest: dropped",
            ),
            (
                &report.removed_later,
                "removed",
                "no longer in the manifest: dropped when its attempt ends",
            ),
        ] {
            for name in names {
                events::append(&tx, now_ms, &NewEvent::task(name, kind, message))?;
            }
        }
        write_meta(&tx, keys::FEATURE, Some(&to_json("feature", feature)?))?;
        tx.commit()?;
        Ok(report)
    }

    /// The feature spec last synced, if any.
    pub fn feature(&self) -> Result<Option<LocalFeature>, StoreError> {
        self.meta(keys::FEATURE)?
            .map(|json| {
                serde_json::from_str(&json)
                    .map_err(|error| StoreError::corrupt("feature spec", error))
            })
            .transpose()
    }
}
