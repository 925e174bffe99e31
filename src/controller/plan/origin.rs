//! Where a Task came from: the Feature that owns it, the template it was applied from, and
//! the hash of what was applied; or, for a Task a planner wrote, the hash of its plan. A
//! Task read from the API server says so in its owner reference, its `ralph.dev/task`
//! label, its template-hash annotation and its `ralph.dev/plan` label. A cached Task
//! (`cache::trim::trim_task`) keeps the three in one cache-only string instead ([`pack`]):
//! a label map costs 640 bytes even with one entry, and an owner reference 230, about
//! 8.5 MiB over 10,000 cached Tasks. [`of`] reads either form, so no reader needs to know
//! which one it holds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::ResourceExt;

use crate::api::labels::PLAN_LABEL;
use crate::api::{TASK_LABEL, Task};

/// Annotation on a templated Task: a hash of what the controller last applied for it.
pub(crate) const TEMPLATE_HASH_ANNOTATION: &str = "ralph.dev/template-hash";

/// Marks the packed origin of a cached Task in `metadata.selfLink`, a field API servers
/// have left empty since Kubernetes 1.20 and nothing in the controller reads. A selfLink an
/// older server did set is a path (`/apis/…`), so it cannot be taken for a packed origin;
/// the packed one is never written to the API server.
const PACKED: &str = "ralph.dev/cached-origin:";

/// Separates the packed parts: a uid, a label value and a hex hash hold none.
const SEPARATOR: char = '/';

/// Where a Task came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin<'a> {
    /// The uid of the Feature that owns the Task (its owner reference of kind Feature).
    pub feature_uid: Option<&'a str>,
    /// The name of the template the Task was applied from (its `ralph.dev/task` label).
    pub template: Option<&'a str>,
    /// The hash of what was applied (its template-hash annotation); only a Task the
    /// controller applied from a template has one.
    pub template_hash: Option<&'a str>,
    /// The hash of the plan that holds the Task, when a planner wrote it.
    pub plan: Option<&'a str>,
}

impl Origin<'_> {
    /// True when the Feature of uid `feature_uid` owns the Task and applied it from a template.
    pub(crate) fn is_templated_by(&self, feature_uid: &str) -> bool {
        self.feature_uid == Some(feature_uid) && self.template_hash.is_some()
    }

    /// True when the Feature of uid `feature_uid` owns the Task and a planner wrote it, in
    /// the plan of hash `plan`.
    pub(crate) fn is_planned_by(&self, feature_uid: &str, plan: &str) -> bool {
        self.feature_uid == Some(feature_uid) && self.plan == Some(plan)
    }
}

/// Where `task` came from, read from a Task as the API server returns it or as it is cached.
pub(crate) fn of(task: &Task) -> Origin<'_> {
    of_meta(&task.metadata)
}

fn of_meta(meta: &ObjectMeta) -> Origin<'_> {
    if let Some(packed) = meta
        .self_link
        .as_deref()
        .and_then(|l| l.strip_prefix(PACKED))
    {
        return unpack(packed);
    }
    Origin {
        feature_uid: meta
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.kind == "Feature")
            .map(|owner| owner.uid.as_str()),
        template: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(TASK_LABEL))
            .map(String::as_str),
        template_hash: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
            .map(String::as_str),
        plan: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(PLAN_LABEL))
            .map(String::as_str),
    }
}

/// Keeps `meta`'s origin in one cache-only string (none for a Task without any) and drops
/// its labels, annotations and owner references (nothing else of them is read from the
/// cache). Left as it is when a
/// part holds the separator (a hand-written annotation on a standalone Task): [`of`] still
/// reads it, at the cost of the maps.
pub(crate) fn pack(meta: &mut ObjectMeta) {
    let origin = of_meta(meta);
    let packed = if origin == Origin::default() {
        None
    } else {
        let Some(packed) = packed(origin) else {
            return;
        };
        Some(packed)
    };
    meta.labels = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.self_link = packed;
}

fn packed(origin: Origin<'_>) -> Option<String> {
    let parts = [
        origin.feature_uid,
        origin.template,
        origin.template_hash,
        origin.plan,
    ];
    if parts.iter().flatten().any(|part| part.contains(SEPARATOR)) {
        return None;
    }
    let joined = parts
        .map(Option::unwrap_or_default)
        .join(&SEPARATOR.to_string());
    Some(format!("{PACKED}{joined}"))
}

fn unpack(packed: &str) -> Origin<'_> {
    let mut parts = packed
        .splitn(4, SEPARATOR)
        .map(|part| (!part.is_empty()).then_some(part));
    Origin {
        feature_uid: parts.next().flatten(),
        template: parts.next().flatten(),
        template_hash: parts.next().flatten(),
        plan: parts.next().flatten(),
    }
}

/// A stable hash of what is applied for a templated Task (spec, labels, owner).
pub(crate) fn template_hash(task: &Task) -> String {
    use std::hash::Hasher;
    let applied = serde_json::json!({
        "spec": task.spec,
        "labels": task.labels(),
        "owners": task.owner_references(),
    });
    let mut hasher = crate::engine::stable_hash::StableHasher::default();
    hasher.write(applied.to_string().as_bytes());
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn owner(kind: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "ralph.dev/v1alpha1".to_owned(),
            kind: kind.to_owned(),
            name: "f".to_owned(),
            uid: uid.to_owned(),
            ..OwnerReference::default()
        }
    }

    fn meta(owners: Vec<OwnerReference>, template: Option<&str>, hash: Option<&str>) -> ObjectMeta {
        let one = |key: &str, value: Option<&str>| {
            value.map(|v| BTreeMap::from([(key.to_owned(), v.to_owned())]))
        };
        ObjectMeta {
            name: Some("f-a".to_owned()),
            owner_references: Some(owners),
            labels: one(TASK_LABEL, template),
            annotations: one(TEMPLATE_HASH_ANNOTATION, hash),
            ..ObjectMeta::default()
        }
    }

    fn packed_copy(mut meta: ObjectMeta) -> ObjectMeta {
        pack(&mut meta);
        meta
    }

    #[test]
    fn a_templated_task_reads_the_same_packed_as_live() {
        let live = meta(vec![owner("Feature", "fu")], Some("a"), Some("h1"));
        let cached = packed_copy(live.clone());
        assert!(cached.labels.is_none() && cached.owner_references.is_none());
        assert_eq!(of_meta(&cached), of_meta(&live));
        assert!(of_meta(&cached).is_templated_by("fu"));
    }

    #[test]
    fn a_planned_task_reads_its_plan_the_same_packed_as_live() {
        let mut live = meta(vec![owner("Feature", "fu")], Some("a"), None);
        live.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(PLAN_LABEL.to_owned(), "p1".to_owned());
        let cached = packed_copy(live.clone());
        assert_eq!(of_meta(&cached), of_meta(&live));
        assert!(of_meta(&cached).is_planned_by("fu", "p1"));
        assert!(!of_meta(&cached).is_planned_by("fu", "p2"));
        assert!(!of_meta(&cached).is_templated_by("fu"));
    }

    #[test]
    fn only_an_owner_of_kind_feature_counts() {
        let live = meta(vec![owner("ConfigMap", "cu")], Some("a"), Some("h1"));
        assert_eq!(of_meta(&live).feature_uid, None);
        assert_eq!(of_meta(&packed_copy(live)).feature_uid, None);
    }

    #[test]
    fn a_task_of_another_feature_or_without_a_hash_is_not_templated_by_this_one() {
        let other = packed_copy(meta(vec![owner("Feature", "other")], Some("a"), Some("h1")));
        let unhashed = packed_copy(meta(vec![owner("Feature", "fu")], Some("a"), None));
        assert!(!of_meta(&other).is_templated_by("fu"));
        assert!(!of_meta(&unhashed).is_templated_by("fu"));
        assert_eq!(of_meta(&unhashed).template, Some("a"));
    }

    #[test]
    fn a_part_holding_the_separator_leaves_the_task_as_it_is() {
        let live = meta(
            vec![owner("Feature", "fu")],
            Some("a"),
            Some("hand/written"),
        );
        let cached = packed_copy(live.clone());
        assert_eq!(cached, live);
        assert_eq!(of_meta(&cached).template_hash, Some("hand/written"));
    }

    #[test]
    fn a_self_link_an_old_api_server_set_is_not_taken_for_an_origin() {
        let mut live = meta(Vec::new(), None, None);
        live.self_link = Some("/apis/ralph.dev/v1alpha1/namespaces/ns/tasks/f-a".to_owned());
        assert_eq!(of_meta(&live), Origin::default());
    }
}
