//! The planning attempt's Pod (pure): built by [`super::pod::attempt_pod`] like any other,
//! then its claim-keeper mounts the workspace read-only and, once the attempt is over,
//! uploads the planner's answer as ConfigMap `<attempt>-answer`, owned by the Pod
//! (docs/planning.md, [`crate::controller::sidecar`]). For that the agent ServiceAccount may
//! create ConfigMaps (config/rbac/agent.yaml); its token is mounted into the claim-keeper
//! only, never into the agent container. The Pod runs no finishing git step: the planner
//! changes no code, and its files are dropped with the Pod.
//!
//! A worker attempt's Pod of a planning Feature ([`add_proposal_upload`]): its runner
//! writes the tasks the final message proposes to [`PROPOSAL_FILE`] in the run directory
//! (not in the workspace: the finishing git step would commit it), and the claim-keeper
//! uploads that file, when there is one, as ConfigMap `<attempt>-proposal`, owned by the Pod.

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};

use super::pod::{
    AGENT_CONTAINER, FEATURE_LABEL, GIT_FINISH_ENDED, PROPOSAL_FILE, WORKSPACE, in_sidecar, mount,
};
use super::pod_git::FINISH_CONTAINER;
use crate::api::Feature;
use crate::engine::planning::ANSWER_DIR;
use crate::engine::verification::AttemptKind;

/// The claim-keeper's environment variable holding its Pod's name (the downward API).
pub(crate) const POD_NAME_ENV: &str = "RALPH_POD_NAME";
/// The claim-keeper's environment variable holding its Pod's uid (the downward API): the
/// answer ConfigMap's owner reference names it.
pub(crate) const POD_UID_ENV: &str = "RALPH_POD_UID";

/// Makes the attempt's `pod` of task `task_id` upload what its agent hands the Feature: the
/// planner's answer (a planning attempt), or the tasks a worker proposes (a work attempt of
/// a planning Feature, [`uploads_proposals`]).
pub(crate) fn add_uploads(
    pod: &mut Pod,
    feature: &Feature,
    task_id: &str,
    planning_attempt: bool,
    kind: AttemptKind,
) {
    let attempt = pod.metadata.name.clone().unwrap_or_default();
    if planning_attempt {
        add_answer_upload(pod, &crate::api::planning::answer_config_map_name(&attempt));
    } else if uploads_proposals(feature, planning_attempt, kind) {
        let proposal = crate::api::planning::proposal_config_map_name(&attempt);
        add_proposal_upload(pod, task_id, &proposal);
    }
}

/// Makes `pod` (an attempt Pod of the planning task) upload its planner's answer to
/// ConfigMap `answer_config_map`, and drops its finishing git step.
pub(crate) fn add_answer_upload(pod: &mut Pod, answer_config_map: &str) {
    let feature = feature_of(pod);
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.containers.retain(|c| c.name != FINISH_CONTAINER);
    let sidecar = super::pod::claim_keeper_mut(spec);
    if let Some(sidecar) = sidecar {
        upload_from(sidecar, answer_config_map, &feature);
    }
}

/// Whether an attempt's Pod uploads the tasks its worker proposes: a work attempt of a
/// planning Feature, never a planning attempt (its answer is the plan) nor a verification.
pub(crate) fn uploads_proposals(
    feature: &Feature,
    planning_attempt: bool,
    kind: AttemptKind,
) -> bool {
    feature.spec.planning.is_some() && !planning_attempt && kind == AttemptKind::Work
}

/// Makes `pod` (a work attempt's Pod of task `task_id` of a planning Feature) upload the
/// tasks its worker proposes to ConfigMap `proposal_config_map`: the runner writes them to
/// [`PROPOSAL_FILE`], the claim-keeper uploads the file once the attempt is over.
pub(crate) fn add_proposal_upload(pod: &mut Pod, task_id: &str, proposal_config_map: &str) {
    let feature = feature_of(pod);
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    if let Some(agent) = spec
        .containers
        .iter_mut()
        .find(|c| c.name == AGENT_CONTAINER)
        && let Some(command) = agent.command.as_mut()
    {
        // The runner's own flags end at `--`; the agent's command follows.
        let at = command
            .iter()
            .position(|word| word == "--")
            .unwrap_or(command.len());
        command.splice(
            at..at,
            ["--proposal-file".to_owned(), PROPOSAL_FILE.to_owned()],
        );
    }
    let sidecar = super::pod::claim_keeper_mut(spec);
    if let Some(sidecar) = sidecar {
        sidecar.args.get_or_insert_with(Vec::new).extend([
            "--proposal-file".to_owned(),
            in_sidecar(PROPOSAL_FILE),
            "--proposal-config-map".to_owned(),
            proposal_config_map.to_owned(),
            "--proposal-feature".to_owned(),
            feature,
            "--proposal-task".to_owned(),
            task_id.to_owned(),
        ]);
        sidecar.env.get_or_insert_with(Vec::new).extend([
            field_env(POD_NAME_ENV, "metadata.name"),
            field_env(POD_UID_ENV, "metadata.uid"),
        ]);
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

/// The Feature an attempt's Pod belongs to (its label).
fn feature_of(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(FEATURE_LABEL))
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "pod_planning_tests.rs"]
mod tests;
