//! Secondary indexes over the controller's caches, kept by the same watch streams that fill
//! them (after the store, so an index never names an object its store lacks for long): the
//! Tasks, agent Pods and claim Leases of each Feature, and the Running Tasks. A reconcile
//! reads what belongs to its Feature instead of scanning every cached object, so its work
//! does not grow with the other Features' sizes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Lookup;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::controller::plan::decide::feature_key;
use crate::controller::plan::pod::FEATURE_LABEL;

/// Objects of kind `K` grouped by a key computed from each object (`None`: not indexed).
pub struct Index<K: Lookup>
where
    K::DynamicType: Eq + Hash + Clone,
{
    key_of: fn(&K) -> Option<String>,
    state: Arc<RwLock<State<K>>>,
}

impl<K: Lookup> Clone for Index<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            key_of: self.key_of,
            state: Arc::clone(&self.state),
        }
    }
}

struct State<K: Lookup>
where
    K::DynamicType: Eq + Hash + Clone,
{
    groups: Groups<K>,
    /// A re-list in progress (between `Init` and `InitDone`): the groups it has seen so far.
    relisting: Option<Groups<K>>,
}

/// Each object's reference is allocated once and shared by both maps, and each key once per
/// group: with 10,000 Tasks (and as many Pods and Leases) the indexes stay small.
struct Groups<K: Lookup>
where
    K::DynamicType: Eq + Hash + Clone,
{
    members: HashMap<Arc<str>, HashSet<Arc<ObjectRef<K>>>>,
    key: HashMap<Arc<ObjectRef<K>>, Arc<str>>,
}

impl<K: Lookup> Default for Groups<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Self {
            members: HashMap::new(),
            key: HashMap::new(),
        }
    }
}

impl<K: Lookup> Groups<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn remove(&mut self, object: &ObjectRef<K>) {
        if let Some(old) = self.key.remove(object)
            && let Some(members) = self.members.get_mut(&old)
        {
            members.remove(object);
            if members.is_empty() {
                self.members.remove(&old);
            }
        }
    }

    fn put(&mut self, object: ObjectRef<K>, key: Option<String>) {
        if self.key.get(&object).map(|k| &**k) == key.as_deref() {
            return;
        }
        self.remove(&object);
        if let Some(key) = key {
            let object = Arc::new(object);
            let key = match self.members.get_key_value(key.as_str()) {
                Some((shared, _)) => Arc::clone(shared),
                None => Arc::from(key),
            };
            self.members
                .entry(Arc::clone(&key))
                .or_default()
                .insert(Arc::clone(&object));
            self.key.insert(object, key);
        }
    }
}

impl<K: Lookup> Index<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// An empty index grouping objects by `key_of`.
    pub fn new(key_of: fn(&K) -> Option<String>) -> Self {
        Self {
            key_of,
            state: Arc::new(RwLock::new(State {
                groups: Groups::default(),
                relisting: None,
            })),
        }
    }

    /// Follows one watch event, as the store does (a re-list replaces the whole index when
    /// it is done).
    pub fn apply(&self, event: &Event<K>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Init => state.relisting = Some(Groups::default()),
            Event::InitApply(object) => {
                let key = (self.key_of)(object);
                if let Some(relisting) = state.relisting.as_mut() {
                    relisting.put(reference(object), key);
                }
            }
            Event::InitDone => {
                if let Some(relisted) = state.relisting.take() {
                    state.groups = relisted;
                }
            }
            Event::Apply(object) => {
                let key = (self.key_of)(object);
                state.groups.put(reference(object), key);
            }
            Event::Delete(object) => state.groups.remove(&reference(object)),
        }
    }

    /// References of the objects under `key`.
    pub fn refs(&self, key: &str) -> Vec<ObjectRef<K>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state
            .groups
            .members
            .get(key)
            .map(|members| members.iter().map(|r| ObjectRef::clone(r)).collect())
            .unwrap_or_default()
    }

    /// How many objects are under `key`.
    pub fn count(&self, key: &str) -> usize {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.groups.members.get(key).map_or(0, HashSet::len)
    }

    /// The objects under `key`, as `store` has them now.
    pub fn objects(&self, store: &Store<K>, key: &str) -> Vec<Arc<K>>
    where
        K: Clone,
    {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state
            .groups
            .members
            .get(key)
            .map(|members| members.iter().filter_map(|r| store.get(r)).collect())
            .unwrap_or_default()
    }
}

/// `object`'s reference without its resourceVersion and uid (identity only, less memory).
pub(crate) fn reference<K: Lookup>(object: &K) -> ObjectRef<K>
where
    K::DynamicType: Default,
{
    let mut reference = ObjectRef::from_obj(object);
    reference.extra = Default::default();
    reference
}

/// The indexes a reconcile reads, one set per term of leadership.
#[derive(Clone)]
pub struct Indexes {
    /// Tasks by `namespace/featureRef`.
    pub tasks: Index<CachedTask>,
    /// Agent Pods by `namespace/` + their `ralph.dev/feature` label.
    pub pods: Index<CachedPod>,
    /// Claim Leases by `namespace/` + their `ralph.dev/feature` label.
    pub leases: Index<Lease>,
    /// Tasks whose status records them Running, for the attempt slots.
    pub running_tasks: Index<CachedTask>,
}

impl Default for Indexes {
    fn default() -> Self {
        Self {
            tasks: Index::new(|t: &CachedTask| {
                Some(feature_key(
                    t.metadata.namespace.as_deref()?,
                    &t.spec.feature_ref,
                ))
            }),
            pods: Index::new(|p: &CachedPod| {
                let feature = p.labels().get(FEATURE_LABEL)?;
                Some(feature_key(p.metadata.namespace.as_deref()?, feature))
            }),
            leases: Index::new(|l: &Lease| by_feature_label(&l.metadata)),
            running_tasks: Index::new(super::slots::running_key),
        }
    }
}

impl Indexes {
    /// The Tasks in the cache whose status records them Running.
    pub fn running(&self, tasks: &Store<CachedTask>) -> Vec<Arc<CachedTask>> {
        self.running_tasks.objects(tasks, super::slots::RUNNING)
    }
}

fn by_feature_label(meta: &ObjectMeta) -> Option<String> {
    let feature = meta.labels.as_ref()?.get(FEATURE_LABEL)?;
    Some(feature_key(meta.namespace.as_deref()?, feature))
}

pub(crate) fn by_name<K: Lookup>(objects: Vec<Arc<K>>) -> BTreeMap<String, Arc<K>> {
    objects
        .into_iter()
        .filter_map(|o| Some((o.name()?.into_owned(), o)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(name: &str, group: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                labels: Some([("group".to_owned(), group.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn by_group() -> Index<ConfigMap> {
        Index::new(|c| c.metadata.labels.as_ref()?.get("group").cloned())
    }

    fn names(index: &Index<ConfigMap>, key: &str) -> Vec<String> {
        let mut names: Vec<String> = index.refs(key).into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn an_object_moves_to_its_new_group_when_it_changes() {
        let index = by_group();
        index.apply(&Event::Apply(object("a", "x")));
        index.apply(&Event::Apply(object("b", "x")));
        index.apply(&Event::Apply(object("a", "y")));
        assert_eq!(names(&index, "x"), ["b"]);
        assert_eq!(names(&index, "y"), ["a"]);
    }

    #[test]
    fn a_deleted_object_leaves_its_group() {
        let index = by_group();
        index.apply(&Event::Apply(object("a", "x")));
        index.apply(&Event::Delete(object("a", "x")));
        assert_eq!(index.count("x"), 0);
    }

    #[test]
    fn a_relist_replaces_the_groups_once_it_is_done() {
        let index = by_group();
        index.apply(&Event::Apply(object("gone", "x")));
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(object("new", "x")));
        assert_eq!(names(&index, "x"), ["gone"]);
        index.apply(&Event::InitDone);
        assert_eq!(names(&index, "x"), ["new"]);
    }
}
