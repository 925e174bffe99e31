//! The controller's side of git workspaces (pure; the Secret is read by
//! `act::git_secret`): the checks the schema cannot make (URL, branch
//! names, the credentials Secret and its keys), the git steps of an attempt's Pod, the
//! finishing step's report on ingest, and the feature branch's head in the Feature status.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;

use super::pod_git::{GitAttemptKind, GitSteps, add_git_steps};
use super::problem::Problem;
use crate::api::conditions;
use crate::api::workspace::{FeatureBranchStatus, GitWorkspace};
use crate::api::{AgentSpec, Feature, TaskStatus};
use crate::controller::plan::cached::CachedTask;
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport};
use crate::workspace::{RepoSettings, Transport};

/// Adds the git steps to an attempt's Pod when the Feature works in a git repository: a
/// work attempt starts from the feature branch (and, when a verifier follows, pushes only
/// its work branch); a verification attempt starts from that work branch and integrates it
/// on pass. `agent` is the pool agent that runs the attempt (its image runs the git steps
/// unless `spec.workspace.git.image` names one).
pub(crate) fn add_to_attempt_pod(
    pod: &mut Pod,
    feature: &Feature,
    agent: &AgentSpec,
    task_id: &str,
    attempt: u32,
    kind: AttemptKind,
) {
    let Some(git) = feature.spec.git() else {
        return;
    };
    let feature_name = feature.name_any();
    add_git_steps(
        pod,
        &GitSteps {
            git,
            feature: &feature_name,
            task_id,
            attempt,
            agent_image: agent.image.as_deref().unwrap_or_default(),
            kind: match kind {
                AttemptKind::Work => GitAttemptKind::Work {
                    verify_after: feature.spec.verify.agent,
                },
                AttemptKind::Verify => GitAttemptKind::Verify,
            },
        },
    );
}

pub(crate) fn settings_problem(feature: &Feature, git: &GitWorkspace) -> Option<Problem> {
    let mut settings = RepoSettings::new(&git.url, &git.base_ref);
    settings.feature_branch = git.feature_branch.clone();
    let error = settings.validate(&feature.name_any()).err()?;
    Some(Problem {
        reason: conditions::REASON_GIT_WORKSPACE_INVALID,
        message: format!(
            "Feature {}/{}: {error}; no attempt starts until it is fixed",
            feature.namespace().unwrap_or_default(),
            feature.name_any()
        ),
    })
}

/// The problem with the credentials Secret as read (`None`: it does not exist).
pub(crate) fn secret_problem(
    feature: &Feature,
    git: &GitWorkspace,
    secret: Option<&Secret>,
) -> Option<Problem> {
    let secret_ref = git.credentials_secret_ref.as_ref()?;
    let namespace = feature.namespace().unwrap_or_default();
    let name = &secret_ref.name;
    let problem = |message: String| Problem {
        reason: conditions::REASON_GIT_CREDENTIALS_MISSING,
        message: format!("{message}; no attempt starts until it is fixed"),
    };
    let Some(secret) = secret else {
        return Some(problem(format!(
            "the git credentials Secret {namespace}/{name} (spec.workspace.git.credentialsSecretRef) \
             does not exist: create it (kubectl create secret generic {name} -n {namespace} ...) \
             or fix the name"
        )));
    };
    let keys: Vec<&str> = match crate::workspace::validate_url(&git.url) {
        Ok(Transport::Ssh) => vec![
            secret_ref.ssh_private_key_key(),
            secret_ref.known_hosts_key(),
        ],
        _ => vec![secret_ref.username_key(), secret_ref.token_key()],
    };
    let has = |key: &str| {
        secret.data.as_ref().is_some_and(|d| d.contains_key(key))
            || secret
                .string_data
                .as_ref()
                .is_some_and(|d| d.contains_key(key))
    };
    let missing: Vec<&str> = keys.into_iter().filter(|k| !has(k)).collect();
    if missing.is_empty() {
        return None;
    }
    Some(problem(format!(
        "the git credentials Secret {namespace}/{name} has no key {}: add {} to the Secret, or \
         name the keys it has in spec.workspace.git.credentialsSecretRef",
        missing
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if missing.len() == 1 { "it" } else { "them" }
    )))
}

/// Records the git steps' report on the attempt just ingested.
pub(crate) fn record_report(status: &mut TaskStatus, report: Option<WorkspaceReport>) {
    if let (Some(record), Some(report)) = (status.attempts.last_mut(), report) {
        record.workspace = Some(Box::new(report));
    }
}

/// The feature branch and its head: the integrated commit no later integration was put on
/// top of. (Attempts' end times do not order pushes: two tasks' git steps race, and the
/// status keeps whole seconds.) Reports without `integratedOnto` (recorded by an older
/// version) fall back to the newest end time.
pub(crate) fn branch_status(
    feature: &Feature,
    tasks: &[Arc<CachedTask>],
) -> Option<FeatureBranchStatus> {
    let git = feature.spec.git()?;
    let branch = git
        .feature_branch
        .clone()
        .unwrap_or_else(|| crate::workspace::default_feature_branch(&feature.name_any()));
    let integrated: Vec<_> = tasks
        .iter()
        .filter_map(|t| t.status.as_ref())
        .flat_map(|s| s.attempts.iter())
        .filter_map(|a| {
            let report = a.workspace.as_ref()?;
            (report.outcome == WorkspaceOutcome::Integrated).then_some((a, report))
        })
        .collect();
    let built_upon: BTreeSet<&str> = integrated
        .iter()
        .filter_map(|(_, report)| report.integrated_onto.as_deref())
        .collect();
    let head = integrated
        .iter()
        .filter_map(|(attempt, report)| {
            Some((attempt.ended_at.as_ref(), report.feature_head.as_deref()?))
        })
        .filter(|(_, head)| !built_upon.contains(head))
        .max_by_key(|(ended_at, _)| ended_at.map(|t| t.0))
        .map(|(_, head)| head.to_owned());
    Some(FeatureBranchStatus {
        branch,
        head,
        integrated: u32::try_from(integrated.len()).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
#[path = "git_tests.rs"]
mod tests;
