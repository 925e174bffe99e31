//! A Feature as the cache keeps it: its templates without their texts, and the hash of
//! what each applies.

use kube::ResourceExt;

use super::trim_metadata;
use crate::api::{Feature, desired_tasks};
use crate::controller::plan::origin::template_hash;

/// Cache-only annotation of a trimmed Feature: the hash of what is applied for each of its
/// templates ([`crate::controller::plan::origin::template_hash`], computed from the whole
/// template before its text was dropped), comma-separated in template order. Never written
/// to the API server.
pub const TEMPLATE_HASHES_ANNOTATION: &str = "ralph.dev/cached-template-hashes";

/// A Feature as cached: its metadata trimmed ([`trim_metadata`]), and its templates without
/// their descriptions (the prompt texts, 1 KiB each is 10 MiB over 10,000 templates). What
/// a reconcile needs of the texts is kept instead: each template's applied hash
/// ([`TEMPLATE_HASHES_ANNOTATION`], read by [`template_hashes`]). The texts are read on
/// demand ([`crate::controller::cache::spec_cache`]): to apply a changed Task and to start
/// an attempt. A Feature without prompt texts is kept whole ([`is_whole`]: nothing to read
/// on demand). `cached` is the cache's version of the Feature, if any: when it is of the
/// same uid and generation (the spec has not changed, e.g. a status write), its hashes are
/// taken over instead of hashing every template again.
pub fn trim_feature(feature: &mut Feature, cached: Option<&Feature>) {
    trim_metadata(&mut feature.metadata);
    let meta = &feature.metadata;
    let unchanged = cached
        .filter(|_| meta.generation.is_some() && meta.uid.is_some())
        .filter(|c| c.metadata.uid == meta.uid && c.metadata.generation == meta.generation)
        .and_then(|c| c.annotations().get(TEMPLATE_HASHES_ANNOTATION).cloned());
    feature.annotations_mut().remove(TEMPLATE_HASHES_ANNOTATION);
    if feature
        .spec
        .tasks
        .iter()
        .all(|t| t.fields.description.is_empty())
    {
        return;
    }
    let hashes = match unchanged {
        Some(hashes) => hashes,
        // A watched object always has a uid; without one no Task can be applied from it.
        None => match desired_tasks(feature) {
            Ok(desired) => desired
                .iter()
                .map(template_hash)
                .collect::<Vec<_>>()
                .join(","),
            Err(_) => return,
        },
    };
    feature
        .annotations_mut()
        .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), hashes);
    for template in &mut feature.spec.tasks {
        template.fields.description = String::new();
    }
}

/// True when `feature` holds its templates' texts: it was not trimmed, or had none to drop.
pub fn is_whole(feature: &Feature) -> bool {
    !feature
        .annotations()
        .contains_key(TEMPLATE_HASHES_ANNOTATION)
}

/// The applied hash of each of `feature`'s templates, in template order: those recorded
/// when it was trimmed, or computed from its templates when it was not (a Feature read
/// live).
pub fn template_hashes(feature: &Feature) -> Vec<String> {
    let recorded = feature
        .annotations()
        .get(TEMPLATE_HASHES_ANNOTATION)
        .map(|joined| joined.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|hashes| hashes.len() == feature.spec.tasks.len());
    match recorded {
        Some(hashes) => hashes,
        None if feature.spec.tasks.is_empty() => Vec::new(),
        None => desired_tasks(feature)
            .map(|tasks| tasks.iter().map(template_hash).collect())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::LAST_APPLIED_ANNOTATION;
    use super::*;

    fn feature_with(description: &str) -> Feature {
        match serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
            "metadata": {"name": "f", "namespace": "ns", "uid": "fu", "generation": 2,
                "annotations": {(LAST_APPLIED_ANNOTATION): "{}", "team": "x"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"agent": {"command": ["agent"]}, "tasks": [
                {"name": "a", "title": "A", "description": description, "priority": 3},
                {"name": "b", "title": "B", "description": "do b", "dependsOn": ["a"]}
            ]}
        })) {
            Ok(feature) => feature,
            Err(error) => panic!("test feature does not parse: {error}"),
        }
    }

    fn trimmed(feature: &Feature) -> Feature {
        let mut trimmed = feature.clone();
        trim_feature(&mut trimmed, None);
        trimmed
    }

    #[test]
    fn a_cached_feature_loses_managed_fields_and_the_last_applied_copy() {
        let feature = trimmed(&feature_with("do a"));
        assert!(feature.metadata.managed_fields.is_none());
        let annotations = feature.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(annotations.get("team").map(String::as_str), Some("x"));
    }

    #[test]
    fn a_cached_feature_keeps_its_templates_without_their_descriptions() {
        let original = feature_with("do a");
        let feature = trimmed(&original);
        let mut expected = original.spec.clone();
        for template in &mut expected.tasks {
            template.fields.description = String::new();
        }
        assert_eq!(feature.spec, expected);
        assert_eq!(feature.metadata.generation, original.metadata.generation);
        assert_eq!(feature.metadata.uid, original.metadata.uid);
    }

    #[test]
    fn a_cached_feature_keeps_the_hash_of_each_whole_template_as_applied() {
        let original = feature_with("do a");
        let applied: Vec<String> = match desired_tasks(&original) {
            Ok(tasks) => tasks.iter().map(template_hash).collect(),
            Err(error) => panic!("desired tasks: {error}"),
        };
        assert_eq!(template_hashes(&trimmed(&original)), applied);
        assert_eq!(template_hashes(&original), applied);
    }

    #[test]
    fn a_template_hash_changes_with_its_description_only() {
        let before = template_hashes(&trimmed(&feature_with("do a")));
        let after = template_hashes(&trimmed(&feature_with("do a, and test it")));
        assert_ne!(before[0], after[0]);
        assert_eq!(before[1], after[1]);
    }

    #[test]
    fn template_hashes_on_the_object_read_from_the_api_server_are_not_trusted() {
        let mut feature = feature_with("do a");
        feature.metadata.uid = None;
        feature
            .annotations_mut()
            .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), "x,y".to_owned());
        assert!(template_hashes(&trimmed(&feature)).is_empty());
    }

    #[test]
    fn a_feature_without_prompt_texts_is_cached_whole() {
        let mut original = feature_with("");
        original.spec.tasks[1].fields.description = String::new();
        let feature = trimmed(&original);
        assert!(is_whole(&feature));
        assert_eq!(feature.spec, original.spec);
    }

    #[test]
    fn a_feature_with_prompt_texts_is_not_cached_whole() {
        assert!(is_whole(&feature_with("do a")));
        assert!(!is_whole(&trimmed(&feature_with("do a"))));
    }

    #[test]
    fn a_feature_of_the_cached_generation_takes_over_the_cached_hashes() {
        let cached = trimmed(&feature_with("do a"));
        // Same uid and generation: the spec is the cached one's, so nothing is hashed
        // again (the text differs here only to tell the two apart), and hashes the object
        // itself carries are not taken.
        let mut update = feature_with("a text changed without a new generation");
        update
            .annotations_mut()
            .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), "x,y".to_owned());
        trim_feature(&mut update, Some(&cached));
        assert_eq!(template_hashes(&update), template_hashes(&cached));
    }

    #[test]
    fn a_feature_of_a_new_generation_is_hashed_again() {
        let cached = trimmed(&feature_with("do a"));
        let mut update = feature_with("do a, and test it");
        update.metadata.generation = Some(3);
        trim_feature(&mut update, Some(&cached));
        assert_eq!(
            template_hashes(&update),
            template_hashes(&trimmed(&feature_with("do a, and test it")))
        );
        assert_ne!(template_hashes(&update), template_hashes(&cached));
    }
}
