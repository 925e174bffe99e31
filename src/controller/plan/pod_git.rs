//! The git steps of an agent Pod (pure): an init container that clones the feature branch
//! into the workspace and makes the task's work branch, and a finishing container that,
//! after the runner's result says done, commits and integrates the work. Only these two
//! containers mount the credentials Secret; the agent container never sees it.
//!
//! How the steps talk: the runner writes a copy of its result to the shared run
//! directory (`--result-copy`); the finishing step waits for it (or for the runner's
//! heartbeat to go stale: nothing is committed), decides with the engine's one rule
//! ([`crate::engine::workspace::finish_commits`]) and writes a [`WorkspaceReport`] to its
//! termination message, which the controller reads on ingest beside the runner's result.

use k8s_openapi::api::core::v1::{
    Container, ContainerStateTerminated, EmptyDirVolumeSource, KeyToPath, Pod, SecretVolumeSource,
    Volume, VolumeMount,
};

use super::pod::{
    AGENT_CONTAINER, GIT_FINISH_ENDED, HEARTBEAT, RALPH, RUN_DIR, RUNNER_BEAT, STALE_AFTER_SECONDS,
    WORKSPACE, env_var, in_sidecar, mount, restricted,
};
use crate::api::labels::{ATTEMPT_KIND_LABEL, TASK_LABEL};
use crate::api::workspace::GitWorkspace;
use crate::controller::plan::cached::CachedPod;
use crate::engine::attempt::{AttemptResult, RESULT_SCHEMA_VERSION};
use crate::engine::lifecycle::RunView;
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport, finish_commits};
use crate::workspace::{Transport, credential_file, validate_url};

/// Name of the init container that clones the repository.
pub(crate) const PREPARE_CONTAINER: &str = "git-prepare";
/// Name of the container that commits and integrates after the agent.
pub(crate) const FINISH_CONTAINER: &str = "git-finish";
/// Name of the volume holding the credentials Secret.
pub(crate) const CREDENTIALS_VOLUME: &str = "git-credentials";

const RESULT_COPY: &str = "/ralph/run/result.json";
const CREDENTIALS_DIR: &str = "/ralph/git-credentials";
const STATE_DIR: &str = "/ralph/git-state";
const STATE_FILE: &str = "/ralph/git-state/prepared.json";
const SCRATCH: &str = "/tmp";
const TERMINATION_LOG: &str = "/dev/termination-log";
const STATE_VOLUME: &str = "git-state";
const SCRATCH_VOLUME: &str = "git-scratch";
/// Secret files are readable by the Pod's group (fsGroup) only.
const SECRET_MODE: i32 = 0o440;

/// Which attempt the Pod runs: the seam for verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GitAttemptKind {
    /// A work attempt: starts from the feature branch. With `verify_after`, done work is
    /// committed and pushed to the task's work branch only (a verifier integrates it);
    /// otherwise it is integrated at once.
    Work {
        /// A verifier attempt follows a done verdict.
        verify_after: bool,
    },
    /// A verifier attempt: starts from the task's pushed work branch and, on pass,
    /// integrates it.
    Verify,
}

/// What the git steps of one attempt are built from.
#[derive(Clone, Debug)]
pub(crate) struct GitSteps<'a> {
    /// The Feature's repository.
    pub git: &'a GitWorkspace,
    /// The feature.
    pub feature: &'a str,
    /// The task id (its work branch is `ralph/<feature>/<task>`).
    pub task_id: &'a str,
    /// The attempt number.
    pub attempt: u32,
    /// The agent's image: the git steps' image unless `git.image` names one.
    pub agent_image: &'a str,
    /// Work or verify.
    pub kind: GitAttemptKind,
}

/// Adds the git steps to an attempt's Pod (built by [`super::pod::attempt_pod`]).
pub(crate) fn add_git_steps(pod: &mut Pod, steps: &GitSteps<'_>) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let resources = spec
        .containers
        .iter()
        .find(|c| c.name == AGENT_CONTAINER)
        .and_then(|c| c.resources.clone());
    if let Some(agent) = spec
        .containers
        .iter_mut()
        .find(|c| c.name == AGENT_CONTAINER)
        && let Some(command) = agent.command.as_mut()
        && let Some(separator) = command.iter().position(|a| a == "--")
    {
        command.splice(
            separator..separator,
            ["--result-copy".to_owned(), RESULT_COPY.to_owned()],
        );
    }
    let (prepare_args, finish_args) = step_args(steps);
    let image = steps
        .git
        .image
        .clone()
        .unwrap_or_else(|| steps.agent_image.to_owned());
    let container = |name: &str, args: Vec<String>| Container {
        name: name.to_owned(),
        image: Some(image.clone()),
        command: Some(vec![RALPH.to_owned()]),
        args: Some(args),
        working_dir: Some(SCRATCH.to_owned()),
        env: Some(vec![env_var("HOME", SCRATCH), env_var("TMPDIR", SCRATCH)]),
        resources: resources.clone(),
        termination_message_policy: Some("File".to_owned()),
        termination_message_path: Some(TERMINATION_LOG.to_owned()),
        security_context: Some(restricted()),
        volume_mounts: Some(git_mounts(steps.git)),
        ..Container::default()
    };
    // The claim-keeper keeps the claim while the git steps work, until the finishing step ended.
    let sidecar = super::pod::claim_keeper_mut(spec);
    if let Some(args) = sidecar.and_then(|c| c.args.as_mut()) {
        args.extend([
            "--step-heartbeat-file".to_owned(),
            in_sidecar(HEARTBEAT),
            "--ended-file".to_owned(),
            in_sidecar(GIT_FINISH_ENDED),
        ]);
    }
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .push(container(PREPARE_CONTAINER, prepare_args));
    spec.containers
        .push(container(FINISH_CONTAINER, finish_args));
    spec.volumes
        .get_or_insert_with(Vec::new)
        .extend(git_volumes(steps.git));
}

/// The arguments of `ralph git prepare` and `ralph git finish` for the attempt's kind.
fn step_args(steps: &GitSteps<'_>) -> (Vec<String>, Vec<String>) {
    let (prepare_mode, finish_mode, verifier) = match steps.kind {
        GitAttemptKind::Work {
            verify_after: false,
        } => (None, "integrate", None),
        GitAttemptKind::Work { verify_after: true } => (None, "push-work-branch", None),
        GitAttemptKind::Verify => (Some("--from-work-branch"), "integrate", Some("--verifier")),
    };
    let mut prepare_args = vec!["git".to_owned(), "prepare".to_owned()];
    prepare_args.extend(repo_args(steps));
    prepare_args.extend(prepare_mode.map(str::to_owned));
    let mut finish_args = vec!["git".to_owned(), "finish".to_owned()];
    finish_args.extend(repo_args(steps));
    finish_args.extend(
        [
            "--result-file",
            RESULT_COPY,
            "--runner-heartbeat-file",
            RUNNER_BEAT,
            "--heartbeat-max-age",
            &format!("{STALE_AFTER_SECONDS}s"),
            "--ended-file",
            GIT_FINISH_ENDED,
            "--mode",
            finish_mode,
        ]
        .map(str::to_owned),
    );
    finish_args.extend(verifier.map(str::to_owned));
    (prepare_args, finish_args)
}

fn repo_args(steps: &GitSteps<'_>) -> Vec<String> {
    let git = steps.git;
    let mut args = vec![
        "--url".to_owned(),
        git.url.clone(),
        "--base-ref".to_owned(),
        git.base_ref.clone(),
        "--feature".to_owned(),
        steps.feature.to_owned(),
        "--task".to_owned(),
        steps.task_id.to_owned(),
        "--attempt".to_owned(),
        steps.attempt.to_string(),
        "--workspace".to_owned(),
        WORKSPACE.to_owned(),
        "--state-file".to_owned(),
        STATE_FILE.to_owned(),
        "--report-file".to_owned(),
        TERMINATION_LOG.to_owned(),
        "--heartbeat-file".to_owned(),
        HEARTBEAT.to_owned(),
    ];
    if let Some(branch) = &git.feature_branch {
        args.extend(["--feature-branch".to_owned(), branch.clone()]);
    }
    if let Some(secret) = &git.credentials_secret_ref {
        args.extend([
            "--credentials-dir".to_owned(),
            CREDENTIALS_DIR.to_owned(),
            "--credentials-secret".to_owned(),
            secret.name.clone(),
        ]);
    }
    if let Some(author) = &git.author {
        args.extend([
            "--author-name".to_owned(),
            author.name.clone(),
            "--author-email".to_owned(),
            author.email.clone(),
        ]);
    }
    args
}

fn git_mounts(git: &GitWorkspace) -> Vec<VolumeMount> {
    let mut mounts = vec![
        mount("ralph-bin", "/ralph/bin", true),
        mount("workspace", WORKSPACE, false),
        mount("run", RUN_DIR, false),
        mount(STATE_VOLUME, STATE_DIR, false),
        mount(SCRATCH_VOLUME, SCRATCH, false),
    ];
    if git.credentials_secret_ref.is_some() {
        mounts.push(mount(CREDENTIALS_VOLUME, CREDENTIALS_DIR, true));
    }
    mounts
}

fn git_volumes(git: &GitWorkspace) -> Vec<Volume> {
    let memory = |name: &str| Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: None,
        }),
        ..Volume::default()
    };
    let mut volumes = vec![memory(STATE_VOLUME), memory(SCRATCH_VOLUME)];
    if let Some(secret) = &git.credentials_secret_ref {
        let item = |key: &str, path: &str| KeyToPath {
            key: key.to_owned(),
            path: path.to_owned(),
            mode: None,
        };
        let items = match validate_url(&git.url) {
            Ok(Transport::Ssh) => vec![
                item(secret.ssh_private_key_key(), credential_file::SSH_KEY),
                item(secret.known_hosts_key(), credential_file::KNOWN_HOSTS),
            ],
            _ => vec![
                item(secret.username_key(), credential_file::USERNAME),
                item(secret.token_key(), credential_file::TOKEN),
            ],
        };
        volumes.push(Volume {
            name: CREDENTIALS_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                items: Some(items),
                default_mode: Some(SECRET_MODE),
                optional: Some(false),
            }),
            ..Volume::default()
        });
    }
    volumes
}

/// Whether the Pod has a finishing git step, read from its status (the controller's Pod
/// cache holds no spec): the kubelet reports every container once the Pod has started.
fn has_finish_step(pod: &CachedPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|statuses| statuses.iter().any(|c| c.name == FINISH_CONTAINER))
}

fn terminated<'a>(
    pod: &'a CachedPod,
    name: &str,
    init: bool,
) -> Option<&'a ContainerStateTerminated> {
    let status = pod.status.as_ref()?;
    let statuses = if init {
        status.init_container_statuses.as_ref()?
    } else {
        status.container_statuses.as_ref()?
    };
    statuses
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}

fn report_in(terminated: &ContainerStateTerminated) -> Option<WorkspaceReport> {
    serde_json::from_str(terminated.message.as_deref()?.trim()).ok()
}

/// What the finishing step reported, once it ended. A step that ended without a readable
/// report, or a Pod that ended before the step did, reports a failure: work a done verdict
/// promised is never taken as integrated when nothing says it was.
pub(crate) fn finish_report(pod: &CachedPod) -> Option<WorkspaceReport> {
    if !has_finish_step(pod) {
        return None;
    }
    let failed = |message: String| WorkspaceReport {
        message: Some(message),
        ..WorkspaceReport::new(WorkspaceOutcome::Failed)
    };
    match terminated(pod, FINISH_CONTAINER, false) {
        Some(ended) => Some(report_in(ended).unwrap_or_else(|| {
            failed(format!(
                "the {FINISH_CONTAINER} step ended without a report ({}, exit code {}): \
                 nothing was integrated",
                ended.reason.as_deref().unwrap_or("Terminated"),
                ended.exit_code
            ))
        })),
        None if pod_over(pod) => Some(failed(format!(
            "the Pod ended before its {FINISH_CONTAINER} step did: nothing was integrated"
        ))),
        None => None,
    }
}

fn pod_over(pod: &CachedPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

/// The run as the lifecycle sees it, given the git steps: a done attempt has not ended
/// until its finishing step has (its work is being integrated), and a clone that failed
/// ends the attempt with what it said (misconfigured when only the user can fix it, else
/// crashed and retried).
pub(crate) fn with_git_steps(pod: &CachedPod, view: RunView) -> RunView {
    let pod_over = pod_over(pod);
    match view {
        RunView::Ended {
            result: Some(result),
            ..
        } if has_finish_step(pod)
            && finish_commits(kind_of(pod), &result)
            && !pod_over
            && terminated(pod, FINISH_CONTAINER, false).is_none() =>
        {
            RunView::Running
        }
        RunView::Ended { result: None, .. } => match prepare_failure(pod) {
            Some(result) => RunView::Ended {
                result: Some(Box::new(result)),
                reason: None,
            },
            None => view,
        },
        view => view,
    }
}

/// The attempt's kind, from its Pod's label (the controller's Pod cache keeps labels).
fn kind_of(pod: &CachedPod) -> AttemptKind {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ATTEMPT_KIND_LABEL))
        .map_or(AttemptKind::Work, |kind| AttemptKind::parse(kind))
}

/// The result standing in for the runner's when the clone failed (the agent never ran).
fn prepare_failure(pod: &CachedPod) -> Option<AttemptResult> {
    let terminated = terminated(pod, PREPARE_CONTAINER, true)?;
    if terminated.exit_code == 0 {
        return None;
    }
    let report = report_in(terminated)?;
    let message = report
        .message
        .unwrap_or_else(|| "the git clone step failed".to_owned());
    let task = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(TASK_LABEL))
        .cloned()
        .unwrap_or_default();
    let attempt = pod.metadata.name.clone();
    let document = match report.outcome {
        WorkspaceOutcome::Misconfigured => serde_json::json!({
            "version": RESULT_SCHEMA_VERSION,
            "task": task,
            "attempt": attempt,
            "outcome": "misconfigured",
            "misconfiguration": {
                "problem": format!("cloning the workspace failed: {message}"),
                "fix": "fix spec.workspace.git (url, baseRef) or its credentials Secret",
            },
        }),
        _ => serde_json::json!({
            "version": RESULT_SCHEMA_VERSION,
            "task": task,
            "attempt": attempt,
            "outcome": "crashed",
            "crash": format!("cloning the workspace failed: {message}"),
        }),
    };
    serde_json::from_value(document).ok()
}

#[cfg(test)]
#[path = "pod_git_tests.rs"]
mod tests;
