//! Pod status documents as a kubelet writes them (pure: time passed in).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde_json::{Value, json};

/// The kubelet's limit on a termination message.
pub const TERMINATION_MESSAGE_MAX_BYTES: usize = 4096;

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// Exit code (128 + signal for a signal death).
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, ...
    pub reason: String,
    /// The termination message (the runner's result document), if any.
    pub message: Option<String>,
}

impl Termination {
    /// Exit 0 with `message` (a runner result) as the termination message.
    pub fn completed(message: impl Into<String>) -> Self {
        Self {
            exit_code: 0,
            reason: "Completed".into(),
            message: Some(message.into()),
        }
    }

    /// Exit 0 without a message (a sidecar or init container that finished).
    pub fn succeeded() -> Self {
        Self {
            exit_code: 0,
            reason: "Completed".into(),
            message: None,
        }
    }

    /// How a container that exited with `code` and left `message` ended: completed on 0,
    /// an error otherwise.
    pub fn from_exit(code: i32, message: Option<String>) -> Self {
        if code == 0 {
            Self {
                message,
                ..Self::succeeded()
            }
        } else {
            Self::error(code, message)
        }
    }

    /// A non-zero exit with an optional termination message.
    pub fn error(exit_code: i32, message: Option<String>) -> Self {
        Self {
            exit_code,
            reason: "Error".into(),
            message,
        }
    }

    /// Killed by the kernel for exceeding its memory limit: no message.
    pub fn oom_killed() -> Self {
        Self {
            exit_code: 137,
            reason: "OOMKilled".into(),
            message: None,
        }
    }
}

/// The image entrypoint the stand-in assumes for a container without `command`: the
/// only images whose entrypoint agent Pods rely on are ralph's.
pub const ENTRYPOINT: &str = "ralph";

/// The full command line of a container: `command` (or the assumed [`ENTRYPOINT`])
/// followed by `args`.
pub fn argv(container: &Container) -> Vec<String> {
    let command = match container.command.as_deref() {
        Some(command) if !command.is_empty() => command.to_vec(),
        _ => vec![ENTRYPOINT.to_owned()],
    };
    command
        .into_iter()
        .chain(container.args.iter().flatten().cloned())
        .collect()
}

/// Whether the container runs `ralph <subcommand>`.
pub fn runs_ralph(container: &Container, subcommand: &str) -> bool {
    let argv = argv(container);
    argv.first()
        .is_some_and(|p| p.ends_with("/ralph") || p == "ralph")
        && argv.get(1).is_some_and(|s| s == subcommand)
}

/// The agent container: the one running `ralph runner`, else the first container.
pub fn agent_container(pod: &Pod) -> Option<&Container> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| runs_ralph(c, "runner"))
        .or_else(|| containers.first())
}

/// Init containers that keep running next to the main containers (native sidecars).
pub fn is_native_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

fn truncate(message: &str) -> String {
    let mut end = message.len().min(TERMINATION_MESSAGE_MAX_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}

fn container_status(container: &Container, state: Value, ready: bool) -> Value {
    json!({
        "name": container.name,
        "image": container.image.clone().unwrap_or_default(),
        "imageID": "",
        "containerID": format!("standin://{}", container.name),
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
    })
}

/// The state of a container that ended with `termination`.
fn terminated_state(termination: &Termination, started_at: &str, now: &str) -> Value {
    let mut terminated = json!({
        "exitCode": termination.exit_code,
        "reason": termination.reason,
        "startedAt": started_at,
        "finishedAt": now,
    });
    if let Some(message) = termination.message.as_deref().filter(|m| !m.is_empty()) {
        terminated["message"] = truncate(message).into();
    }
    json!({ "terminated": terminated })
}

/// A Pod status of `phase` and the `conditions` (type, whether it holds); each init and
/// main container's state and readiness as `init` and `main` say.
fn pod_status(
    spec: &PodSpec,
    phase: &str,
    conditions: &[(&str, bool)],
    now: &str,
    mut init: impl FnMut(&Container) -> (Value, bool),
    mut main: impl FnMut(&Container) -> (Value, bool),
) -> Value {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(kind, holds)| condition(kind, *holds, now))
        .collect();
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let (state, ready) = init(c);
            container_status(c, state, ready)
        })
        .collect();
    let main: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| {
            let (state, ready) = main(c);
            container_status(c, state, ready)
        })
        .collect();
    json!({
        "phase": phase,
        "conditions": conditions,
        "initContainerStatuses": init,
        "containerStatuses": main,
    })
}

fn condition(kind: &str, status: bool, now: &str) -> Value {
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": now,
    })
}

/// Status of a Pod whose containers all run.
pub fn running(pod: &Pod, now: &str) -> Value {
    let Some(spec) = pod.spec.as_ref() else {
        return json!({ "phase": "Running" });
    };
    let running = json!({ "running": { "startedAt": now } });
    let completed = terminated_state(&Termination::succeeded(), now, now);
    let conditions = [
        ("PodScheduled", true),
        ("Initialized", true),
        ("ContainersReady", true),
        ("Ready", true),
    ];
    let init = |c: &Container| {
        if is_native_sidecar(c) {
            (running.clone(), true)
        } else {
            (completed.clone(), false)
        }
    };
    let main = |_: &Container| (running.clone(), true);
    let mut status = pod_status(spec, "Running", &conditions, now, init, main);
    status["startTime"] = now.into();
    status["hostIP"] = "127.0.0.1".into();
    status["podIP"] = "127.0.0.1".into();
    status
}

/// Status of a Pod whose agent container ended with `agent`; every other container is
/// reported terminated with exit 0 (sidecars are stopped once the agent is done).
pub fn terminated(pod: &Pod, agent: &Termination, started_at: &str, now: &str) -> Value {
    terminated_with(pod, agent, &[], started_at, now)
}

/// Status of a Pod whose init container `name` failed with `termination`: phase Failed,
/// the later init containers and the main containers never started.
pub fn init_failed(
    pod: &Pod,
    name: &str,
    termination: &Termination,
    started_at: &str,
    now: &str,
) -> Value {
    let Some(spec) = pod.spec.as_ref() else {
        return json!({ "phase": "Failed" });
    };
    let waiting = json!({ "waiting": { "reason": "PodInitializing" } });
    let completed = terminated_state(&Termination::succeeded(), started_at, now);
    let mut seen = false;
    let init = |c: &Container| {
        let state = if c.name == name {
            seen = true;
            terminated_state(termination, started_at, now)
        } else if seen {
            waiting.clone()
        } else {
            completed.clone()
        };
        (state, false)
    };
    let main = |_: &Container| (waiting.clone(), false);
    let conditions = [("PodScheduled", true), ("Initialized", false)];
    pod_status(spec, "Failed", &conditions, now, init, main)
}

/// [`terminated`], with how some other containers (by name) ended: phase Succeeded when
/// every main container exited 0, else Failed (as a kubelet decides for `restartPolicy:
/// Never`).
pub fn terminated_with(
    pod: &Pod,
    agent: &Termination,
    others: &[(String, Termination)],
    started_at: &str,
    now: &str,
) -> Value {
    let all_ok = agent.exit_code == 0 && others.iter().all(|(_, t)| t.exit_code == 0);
    let phase = if all_ok { "Succeeded" } else { "Failed" };
    main_containers(pod, phase, agent, others, started_at, now)
}

/// Status of a Pod whose agent container (and `others`, by name) ended while its other
/// main containers still run (a plain sidecar that has not exited): phase Running.
pub fn agent_ended(
    pod: &Pod,
    agent: &Termination,
    others: &[(String, Termination)],
    started_at: &str,
    now: &str,
) -> Value {
    main_containers(pod, "Running", agent, others, started_at, now)
}

/// Main containers: the agent ended with `agent`, those in `others` as given; any other
/// one ended with exit 0 in a terminal `phase`, runs otherwise.
fn main_containers(
    pod: &Pod,
    phase: &str,
    agent: &Termination,
    others: &[(String, Termination)],
    started_at: &str,
    now: &str,
) -> Value {
    let Some(spec) = pod.spec.as_ref() else {
        return json!({ "phase": phase });
    };
    let over = phase != "Running";
    let agent_name = agent_container(pod).map(|c| c.name.clone());
    let state = |t: &Termination| terminated_state(t, started_at, now);
    let running = json!({ "running": { "startedAt": started_at } });
    let other = Termination::succeeded();
    let init = |c: &Container| {
        if is_native_sidecar(c) && !over {
            (running.clone(), true)
        } else {
            (state(&other), false)
        }
    };
    let main = |c: &Container| {
        if Some(&c.name) == agent_name.as_ref() {
            return (state(agent), false);
        }
        match others.iter().find(|(name, _)| *name == c.name) {
            Some((_, t)) => (state(t), false),
            None if over => (state(&other), false),
            None => (running.clone(), true),
        }
    };
    let conditions = [
        ("PodScheduled", true),
        ("Initialized", true),
        ("ContainersReady", false),
        ("Ready", false),
    ];
    pod_status(spec, phase, &conditions, now, init, main)
}

/// Status of a Pod the scheduler cannot place (the node is at its Pod limit): Pending, no
/// node, `PodScheduled=False` with reason `Unschedulable` and the scheduler's message.
pub fn unschedulable(message: &str, now: &str) -> Value {
    json!({
        "phase": "Pending",
        "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": now,
        }],
    })
}

/// Status of a Pod the kubelet evicted (node pressure): phase Failed, reason Evicted, the
/// containers killed without a termination message.
pub fn evicted(pod: &Pod, message: &str, started_at: &str, now: &str) -> Value {
    let mut status = terminated(pod, &Termination::error(137, None), started_at, now);
    status["reason"] = "Evicted".into();
    status["message"] = message.into();
    status
}

/// Status of a Pod the kubelet cannot start: bound, phase Pending, container `name`
/// waiting with `reason` and `message` (an image it cannot pull, a Secret it cannot find).
/// Init containers before it completed (native sidecars running), later ones and the main
/// containers waiting for initialization; when `name` is a main container, the others run.
pub fn waiting(pod: &Pod, name: &str, reason: &str, message: &str, now: &str) -> Value {
    let Some(spec) = pod.spec.as_ref() else {
        return json!({ "phase": "Pending" });
    };
    let stuck = json!({ "waiting": { "reason": reason, "message": message } });
    let initializing = json!({ "waiting": { "reason": "PodInitializing" } });
    let running = json!({ "running": { "startedAt": now } });
    let completed = terminated_state(&Termination::succeeded(), now, now);
    let in_init = spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == name);
    let mut seen = false;
    let init = |c: &Container| {
        let state = if c.name == name {
            seen = true;
            stuck.clone()
        } else if seen {
            initializing.clone()
        } else if is_native_sidecar(c) {
            running.clone()
        } else {
            completed.clone()
        };
        (state, false)
    };
    let main = |c: &Container| match () {
        () if c.name == name => (stuck.clone(), false),
        () if in_init => (initializing.clone(), false),
        () => (running.clone(), true),
    };
    let conditions = [
        ("PodScheduled", true),
        ("Initialized", !in_init),
        ("ContainersReady", false),
        ("Ready", false),
    ];
    let mut status = pod_status(spec, "Pending", &conditions, now, init, main);
    status["startTime"] = now.into();
    status
}

/// Every container of the Pod, init containers first (as the kubelet starts them).
pub fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten();
    init.chain(spec.into_iter().flat_map(|s| &s.containers))
}

/// True for an image no node can ever pull: its registry is under the reserved `.invalid`
/// top-level domain (RFC 6761), e.g. `registry.invalid/agent:1`.
pub fn unpullable(image: &str) -> bool {
    let Some((first, _)) = image.split_once('/') else {
        return false;
    };
    // A first component names a registry only with a dot or a port (else it is a Docker
    // Hub namespace).
    let host = first.split(':').next().unwrap_or(first);
    (first.contains('.') || first.contains(':')) && host.ends_with(".invalid")
}

/// The first container of the Pod (init containers first) whose image is [`unpullable`],
/// with the message a kubelet's pull of it leaves.
pub fn unpullable_container(pod: &Pod) -> Option<(String, String)> {
    containers(pod).find_map(|c| {
        let image = c.image.as_deref().filter(|i| unpullable(i))?;
        let host = image.split('/').next().unwrap_or(image);
        let message = format!(
            "failed to pull and unpack image \"{image}\": failed to resolve reference \
             \"{image}\": dial tcp: lookup {host}: no such host"
        );
        Some((c.name.clone(), message))
    })
}
