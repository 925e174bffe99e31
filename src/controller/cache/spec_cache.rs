//! Whole Feature specs, prompt texts included, read on demand: the Feature cache keeps none
//! of the templates' descriptions ([`super::trim::trim_feature`]). A Feature's spec text
//! changes only with its `metadata.generation`, so an entry is keyed by (uid, generation)
//! and the attempts of a Feature share one GET per generation while its entry stays. The
//! cache is small and bounded ([`MAX_ENTRIES`], [`MAX_TEXT_BYTES`]): least recently used
//! entries go first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::{Api, Client, ResourceExt};

use super::trim::trim_metadata;
use crate::api::Feature;
use crate::controller::client::call::{CallError, bounded};
use crate::sync::lock;

/// Most Feature specs held at once.
pub(crate) const MAX_ENTRIES: usize = 16;
/// Most prompt text (template titles and descriptions) held at once, in bytes. A Feature
/// whose text alone is larger is read and used, not kept.
pub(crate) const MAX_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// Most Features whose Tasks are applied at once (each holds its changed Tasks, prompt
/// texts included, until they are applied: a first sync of 50 Features would hold all
/// 10,000). Enough to keep every template apply permit busy.
pub(crate) const FEATURES_APPLYING: usize = 8;

/// The bounded cache of whole Feature specs (one per process, shared by reconciles).
#[derive(Clone)]
pub struct SpecCache {
    entries: Arc<Mutex<Vec<Entry>>>,
    /// The Features being read, by uid, each with the lock its readers share: attempts of
    /// one Feature starting together share one read, while other Features' reads go on.
    reading: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    applying: Arc<tokio::sync::Semaphore>,
}

impl Default for SpecCache {
    fn default() -> Self {
        Self {
            entries: Arc::default(),
            reading: Arc::default(),
            applying: Arc::new(tokio::sync::Semaphore::new(FEATURES_APPLYING)),
        }
    }
}

/// One Feature generation, most recently used last.
struct Entry {
    uid: String,
    generation: i64,
    text_bytes: usize,
    feature: Arc<Feature>,
}

impl SpecCache {
    /// The whole spec of `cached` (a Feature from the cache, trimmed) at its generation or
    /// a newer one: from this cache, or read live (one GET) and kept. The caller compares
    /// generations where a newer spec must not be used. `None` when the Feature is gone.
    pub async fn spec(
        &self,
        client: &Client,
        timeout: Duration,
        cached: &Feature,
    ) -> Result<Option<Arc<Feature>>, CallError> {
        let uid = cached.metadata.uid.clone().unwrap_or_default();
        let generation = cached.metadata.generation.unwrap_or(0);
        if let Some(hit) = self.get(&uid, generation) {
            return Ok(Some(hit));
        }
        let gate = lock(&self.reading).entry(uid.clone()).or_default().clone();
        let _reading = gate.lock().await;
        if let Some(hit) = self.get(&uid, generation) {
            return Ok(Some(hit));
        }
        let namespace = cached.namespace().unwrap_or_default();
        let name = cached.name_any();
        let api: Api<Feature> = Api::namespaced(client.clone(), &namespace);
        let live = bounded(
            timeout,
            format!("get Feature {namespace}/{name}"),
            api.get_opt(&name),
        )
        .await
        .map(|live| {
            live.filter(|f| f.metadata.uid.as_deref() == Some(uid.as_str()))
                .map(|mut feature| {
                    trim_metadata(&mut feature.metadata);
                    let feature = Arc::new(feature);
                    self.insert(feature.clone());
                    feature
                })
        });
        // Kept before the gate goes: readers waiting on it, or arriving now, find the entry.
        lock(&self.reading).remove(&uid);
        live
    }

    /// A turn to build and apply a Feature's changed Tasks ([`FEATURES_APPLYING`] at once);
    /// `None` only if the limit was closed, which it never is.
    pub async fn applying(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.applying.acquire().await.ok()
    }

    /// The entry of Feature `uid` at `generation` or newer, marked most recently used.
    pub fn get(&self, uid: &str, generation: i64) -> Option<Arc<Feature>> {
        let mut entries = lock(&self.entries);
        let at = entries
            .iter()
            .position(|e| e.uid == uid && e.generation >= generation)?;
        let entry = entries.remove(at);
        let feature = entry.feature.clone();
        entries.push(entry);
        Some(feature)
    }

    /// Keeps `feature` (read live) in place of its older generations, dropping the least
    /// recently used entries beyond the bounds.
    pub fn insert(&self, feature: Arc<Feature>) {
        let uid = feature.metadata.uid.clone().unwrap_or_default();
        let generation = feature.metadata.generation.unwrap_or(0);
        let text_bytes = text_bytes(&feature);
        let mut entries = lock(&self.entries);
        if entries
            .iter()
            .any(|e| e.uid == uid && e.generation > generation)
        {
            return;
        }
        entries.retain(|e| e.uid != uid);
        if text_bytes > MAX_TEXT_BYTES {
            return;
        }
        entries.push(Entry {
            uid,
            generation,
            text_bytes,
            feature,
        });
        while entries.len() > MAX_ENTRIES
            || entries.iter().map(|e| e.text_bytes).sum::<usize>() > MAX_TEXT_BYTES
        {
            entries.remove(0);
        }
    }

    /// How many specs are held.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// True when no spec is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The prompt text a Feature's templates hold, in bytes (what the bound counts).
fn text_bytes(feature: &Feature) -> usize {
    feature
        .spec
        .tasks
        .iter()
        .map(|t| t.fields.title.len() + t.fields.description.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TaskFields, TaskTemplate};

    fn feature(uid: &str, generation: i64, description_bytes: usize) -> Arc<Feature> {
        let mut feature: Feature = match serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "generation": generation},
            "spec": {"agent": {"command": ["agent"]}, "tasks": []}
        })) {
            Ok(feature) => feature,
            Err(error) => panic!("test feature does not parse: {error}"),
        };
        feature.spec.tasks.push(TaskTemplate {
            name: "a".to_owned(),
            fields: TaskFields {
                description: "x".repeat(description_bytes),
                ..TaskFields::default()
            },
        });
        Arc::new(feature)
    }

    #[test]
    fn a_kept_spec_serves_its_generation_and_older_ones() {
        let cache = SpecCache::default();
        cache.insert(feature("f", 3, 10));
        assert!(cache.get("f", 3).is_some());
        assert!(cache.get("f", 2).is_some());
        assert!(cache.get("f", 4).is_none());
        assert!(cache.get("g", 3).is_none());
    }

    #[test]
    fn a_newer_generation_replaces_the_older_one() {
        let cache = SpecCache::default();
        cache.insert(feature("f", 3, 10));
        cache.insert(feature("f", 4, 10));
        assert_eq!(cache.len(), 1);
        assert!(cache.get("f", 4).is_some());
    }

    #[test]
    fn an_older_generation_read_late_does_not_replace_a_newer_one() {
        let cache = SpecCache::default();
        cache.insert(feature("f", 4, 10));
        cache.insert(feature("f", 3, 10));
        assert_eq!(
            cache.get("f", 0).and_then(|f| f.metadata.generation),
            Some(4)
        );
    }

    #[test]
    fn the_least_recently_used_spec_goes_beyond_the_entry_bound() {
        let cache = SpecCache::default();
        for i in 0..MAX_ENTRIES {
            cache.insert(feature(&format!("f{i}"), 1, 10));
        }
        assert!(cache.get("f0", 1).is_some());
        cache.insert(feature("new", 1, 10));
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert!(cache.get("f0", 1).is_some());
        assert!(cache.get("f1", 1).is_none());
    }

    #[test]
    fn specs_beyond_the_text_bound_push_out_the_least_recently_used() {
        let cache = SpecCache::default();
        let half = MAX_TEXT_BYTES / 2;
        cache.insert(feature("a", 1, half));
        cache.insert(feature("b", 1, half));
        cache.insert(feature("c", 1, 1));
        assert!(cache.get("a", 1).is_none());
        assert!(cache.get("b", 1).is_some() && cache.get("c", 1).is_some());
    }

    #[test]
    fn a_spec_larger_than_the_text_bound_is_not_kept() {
        let cache = SpecCache::default();
        cache.insert(feature("big", 1, MAX_TEXT_BYTES + 1));
        assert!(cache.is_empty());
    }
}
