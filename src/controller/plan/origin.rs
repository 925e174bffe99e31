//! Where a Task came from: the Feature that owns it, the template it was applied from, and
//! the hash of what was applied; or, for a Task a planner wrote, the hash of its plan. A
//! Task read from the API server says so in its owner reference, its `ralph.dev/task`
//! label, its template-hash annotation and its `ralph.dev/plan` label ([`of`]); a cached
//! Task keeps the four as typed fields ([`super::cached::CachedTask::origin`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::ResourceExt;

use crate::api::labels::PLAN_LABEL;
use crate::api::{TASK_LABEL, Task};

/// Annotation on a templated Task: a hash of what the controller last applied for it.
pub(crate) const TEMPLATE_HASH_ANNOTATION: &str = "ralph.dev/template-hash";

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

/// Where `task` came from, read from a Task as the API server returns it.
pub(crate) fn of(task: &Task) -> Origin<'_> {
    of_meta(&task.metadata)
}

fn of_meta(meta: &ObjectMeta) -> Origin<'_> {
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

    #[test]
    fn a_templated_task_is_templated_by_its_feature() {
        let live = meta(vec![owner("Feature", "fu")], Some("a"), Some("h1"));
        assert!(of_meta(&live).is_templated_by("fu"));
    }

    #[test]
    fn a_planned_task_reads_its_plan() {
        let mut live = meta(vec![owner("Feature", "fu")], Some("a"), None);
        live.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(PLAN_LABEL.to_owned(), "p1".to_owned());
        assert!(of_meta(&live).is_planned_by("fu", "p1"));
        assert!(!of_meta(&live).is_planned_by("fu", "p2"));
        assert!(!of_meta(&live).is_templated_by("fu"));
    }

    #[test]
    fn only_an_owner_of_kind_feature_counts() {
        let live = meta(vec![owner("ConfigMap", "cu")], Some("a"), Some("h1"));
        assert_eq!(of_meta(&live).feature_uid, None);
    }

    #[test]
    fn a_task_of_another_feature_or_without_a_hash_is_not_templated_by_this_one() {
        let other = meta(vec![owner("Feature", "other")], Some("a"), Some("h1"));
        let unhashed = meta(vec![owner("Feature", "fu")], Some("a"), None);
        assert!(!of_meta(&other).is_templated_by("fu"));
        assert!(!of_meta(&unhashed).is_templated_by("fu"));
        assert_eq!(of_meta(&unhashed).template, Some("a"));
    }
}
