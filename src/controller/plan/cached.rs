//! What a reconcile may read of a cached object: the types the controller's caches hold
//! and hand out, with exactly the fields they keep. A field the cache drops is not there
//! to read, so code that would read it does not compile (a live read fetches the whole
//! object where a rare step needs more). The cache room (`cache/`) fills its stores with
//! these; the plan room decides from them without importing the cache.
//!
//! A [`CachedTask`] keeps its identity, where it came from ([`Origin`], instead of the
//! labels, annotations and owner references it is read from: those maps cost about 870
//! bytes a Task), its spec without the description (the prompt text, up to 32 KiB, needed
//! only when an attempt starts: `cache::descriptions` finds it) and its whole status (a
//! status write carries the whole status it was decided from). A [`CachedPod`] keeps its
//! identity, times, labels and owner, its gateway's budget share, and its status as
//! `cache::trim::trim_pod` trims it; no spec and no other annotation (the prompt is one).

use std::borrow::Cow;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::runtime::reflector::Lookup;

use super::origin::{self, Origin};
use crate::api::{Task, TaskStatus};
use crate::engine::dag::TaskNode;

/// `Lookup` for a cached view of the API type `$api`: its kind from `$api`, its identity
/// from its `metadata` (a reflector store and its indexes key it by these).
macro_rules! cached_lookup {
    ($cached:ty, $api:ty) => {
        impl Lookup for $cached {
            type DynamicType = ();

            fn kind(dyntype: &()) -> Cow<'_, str> {
                <$api as Resource>::kind(dyntype)
            }

            fn group(dyntype: &()) -> Cow<'_, str> {
                <$api as Resource>::group(dyntype)
            }

            fn version(dyntype: &()) -> Cow<'_, str> {
                <$api as Resource>::version(dyntype)
            }

            fn plural(dyntype: &()) -> Cow<'_, str> {
                <$api as Resource>::plural(dyntype)
            }

            fn name(&self) -> Option<Cow<'_, str>> {
                self.metadata.name.as_deref().map(Cow::Borrowed)
            }

            fn namespace(&self) -> Option<Cow<'_, str>> {
                self.metadata.namespace.as_deref().map(Cow::Borrowed)
            }

            fn resource_version(&self) -> Option<Cow<'_, str>> {
                self.metadata.resource_version.as_deref().map(Cow::Borrowed)
            }

            fn uid(&self) -> Option<Cow<'_, str>> {
                self.metadata.uid.as_deref().map(Cow::Borrowed)
            }
        }
    };
}

/// A Task as the cache keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedTask {
    /// Its identity.
    pub metadata: CachedMeta,
    /// Its spec, without the description.
    pub spec: CachedTaskSpec,
    /// Its whole status.
    pub status: Option<TaskStatus>,
    /// Where it came from.
    origin: CachedOrigin,
    /// The proposals done attempts left for its Feature, by annotation key
    /// ([`crate::api::labels::PROPOSAL_ANNOTATION_PREFIX`]; rare and short-lived): the
    /// Feature's reconcile finds them in the cache.
    proposals: BTreeMap<String, String>,
}

/// What a cached object keeps of its metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
}

/// A cached Task's spec: `featureRef` and the task fields but the description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedTaskSpec {
    /// `spec.featureRef`.
    pub feature_ref: String,
    /// The task fields but the description.
    pub fields: CachedTaskFields,
}

/// [`crate::api::TaskFields`] without the description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedTaskFields {
    /// `title`.
    pub title: String,
    /// `dependsOn`: names of Task objects.
    pub depends_on: Vec<String>,
    /// `parent`: the name of a Task object.
    pub parent: Option<String>,
    /// `priority`.
    pub priority: i32,
    /// `maxRetries`.
    pub max_retries: Option<u32>,
    /// `tags`.
    pub tags: Vec<String>,
}

/// Where a cached Task came from ([`Origin`], owned).
#[derive(Clone, Debug, Default, PartialEq)]
struct CachedOrigin {
    feature_uid: Option<String>,
    template: Option<String>,
    template_hash: Option<String>,
    plan: Option<String>,
}

impl From<Task> for CachedTask {
    fn from(task: Task) -> Self {
        let origin = origin::of(&task);
        let origin = CachedOrigin {
            feature_uid: origin.feature_uid.map(str::to_owned),
            template: origin.template.map(str::to_owned),
            template_hash: origin.template_hash.map(str::to_owned),
            plan: origin.plan.map(str::to_owned),
        };
        let proposals = task
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(key, _)| key.starts_with(crate::api::labels::PROPOSAL_ANNOTATION_PREFIX))
            .map(|(key, config_map)| (key.clone(), config_map.clone()))
            .collect();
        let fields = task.spec.fields;
        Self {
            metadata: CachedMeta {
                name: task.metadata.name,
                namespace: task.metadata.namespace,
                uid: task.metadata.uid,
                resource_version: task.metadata.resource_version,
                generation: task.metadata.generation,
                creation_timestamp: task.metadata.creation_timestamp,
            },
            spec: CachedTaskSpec {
                feature_ref: task.spec.feature_ref,
                fields: CachedTaskFields {
                    title: fields.title,
                    depends_on: fields.depends_on,
                    parent: fields.parent,
                    priority: fields.priority,
                    max_retries: fields.max_retries,
                    tags: fields.tags,
                },
            },
            status: task.status,
            origin,
            proposals,
        }
    }
}

impl CachedTask {
    /// The proposal ConfigMaps done attempts left for the Feature, by annotation key.
    pub(crate) fn proposals(&self) -> &BTreeMap<String, String> {
        &self.proposals
    }

    /// Where the Task came from.
    pub(crate) fn origin(&self) -> Origin<'_> {
        Origin {
            feature_uid: self.origin.feature_uid.as_deref(),
            template: self.origin.template.as_deref(),
            template_hash: self.origin.template_hash.as_deref(),
            plan: self.origin.plan.as_deref(),
        }
    }

    /// Its name ("" for an object without one, which the API server never returns).
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    /// Its namespace.
    pub fn namespace(&self) -> Option<String> {
        self.metadata.namespace.clone()
    }

    /// Its uid.
    pub fn uid(&self) -> Option<String> {
        self.metadata.uid.clone()
    }

    /// Its resourceVersion.
    pub fn resource_version(&self) -> Option<String> {
        self.metadata.resource_version.clone()
    }

    /// When it was created.
    pub fn creation_timestamp(&self) -> Option<Time> {
        self.metadata.creation_timestamp.clone()
    }

    /// When it was created, as a timestamp.
    pub fn created_at(&self) -> Option<Timestamp> {
        self.metadata.creation_timestamp.as_ref().map(|t| t.0)
    }

    /// A reference to this Task (an Event's `regarding`), as [`Resource::object_ref`].
    pub fn object_ref(&self, dt: &()) -> ObjectReference {
        ObjectReference {
            name: self.metadata.name.clone(),
            namespace: self.metadata.namespace.clone(),
            uid: self.metadata.uid.clone(),
            api_version: Some(<Task as Resource>::api_version(dt).into_owned()),
            kind: Some(<Task as Resource>::kind(dt).into_owned()),
            ..ObjectReference::default()
        }
    }

    /// The owner reference of an object this Task controls, as
    /// [`Resource::controller_owner_ref`].
    pub fn controller_owner_ref(&self, dt: &()) -> Option<OwnerReference> {
        Some(OwnerReference {
            api_version: <Task as Resource>::api_version(dt).into_owned(),
            kind: <Task as Resource>::kind(dt).into_owned(),
            name: self.metadata.name.clone()?,
            uid: self.metadata.uid.clone()?,
            controller: Some(true),
            ..OwnerReference::default()
        })
    }

    /// This Task as a node of its feature's DAG (keyed by object name), with the phase from
    /// its status (Pending when it has none). `order` is its creation order.
    pub fn task_node(&self, order: u64) -> TaskNode {
        TaskNode {
            name: self.name_any(),
            depends_on: self.spec.fields.depends_on.clone(),
            parent: self.spec.fields.parent.clone(),
            priority: self.spec.fields.priority,
            order,
            phase: self.status.as_ref().map(|s| s.phase).unwrap_or_default(),
        }
    }
}

cached_lookup!(CachedTask, Task);

/// An agent Pod as the cache keeps it (`cache::trim::trim_pod` says which part of its
/// status): no spec, and of its annotations only its gateway's budget share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    /// Its identity and times, labels and owner.
    pub metadata: CachedPodMeta,
    /// The budget share its gateway holds (`ralph.dev/budget-share`), if any.
    pub budget_share: Option<String>,
    /// Its status, trimmed.
    pub status: Option<PodStatus>,
}

/// What a cached Pod keeps of its metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPodMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<Time>,
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
    /// `metadata.ownerReferences`.
    pub owner_references: Option<Vec<OwnerReference>>,
}

impl CachedPod {
    /// Its name ("" for an object without one, which the API server never returns).
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    /// Its namespace.
    pub fn namespace(&self) -> Option<String> {
        self.metadata.namespace.clone()
    }

    /// When it was created.
    pub fn creation_timestamp(&self) -> Option<Time> {
        self.metadata.creation_timestamp.clone()
    }

    /// Its labels (empty without any).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    /// Its owner references.
    pub fn owner_references(&self) -> &[OwnerReference] {
        self.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
    }
}

cached_lookup!(CachedPod, Pod);

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::{TaskFields, TaskSpec};
    use crate::engine::dag::TaskPhase;

    fn map(entries: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn task() -> Task {
        let mut task = Task::new(
            "f-a",
            TaskSpec {
                feature_ref: "f".to_owned(),
                fields: TaskFields {
                    title: "A".to_owned(),
                    description: "do a".to_owned(),
                    depends_on: vec!["f-b".to_owned()],
                    parent: Some("f-p".to_owned()),
                    priority: 3,
                    max_retries: Some(2),
                    tags: vec!["t".to_owned()],
                },
            },
        );
        task.metadata = ObjectMeta {
            name: Some("f-a".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("u".to_owned()),
            resource_version: Some("9".to_owned()),
            generation: Some(2),
            labels: map(&[("ralph.dev/feature", "f"), ("ralph.dev/task", "a")]),
            annotations: map(&[("ralph.dev/template-hash", "abc")]),
            owner_references: Some(vec![OwnerReference {
                api_version: "ralph.dev/v1alpha1".to_owned(),
                kind: "Feature".to_owned(),
                name: "f".to_owned(),
                uid: "fu".to_owned(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        task.status = Some(TaskStatus {
            attempt_count: 1,
            ..Default::default()
        });
        task
    }

    #[test]
    fn a_cached_and_a_live_task_tell_the_same_origin() {
        let live = task();
        let expected = Origin {
            feature_uid: Some("fu"),
            template: Some("a"),
            template_hash: Some("abc"),
            plan: None,
        };
        assert_eq!(origin::of(&live), expected);
        assert_eq!(CachedTask::from(live).origin(), expected);
    }

    #[test]
    fn a_standalone_task_has_no_origin() {
        let mut standalone = task();
        standalone.metadata.annotations = None;
        standalone.metadata.labels = None;
        standalone.metadata.owner_references = None;
        assert_eq!(CachedTask::from(standalone).origin(), Origin::default());
    }

    #[test]
    fn a_cached_task_keeps_the_proposals_its_feature_has_not_read() {
        let mut live = task();
        live.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                crate::api::labels::proposal_annotation(1),
                "f-a-a1-proposal".to_owned(),
            );
        let cached = CachedTask::from(live);
        let expected = [(
            "proposal.ralph.dev/a1".to_owned(),
            "f-a-a1-proposal".to_owned(),
        )];
        assert_eq!(cached.proposals(), &BTreeMap::from(expected));
        assert!(CachedTask::from(task()).proposals().is_empty());
    }

    #[test]
    fn a_cached_task_keeps_its_identity_the_rest_of_its_spec_and_its_status() {
        let original = task();
        let cached = CachedTask::from(original.clone());
        let fields = &original.spec.fields;
        assert_eq!(
            cached.spec,
            CachedTaskSpec {
                feature_ref: "f".to_owned(),
                fields: CachedTaskFields {
                    title: fields.title.clone(),
                    depends_on: fields.depends_on.clone(),
                    parent: fields.parent.clone(),
                    priority: fields.priority,
                    max_retries: fields.max_retries,
                    tags: fields.tags.clone(),
                },
            }
        );
        assert_eq!(cached.status, original.status);
        let before = &original.metadata;
        assert_eq!(
            cached.metadata,
            CachedMeta {
                name: before.name.clone(),
                namespace: before.namespace.clone(),
                uid: before.uid.clone(),
                resource_version: before.resource_version.clone(),
                generation: before.generation,
                creation_timestamp: before.creation_timestamp.clone(),
            }
        );
    }

    #[test]
    fn a_cached_task_becomes_a_dag_node_with_its_status_phase() {
        let mut live = task();
        live.status = Some(TaskStatus {
            phase: TaskPhase::Running,
            ..TaskStatus::default()
        });
        let node = CachedTask::from(live).task_node(7);
        assert_eq!(node.name, "f-a");
        assert_eq!(node.depends_on, ["f-b"]);
        assert_eq!(node.parent.as_deref(), Some("f-p"));
        assert_eq!((node.priority, node.order), (3, 7));
        assert_eq!(node.phase, TaskPhase::Running);
    }
}
