//! The read-your-writes overlay of the Features' `status.planning`: what this process last
//! wrote there, until the Feature cache shows it. Planning steps act once (a plan read, a
//! person's answer recorded) and must not be repeated, or undone, from a Feature the watch
//! has not brought up to date yet. It also remembers what Tasks this process created for a
//! Feature (its planning Task, or a plan's Tasks) until the Task listing shows them, so a
//! Task watch behind those creations does not have them created again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::Feature;
use crate::api::planning::PlanningStatus;

/// By Feature uid: the `status.planning` this process wrote last.
#[derive(Clone, Debug, Default)]
pub struct PlanningWrites {
    written: Arc<Mutex<HashMap<String, PlanningStatus>>>,
    /// By Feature uid: what this process created that the listing may not show yet (a plan
    /// hash: all its Tasks; or the planning Task's template name).
    created: Arc<Mutex<HashMap<String, String>>>,
}

impl PlanningWrites {
    /// Records that `feature`'s status was written with `planning`.
    pub(crate) fn record(&self, feature: &Feature, planning: Option<&PlanningStatus>) {
        let (Some(uid), Some(planning)) = (feature.metadata.uid.clone(), planning) else {
            return;
        };
        crate::sync::lock(&self.written).insert(uid, planning.clone());
    }

    /// Records that the Tasks of `what` (a plan's hash, or the planning Task's template
    /// name) exist now for `feature`.
    pub(crate) fn record_created(&self, feature: &Feature, what: &str) {
        if let Some(uid) = feature.metadata.uid.clone() {
            crate::sync::lock(&self.created).insert(uid, what.to_owned());
        }
    }

    /// Whether the Tasks of `what` were created for `feature` (the listing may lag).
    pub(crate) fn created(&self, feature: &Feature, what: &str) -> bool {
        let uid = feature.metadata.uid.as_deref().unwrap_or_default();
        crate::sync::lock(&self.created)
            .get(uid)
            .map(String::as_str)
            == Some(what)
    }

    /// Forgets what was created for `feature`: the listing shows it (a Task deleted later
    /// is created again).
    pub(crate) fn seen(&self, feature: &Feature) {
        if let Some(uid) = feature.metadata.uid.as_deref() {
            crate::sync::lock(&self.created).remove(uid);
        }
    }

    /// The newest `status.planning` of `feature`: its own, or the one this process wrote
    /// that the cached Feature does not show yet. This process is the only writer of
    /// `status.planning` while it leads; an entry the cache has caught up with is dropped.
    pub(crate) fn newest(&self, feature: &Feature) -> PlanningStatus {
        let cached = feature.status.as_ref().and_then(|s| s.planning.clone());
        let Some(uid) = feature.metadata.uid.as_deref() else {
            return cached.unwrap_or_default();
        };
        let mut written = crate::sync::lock(&self.written);
        match written.get(uid) {
            Some(ours) if cached.as_ref() != Some(ours) => ours.clone(),
            Some(_) => {
                written.remove(uid);
                cached.unwrap_or_default()
            }
            None => cached.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FeatureStatus;

    fn feature(planning: Option<PlanningStatus>) -> Feature {
        let mut feature: Feature = crate::controller::testing::object(
            "Feature",
            serde_json::json!({"name": "demo", "namespace": "ns", "uid": "u1"}),
            serde_json::json!({"agent": {"command": ["agent"]}}),
        );
        feature.status = Some(FeatureStatus {
            planning,
            ..FeatureStatus::default()
        });
        feature
    }

    fn read_by(attempt: &str) -> PlanningStatus {
        PlanningStatus {
            planned_by: Some(attempt.to_owned()),
            ..PlanningStatus::default()
        }
    }

    #[test]
    fn a_plan_whose_tasks_were_created_is_remembered_by_its_hash() {
        let writes = PlanningWrites::default();
        writes.record_created(&feature(None), "h1");
        assert!(writes.created(&feature(None), "h1"));
        assert!(!writes.created(&feature(None), "h2"));
        writes.seen(&feature(None));
        assert!(!writes.created(&feature(None), "h1"));
    }

    #[test]
    fn a_write_the_cache_does_not_show_yet_is_read_back() {
        let writes = PlanningWrites::default();
        writes.record(&feature(None), Some(&read_by("demo-planning-a1")));
        assert_eq!(writes.newest(&feature(None)), read_by("demo-planning-a1"));
    }

    #[test]
    fn once_the_cache_shows_the_write_the_cache_is_read() {
        let writes = PlanningWrites::default();
        let written = read_by("demo-planning-a1");
        writes.record(&feature(None), Some(&written));
        assert_eq!(writes.newest(&feature(Some(written.clone()))), written);
        let later = read_by("demo-planning-a2");
        assert_eq!(writes.newest(&feature(Some(later.clone()))), later);
    }
}
