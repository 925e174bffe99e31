//! The planning attempt's Pod (pure): built by [`super::pod::attempt_pod`] like any other,
//! then its claim-keeper mounts the workspace read-only and, once the attempt is over,
//! uploads the planner's answer as ConfigMap `<attempt>-answer`, owned by the Pod
//! (docs/planning.md, [`crate::controller::sidecar`]). For that the agent ServiceAccount may
//! create ConfigMaps (config/rbac/agent.yaml); its token is mounted into the claim-keeper
//! only, never into the agent container. The Pod runs no finishing git step: the planner
//! changes no code, and its files are dropped with the Pod.

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};

use super::pod::{
    FEATURE_LABEL, GIT_FINISH_ENDED, SIDECAR_CONTAINER, WORKSPACE, in_sidecar, mount,
};
use super::pod_git::FINISH_CONTAINER;
use crate::engine::planning::ANSWER_DIR;

/// The claim-keeper's environment variable holding its Pod's name (the downward API).
pub(crate) const POD_NAME_ENV: &str = "RALPH_POD_NAME";
/// The claim-keeper's environment variable holding its Pod's uid (the downward API): the
/// answer ConfigMap's owner reference names it.
pub(crate) const POD_UID_ENV: &str = "RALPH_POD_UID";

/// Makes `pod` (an attempt Pod of the planning task) upload its planner's answer to
/// ConfigMap `answer_config_map`, and drops its finishing git step.
pub(crate) fn add_answer_upload(pod: &mut Pod, answer_config_map: &str) {
    let feature = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(FEATURE_LABEL))
        .cloned()
        .unwrap_or_default();
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.containers.retain(|c| c.name != FINISH_CONTAINER);
    let sidecar = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
        .find(|c| c.name == SIDECAR_CONTAINER);
    if let Some(sidecar) = sidecar {
        upload_from(sidecar, answer_config_map, &feature);
    }
}

fn upload_from(sidecar: &mut Container, answer_config_map: &str, feature: &str) {
    let args = sidecar.args.get_or_insert_with(Vec::new);
    without_flag(args, "--ended-file", &in_sidecar(GIT_FINISH_ENDED));
    args.extend([
        "--answer-dir".to_owned(),
        format!("{WORKSPACE}/{ANSWER_DIR}"),
        "--answer-config-map".to_owned(),
        answer_config_map.to_owned(),
        "--answer-feature".to_owned(),
        feature.to_owned(),
    ]);
    sidecar
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(mount("workspace", WORKSPACE, true));
    sidecar.env.get_or_insert_with(Vec::new).extend([
        field_env(POD_NAME_ENV, "metadata.name"),
        field_env(POD_UID_ENV, "metadata.uid"),
    ]);
}

/// Removes `flag value` from `args`.
fn without_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    if let Some(at) = args
        .windows(2)
        .position(|pair| pair[0] == flag && pair[1] == value)
    {
        args.drain(at..at + 2);
    }
}

fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

#[cfg(test)]
#[path = "pod_planning_tests.rs"]
mod tests;
