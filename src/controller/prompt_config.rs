//! The prompt ConfigMap of one attempt (pure): named like the attempt's Pod, owned by the
//! Task, mounted into the agent container at `/ralph/prompt/prompt.md`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{AttemptPod, PROMPT_KEY, attempt_labels};

/// The attempt's prompt ConfigMap holding `prompt`.
pub fn prompt_config_map(input: &AttemptPod<'_>, prompt: String) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(input.attempt_id.to_owned()),
            namespace: Some(input.namespace.to_owned()),
            labels: Some(attempt_labels(input)),
            owner_references: Some(vec![input.owner.clone()]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(PROMPT_KEY.to_owned(), prompt)])),
        immutable: Some(true),
        ..ConfigMap::default()
    }
}
