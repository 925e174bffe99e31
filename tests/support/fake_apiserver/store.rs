//! The object store: objects per resource type, the global resourceVersion counter and the
//! change history that watches replay.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::errors::ApiError;
use super::objects::metadata_mut;
use super::resources::ResourceType;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjectKey = (String, String);

/// Receives changes as they are committed.
pub type ChangeReceiver = broadcast::Receiver<Arc<Change>>;

/// One committed write, as watches see it.
#[derive(Debug)]
pub struct Change {
    /// resourceVersion of the write.
    pub rv: u64,
    /// `group_resource` of the object's type.
    pub resource: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// The object after the write (for a deletion: its last state, with the deletion's rv).
    pub object: Arc<Value>,
    /// The object before the write; `None` for a creation.
    pub previous: Option<Arc<Value>>,
    /// The write removed the object.
    pub deleted: bool,
}

/// All objects and the change history.
pub struct Store {
    resources: Vec<ResourceType>,
    objects: HashMap<String, BTreeMap<ObjectKey, Arc<Value>>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    compacted_rv: u64,
    changes: broadcast::Sender<Arc<Change>>,
}

impl Store {
    /// An empty store serving `resources`, keeping the last `history_limit` changes.
    pub fn new(resources: Vec<ResourceType>, history_limit: usize) -> Self {
        let (changes, _) = broadcast::channel(history_limit.max(1024));
        Self {
            resources,
            objects: HashMap::new(),
            rv: 1,
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted_rv: 0,
            changes,
        }
    }

    /// The served type for a URL's group and plural (any version the URL names must match).
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.plural == plural && r.version == version)
    }

    /// Whether `plural` in `group` is a namespaced type (URL disambiguation).
    pub fn is_namespaced_plural(&self, group: &str, plural: &str) -> bool {
        self.resources
            .iter()
            .any(|r| r.group == group && r.plural == plural && r.namespaced)
    }

    /// All served types.
    pub fn resources(&self) -> &[ResourceType] {
        &self.resources
    }

    /// Serves `rt`, replacing a type with the same group and plural.
    pub fn register(&mut self, rt: ResourceType) {
        self.resources
            .retain(|r| !(r.group == rt.group && r.plural == rt.plural));
        self.resources.push(rt);
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    /// One object.
    pub fn get(&self, rt: &ResourceType, key: &ObjectKey) -> Option<Arc<Value>> {
        self.objects.get(&rt.group_resource())?.get(key).cloned()
    }

    /// Objects of a type, in `(namespace, name)` order, optionally in one namespace.
    pub fn iter<'a>(
        &'a self,
        rt: &ResourceType,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<Value>)> + 'a {
        self.objects
            .get(&rt.group_resource())
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(move |((ns, _), _)| namespace.is_none_or(|want| want == ns))
    }

    /// Every object, of any type, for which `pick` holds (garbage collection, namespace
    /// deletion).
    pub fn find_all(
        &self,
        pick: impl Fn(&ObjectKey, &Value) -> bool,
    ) -> Vec<(ResourceType, ObjectKey)> {
        self.resources
            .iter()
            .flat_map(|rt| {
                self.iter(rt, None)
                    .filter(|(k, v)| pick(k, v))
                    .map(|(k, _)| (rt.clone(), k.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Stores `object` under a fresh resourceVersion and records the change; returns it.
    pub fn put(&mut self, rt: &ResourceType, key: ObjectKey, mut object: Value) -> Arc<Value> {
        self.rv += 1;
        metadata_mut(&mut object).insert("resourceVersion".into(), self.rv.to_string().into());
        let object = Arc::new(object);
        let previous = self
            .objects
            .entry(rt.group_resource())
            .or_default()
            .insert(key.clone(), object.clone());
        self.record(rt, key, object.clone(), previous, false);
        object
    }

    /// Removes an object under a fresh resourceVersion and records the change; returns its
    /// last state.
    pub fn remove(&mut self, rt: &ResourceType, key: &ObjectKey) -> Result<Arc<Value>, ApiError> {
        let previous = self
            .objects
            .get_mut(&rt.group_resource())
            .and_then(|m| m.remove(key))
            .ok_or_else(|| ApiError::not_found(&rt.group_resource(), &key.1))?;
        self.rv += 1;
        let mut last = (*previous).clone();
        metadata_mut(&mut last).insert("resourceVersion".into(), self.rv.to_string().into());
        let last = Arc::new(last);
        self.record(rt, key.clone(), last.clone(), Some(previous), true);
        Ok(last)
    }

    fn record(
        &mut self,
        rt: &ResourceType,
        key: ObjectKey,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
        deleted: bool,
    ) {
        let change = Arc::new(Change {
            rv: self.rv,
            resource: rt.group_resource(),
            namespace: key.0,
            object,
            previous,
            deleted,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_rv = dropped.rv;
            }
        }
        // No receiver is not an error: nobody watches.
        let _ = self.changes.send(change);
    }

    /// Forgets the change history, as etcd compaction does: watches from any earlier
    /// resourceVersion then get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }

    /// Changes after `rv` plus a receiver for later ones, taken atomically; `Err` when the
    /// history no longer reaches back to `rv`.
    pub fn changes_since(&self, rv: u64) -> Result<(Vec<Arc<Change>>, ChangeReceiver), ApiError> {
        if rv < self.compacted_rv {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                self.compacted_rv + 1
            )));
        }
        let replay = self.history.iter().filter(|c| c.rv > rv).cloned().collect();
        Ok((replay, self.changes.subscribe()))
    }

    /// A receiver for changes after now.
    pub fn subscribe(&self) -> ChangeReceiver {
        self.changes.subscribe()
    }
}
