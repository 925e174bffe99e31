//! A Task as the cache keeps it.

use super::trim_metadata;
use crate::api::Task;
use crate::api::labels::PROPOSALS_ANNOTATION;

/// A Task as cached: of its labels, annotations and owner references only where it came
/// from (its Feature, template and template hash), packed into one cache-only string
/// ([`crate::controller::plan::origin`]: the maps cost 870 bytes a Task, 8.5 MiB over
/// 10,000); no finalizers, and no description (the prompt text, up to 32 KiB, needed only
/// when an attempt starts: [`crate::controller::cache::descriptions`] finds it); the rest
/// of the spec and the whole status (a status write carries the whole status it was decided
/// from). The proposals a done attempt left for its Feature
/// ([`PROPOSALS_ANNOTATION`], rare and short-lived) are kept: the Feature's reconcile finds
/// them in the cache.
pub fn trim_task(task: &mut Task) {
    let meta = &mut task.metadata;
    trim_metadata(meta);
    meta.self_link = None;
    let proposals = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROPOSALS_ANNOTATION))
        .cloned();
    crate::controller::plan::origin::pack(meta);
    if let Some(proposals) = proposals {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(PROPOSALS_ANNOTATION.to_owned(), proposals);
    }
    meta.finalizers = None;
    task.spec.fields.description = String::new();
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, ObjectMeta, OwnerReference,
    };

    use super::super::{LAST_APPLIED_ANNOTATION, string_map as map};
    use super::*;
    use crate::api::{TaskFields, TaskSpec};
    use crate::controller::plan::origin::{self, Origin};

    fn task() -> Task {
        let mut task = Task::new(
            "f-a",
            TaskSpec {
                feature_ref: "f".to_owned(),
                fields: TaskFields {
                    title: "A".to_owned(),
                    description: "do a".to_owned(),
                    depends_on: vec!["f-b".to_owned()],
                    ..TaskFields::default()
                },
            },
        );
        task.metadata = ObjectMeta {
            name: Some("f-a".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("u".to_owned()),
            resource_version: Some("9".to_owned()),
            generation: Some(2),
            labels: map(&[
                ("ralph.dev/feature", "f"),
                ("ralph.dev/task", "a"),
                ("app.kubernetes.io/instance", "demo"),
            ]),
            annotations: map(&[
                ("ralph.dev/template-hash", "abc"),
                (LAST_APPLIED_ANNOTATION, "{}"),
                (
                    "argocd.argoproj.io/tracking-id",
                    "demo:ralph.dev/Task:ns/f-a",
                ),
            ]),
            owner_references: Some(vec![OwnerReference {
                api_version: "ralph.dev/v1alpha1".to_owned(),
                kind: "Feature".to_owned(),
                name: "f".to_owned(),
                uid: "fu".to_owned(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            finalizers: Some(vec!["example.com/keep".to_owned()]),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..ObjectMeta::default()
        };
        task.status = Some(crate::api::TaskStatus {
            attempt_count: 1,
            ..Default::default()
        });
        task
    }

    #[test]
    fn a_cached_task_keeps_no_label_annotation_owner_finalizer_or_managed_fields() {
        let mut task = task();
        trim_task(&mut task);
        assert!(task.metadata.labels.is_none());
        assert!(task.metadata.annotations.is_none());
        assert!(task.metadata.owner_references.is_none());
        assert!(task.metadata.finalizers.is_none());
        assert!(task.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_cached_task_keeps_the_proposals_its_feature_has_not_read() {
        let mut task = task();
        kube::ResourceExt::annotations_mut(&mut task).insert(
            PROPOSALS_ANNOTATION.to_owned(),
            "f-a-a1-proposal".to_owned(),
        );
        trim_task(&mut task);
        let annotations = task.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.into_iter().collect::<Vec<_>>(),
            [(
                PROPOSALS_ANNOTATION.to_owned(),
                "f-a-a1-proposal".to_owned()
            )]
        );
        assert_eq!(origin::of(&task).template, Some("a"));
    }

    #[test]
    fn a_cached_and_a_live_task_tell_the_same_origin() {
        let live = task();
        let mut cached = task();
        trim_task(&mut cached);
        let expected = Origin {
            feature_uid: Some("fu"),
            template: Some("a"),
            template_hash: Some("abc"),
            plan: None,
        };
        assert_eq!(origin::of(&live), expected);
        assert_eq!(origin::of(&cached), expected);
    }

    #[test]
    fn a_standalone_task_has_no_origin_cached_or_live() {
        let mut standalone = task();
        standalone.metadata.annotations = None;
        standalone.metadata.labels = None;
        standalone.metadata.owner_references = None;
        assert_eq!(origin::of(&standalone), Origin::default());
        trim_task(&mut standalone);
        assert!(standalone.metadata.self_link.is_none());
        assert_eq!(origin::of(&standalone), Origin::default());
    }

    #[test]
    fn a_cached_task_has_no_description() {
        let mut task = task();
        trim_task(&mut task);
        assert!(task.spec.fields.description.is_empty());
    }

    #[test]
    fn a_cached_task_keeps_its_identity_the_rest_of_its_spec_and_its_status() {
        let original = task();
        let mut task = original.clone();
        trim_task(&mut task);
        assert_eq!(task.spec.feature_ref, original.spec.feature_ref);
        assert_eq!(
            TaskFields {
                description: String::new(),
                ..original.spec.fields.clone()
            },
            task.spec.fields
        );
        assert_eq!(task.status, original.status);
        let (meta, before) = (&task.metadata, &original.metadata);
        assert_eq!(meta.name, before.name);
        assert_eq!(meta.namespace, before.namespace);
        assert_eq!(meta.uid, before.uid);
        assert_eq!(meta.resource_version, before.resource_version);
        assert_eq!(meta.generation, before.generation);
    }
}
