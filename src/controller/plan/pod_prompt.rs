//! Where an attempt's prompt travels: in the Pod's annotation [`PROMPT_ANNOTATION`] (mounted
//! through the downward API), or, when that would make the Pod's annotations larger than the
//! API server accepts ([`MAX_ANNOTATION_BYTES`]), in a ConfigMap of its own mounted at the
//! same path (`<attempt>-prompt`, at most [`MAX_DATA_BYTES`]).

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, KeyToPath, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::pod::{PROMPT_ANNOTATION, PROMPT_FILE, PROMPT_VOLUME};

/// The most bytes (keys and values) an object's annotations may hold: the API server refuses
/// more (`TotalAnnotationSizeLimitB`).
pub(crate) const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The most bytes a ConfigMap's data may hold (keys and values; `MaxSecretSize`, the same
/// for ConfigMaps).
pub(crate) const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The bytes of `pod`'s annotations as the API server counts them against
/// [`MAX_ANNOTATION_BYTES`].
pub(crate) fn annotation_bytes(pod: &Pod) -> usize {
    pod.annotations()
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

/// The name of the ConfigMap that holds the prompt of attempt `attempt_id`.
pub(crate) fn prompt_config_map_name(attempt_id: &str) -> String {
    format!("{attempt_id}-prompt")
}

/// Why a prompt cannot travel with its Pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the prompt is {bytes} bytes, more than a ConfigMap holds ({MAX_DATA_BYTES} bytes)")]
pub(crate) struct PromptTooLarge {
    /// The prompt's bytes.
    pub(crate) bytes: usize,
}

/// Leaves the prompt in `pod`'s annotation when the annotations fit; else moves it into
/// the ConfigMap it returns (named after the Pod, labelled like it, owned by the Pod's
/// owner until the Pod exists) and mounts that instead.
pub(crate) fn place_prompt(pod: &mut Pod) -> Result<Option<ConfigMap>, PromptTooLarge> {
    if annotation_bytes(pod) <= MAX_ANNOTATION_BYTES {
        return Ok(None);
    }
    let Some(prompt) = pod.annotations_mut().remove(PROMPT_ANNOTATION) else {
        return Ok(None);
    };
    if PROMPT_FILE.len() + prompt.len() > MAX_DATA_BYTES {
        return Err(PromptTooLarge {
            bytes: prompt.len(),
        });
    }
    let name = prompt_config_map_name(&pod.name_any());
    let volume = pod
        .spec
        .as_mut()
        .and_then(|s| s.volumes.as_mut())
        .and_then(|volumes| volumes.iter_mut().find(|v| v.name == PROMPT_VOLUME));
    if let Some(volume) = volume {
        *volume = Volume {
            name: PROMPT_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: name.clone(),
                items: Some(vec![KeyToPath {
                    key: PROMPT_FILE.to_owned(),
                    path: PROMPT_FILE.to_owned(),
                    mode: None,
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        };
    }
    Ok(Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: pod.metadata.namespace.clone(),
            labels: pod.metadata.labels.clone(),
            owner_references: pod.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        },
        data: Some([(PROMPT_FILE.to_owned(), prompt)].into()),
        ..ConfigMap::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::testing::{pod_spec, volume};

    fn pod_with_prompt(prompt: &str) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "big-a-a1",
                "namespace": "team",
                "labels": {"ralph.dev/feature": "big"},
                "ownerReferences": [{"apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
                                     "name": "big-a", "uid": "t1", "controller": true}]
            },
            "spec": {"containers": [], "volumes": [{"name": PROMPT_VOLUME, "downwardAPI": {}}]}
        }))
        .expect("a Pod");
        pod.annotations_mut()
            .insert(PROMPT_ANNOTATION.to_owned(), prompt.to_owned());
        pod
    }

    #[test]
    fn a_prompt_that_fits_stays_in_the_annotation() {
        let mut pod = pod_with_prompt("Work on task a.");
        assert_eq!(place_prompt(&mut pod), Ok(None));
        assert!(pod.annotations().contains_key(PROMPT_ANNOTATION));
        assert!(volume(&pod, PROMPT_VOLUME).downward_api.is_some());
    }

    #[test]
    fn a_prompt_too_large_for_the_annotations_moves_into_a_config_map_mounted_instead() {
        let prompt = "p".repeat(MAX_ANNOTATION_BYTES);
        let mut pod = pod_with_prompt(&prompt);
        let map = place_prompt(&mut pod)
            .expect("fits a ConfigMap")
            .expect("moved");
        assert_eq!(map.metadata.name.as_deref(), Some("big-a-a1-prompt"));
        assert_eq!(map.data.as_ref().map(|d| &d[PROMPT_FILE]), Some(&prompt));
        assert_eq!(map.metadata.owner_references, pod.metadata.owner_references);
        assert_eq!(map.metadata.labels, pod.metadata.labels);
        assert!(!pod.annotations().contains_key(PROMPT_ANNOTATION));
        let source = volume(&pod, PROMPT_VOLUME)
            .config_map
            .clone()
            .expect("configMap");
        assert_eq!(source.name, "big-a-a1-prompt");
        assert_eq!(pod_spec(&pod).volumes.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn a_prompt_too_large_for_a_config_map_is_refused_with_its_size() {
        let mut pod = pod_with_prompt(&"p".repeat(MAX_DATA_BYTES));
        assert_eq!(
            place_prompt(&mut pod),
            Err(PromptTooLarge {
                bytes: MAX_DATA_BYTES
            })
        );
    }
}
