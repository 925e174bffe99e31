//! The watch loop: reacts to Pods (start, graceful stop, deletion) in either mode.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::container::{self, NodeLayout, PathMap, Prepared, prepare_container, prepare_volumes};
use super::manual;
use super::process;
use super::status::{self, Termination, agent_container, is_native_sidecar, runs_ralph};

/// How the stand-in treats Pods.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The test writes Pod status; the stand-in only confirms graceful deletions.
    Manual,
    /// The stand-in runs the agent container (and, with a kubeconfig, the sidecar).
    Node {
        /// Directories and the local `ralph` binary.
        layout: NodeLayout,
        /// Node name used in bindings.
        node_name: String,
        /// Kubeconfig given to sidecar containers; `None` leaves sidecars unrun.
        sidecar_kubeconfig: Option<PathBuf>,
        /// Extra environment for every process.
        extra_env: Vec<(String, String)>,
        /// The node's Pod limit (`maxPods`): a Pod beyond it waits unscheduled until one
        /// ends. Pods that have not ended (a plain sidecar still running) count.
        slots: Option<Arc<Semaphore>>,
    },
}

/// What the stand-in knows about one Pod it ran.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// The Pod's uid.
    pub uid: String,
    /// The Pod's directory (volumes, logs, termination logs).
    pub pod_dir: PathBuf,
    /// The agent container's mounts.
    pub paths: PathMap,
    /// The agent's log file.
    pub log: Option<PathBuf>,
    /// The agent's exit code once it ended.
    pub exit_code: Option<i32>,
    /// Why the Pod could not be run, if it could not.
    pub error: Option<String>,
    /// When the agent container's process ended.
    pub agent_ended_at: Option<Instant>,
    /// When the stand-in reported the Pod terminal (Succeeded or Failed).
    pub terminal_at: Option<Instant>,
}

/// State shared by the loop and the Pod tasks.
pub struct Shared {
    /// Runs by `namespace/name`.
    pub runs: Mutex<BTreeMap<String, RunInfo>>,
    controls: Mutex<BTreeMap<String, Arc<Control>>>,
    /// Whether the node is Ready: while not, Pods bound to it are not started (its kubelet
    /// is down or cut off), as on a node that went NotReady.
    pub ready: watch::Sender<bool>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            runs: Mutex::default(),
            controls: Mutex::default(),
            ready: watch::Sender::new(true),
        }
    }
}

impl Shared {
    /// Locks the runs table.
    pub fn runs(&self) -> MutexGuard<'_, BTreeMap<String, RunInfo>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn controls(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Control>>> {
        self.controls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Tells a running Pod's task to stop its containers.
struct Control {
    stop: CancellationToken,
    grace_seconds: AtomicI64,
}

/// The key of a Pod in the tables.
pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Watches Pods matching `selector` until `shutdown`.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    selector: String,
    mode: Mode,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut events = watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                on_pod(&client, &mode, &shared, &shutdown, pod);
            }
            Some(Ok(watcher::Event::Delete(pod))) => on_deleted(&shared, &pod),
            Some(Ok(_)) => {}
            Some(Err(error)) => tracing::warn!(%error, "kubelet stand-in: pod watch error"),
            None => return,
        }
    }
}

fn on_pod(
    client: &Client,
    mode: &Mode,
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
    pod: Pod,
) {
    let namespace = pod.namespace().unwrap_or_default();
    let key = pod_key(&namespace, &pod.name_any());
    let control = shared.controls().get(&key).cloned();
    let known_uid = shared.runs().get(&key).map(|r| r.uid.clone());
    let same_pod = known_uid.as_deref() == pod.metadata.uid.as_deref();
    if pod.metadata.deletion_timestamp.is_some() {
        match control.filter(|_| same_pod) {
            Some(control) => {
                let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(30);
                control.grace_seconds.store(grace, Ordering::SeqCst);
                control.stop.cancel();
            }
            None => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                tokio::spawn(confirm_deletion(pods, pod));
            }
        }
        return;
    }
    let Mode::Node { .. } = mode else {
        return;
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if (same_pod && known_uid.is_some()) || !matches!(phase, None | Some("Pending")) {
        return;
    }
    let control = Arc::new(Control {
        stop: CancellationToken::new(),
        grace_seconds: AtomicI64::new(30),
    });
    shared.controls().insert(key.clone(), control.clone());
    shared.runs().insert(
        key,
        RunInfo {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ..RunInfo::default()
        },
    );
    tokio::spawn(run_pod(
        client.clone(),
        mode.clone(),
        shared.clone(),
        control,
        shutdown.clone(),
        pod,
    ));
}

fn on_deleted(shared: &Shared, pod: &Pod) {
    let key = pod_key(&pod.namespace().unwrap_or_default(), &pod.name_any());
    if let Some(control) = shared.controls().remove(&key) {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(1);
        control.grace_seconds.store(grace, Ordering::SeqCst);
        control.stop.cancel();
    }
}

/// The kubelet's final word on a Pod being deleted gracefully: delete it with grace 0.
async fn confirm_deletion(pods: Api<Pod>, pod: Pod) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    if let Err(error) = pods.delete(&pod.name_any(), &params).await
        && !matches!(&error, kube::Error::Api(s) if s.code == 404 || s.code == 409)
    {
        tracing::warn!(%error, pod = %pod.name_any(), "kubelet stand-in: confirming deletion failed");
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn write_status(pods: &Api<Pod>, name: &str, status: serde_json::Value) {
    let patch = json!({ "status": status });
    if let Err(error) = pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        && !matches!(&error, kube::Error::Api(s) if s.code == 404)
    {
        tracing::warn!(%error, pod = name, "kubelet stand-in: status write failed");
    }
}

/// Runs one Pod: bind, write its volumes, start the agent (and sidecars), report Running,
/// wait for the agent (or a stop), report the termination, confirm a pending deletion.
async fn run_pod(
    client: Client,
    mode: Mode,
    shared: Arc<Shared>,
    control: Arc<Control>,
    shutdown: CancellationToken,
    pod: Pod,
) {
    let Mode::Node {
        layout,
        node_name,
        sidecar_kubeconfig,
        extra_env,
        slots,
    } = mode
    else {
        return;
    };
    if !node_selected(&client, &node_name, &control, &shutdown, &pod).await {
        return;
    }
    let Some(_slot) = node_slot(&client, slots, &control, &shutdown, &pod).await else {
        return;
    };
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let key = pod_key(&namespace, &name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let started_at = now();
    let fail = |message: String| {
        let pods = pods.clone();
        let pod = pod.clone();
        let shared = shared.clone();
        let key = key.clone();
        let started_at = started_at.clone();
        async move {
            tracing::warn!(pod = %key, %message, "kubelet stand-in: cannot run pod");
            if let Some(run) = shared.runs().get_mut(&key) {
                run.error = Some(message.clone());
            }
            let termination = Termination {
                exit_code: 128,
                reason: "StartError".into(),
                message: Some(message),
            };
            write_status(
                &pods,
                &pod.name_any(),
                status::terminated(&pod, &termination, &started_at, &now()),
            )
            .await;
        }
    };
    if let Err(error) = manual::bind(&pods, &name, &node_name).await {
        return fail(format!("binding to node {node_name:?}: {error}")).await;
    }
    // A node that is not Ready starts nothing: the Pod stays Pending, bound to it.
    let mut ready = shared.ready.subscribe();
    let started = tokio::select! {
        ready = ready.wait_for(|ready| *ready) => ready.is_ok(),
        () = control.stop.cancelled() => false,
        () = shutdown.cancelled() => return,
    };
    if !started {
        shared.controls().remove(&key);
        return confirm_deletion(pods, pod).await;
    }
    if let Some(message) = container::mount_onto_image_file(&layout, &pod) {
        return fail(message).await;
    }
    // An image no registry serves: the Pod stays Pending, its container waiting, as a
    // kubelet's failed pull leaves it (nothing runs; a deletion is confirmed at once).
    if let Some((container, message)) = status::unpullable_container(&pod) {
        let waiting = status::waiting(&pod, &container, "ErrImagePull", &message, &started_at);
        write_status(&pods, &name, waiting).await;
        shared.controls().remove(&key);
        return;
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let pod_dir = layout
        .root
        .join("pods")
        .join(&namespace)
        .join(format!("{name}-{}", uid.get(..8).unwrap_or(&uid)));
    if let Err(error) = std::fs::create_dir_all(&pod_dir) {
        return fail(format!("creating {}: {error}", pod_dir.display())).await;
    }
    let prepared = prepare_all(
        &client,
        &layout,
        &pod,
        &pod_dir,
        sidecar_kubeconfig.is_some(),
    )
    .await;
    let (agent, sidecars) = match prepared {
        Ok(prepared) => prepared,
        Err(message) => return fail(message).await,
    };
    let git_steps = match prepare_git_steps(&client, &layout, &pod, &pod_dir).await {
        Ok(steps) => steps,
        Err(message) => return fail(message).await,
    };
    if let Some(run) = shared.runs().get_mut(&key) {
        run.pod_dir = pod_dir.clone();
        run.paths = agent.paths.clone();
        run.log = Some(agent.log.clone());
    }
    let mut sidecar_env = extra_env.clone();
    if let Some(kubeconfig) = &sidecar_kubeconfig {
        sidecar_env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    }
    let mut sidecar_children = Vec::new();
    for (sidecar, native) in &sidecars {
        match process::spawn(sidecar, &sidecar_env) {
            Ok(child) => sidecar_children.push((sidecar.clone(), *native, child)),
            Err(error) => {
                return fail(format!("starting sidecar {:?}: {error}", sidecar.name)).await;
            }
        }
    }
    for init in &git_steps.init {
        let exit = match process::spawn(init, &extra_env) {
            Ok(mut child) => child.wait().await.map(process::exit_code),
            Err(error) => Err(error),
        };
        let exit_code = match exit {
            Ok(code) => code,
            Err(error) => return fail(format!("running {:?}: {error}", init.name)).await,
        };
        if exit_code != 0 {
            sidecar_children
                .iter()
                .for_each(|(_, _, c)| process::kill_group(c));
            let message = process::termination_message(init, exit_code);
            let termination = Termination::error(exit_code, message);
            write_status(
                &pods,
                &name,
                status::init_failed(&pod, &init.name, &termination, &started_at, &now()),
            )
            .await;
            shared.controls().remove(&key);
            return;
        }
    }
    let mut finishers = Vec::new();
    for finisher in &git_steps.main {
        match process::spawn(finisher, &extra_env) {
            Ok(child) => finishers.push((finisher, child)),
            Err(error) => {
                return fail(format!("starting {:?}: {error}", finisher.name)).await;
            }
        }
    }
    let mut child = match process::spawn(&agent, &extra_env) {
        Ok(child) => child,
        Err(error) => return fail(format!("starting {:?}: {error}", agent.argv.join(" "))).await,
    };
    write_status(&pods, &name, status::running(&pod, &started_at)).await;

    let exit = tokio::select! {
        exit = child.wait() => exit,
        () = control.stop.cancelled() => {
            let grace = control.grace_seconds.load(Ordering::SeqCst).max(0);
            process::stop(&mut child, Duration::from_secs(grace.unsigned_abs())).await
        }
        () = shutdown.cancelled() => {
            process::kill_group(&child);
            sidecar_children.iter().for_each(|(_, _, c)| process::kill_group(c));
            return;
        }
    };
    let agent_ended_at = Instant::now();
    let mut others = Vec::new();
    for (finisher, mut finisher_child) in finishers {
        let exit = if control.stop.is_cancelled() {
            process::stop(&mut finisher_child, Duration::from_secs(1)).await
        } else {
            finisher_child.wait().await
        };
        let code = exit.map(process::exit_code).unwrap_or(137);
        let message = process::termination_message(finisher, code);
        let termination = Termination::from_exit(code, message);
        others.push((finisher.name.clone(), termination));
    }
    let exit_code = match exit {
        Ok(status) => process::exit_code(status),
        Err(error) => return fail(format!("waiting for the agent: {error}")).await,
    };
    if let Some(run) = shared.runs().get_mut(&key) {
        run.exit_code = Some(exit_code);
        run.agent_ended_at = Some(agent_ended_at);
    }
    let message = process::termination_message(&agent, exit_code);
    let termination = Termination::from_exit(exit_code, message);
    let ended = Ended {
        pods: &pods,
        pod: &pod,
        agent: &termination,
        started_at: &started_at,
    };
    let stopped = end_sidecars(
        &ended,
        &mut sidecar_children,
        &mut others,
        &control,
        &shutdown,
    )
    .await;
    if stopped == SidecarsEnded::Shutdown {
        return;
    }
    write_status(
        &pods,
        &name,
        status::terminated_with(&pod, &termination, &others, &started_at, &now()),
    )
    .await;
    if let Some(run) = shared.runs().get_mut(&key) {
        run.terminal_at = Some(Instant::now());
    }
    shared.controls().remove(&key);
    if control.stop.is_cancelled() {
        confirm_deletion(pods, pod).await;
    }
}

/// Waits until the stand-in's Node object (when one is registered in the API) carries every
/// label of the Pod's `nodeSelector`, showing the Pod unschedulable meanwhile, as the
/// scheduler leaves a Pod no node matches. False when the Pod is deleted or the stand-in
/// stops first.
async fn node_selected(
    client: &Client,
    node_name: &str,
    control: &Control,
    shutdown: &CancellationToken,
    pod: &Pod,
) -> bool {
    let selector = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    if selector.is_empty() {
        return true;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let mut shown = false;
    loop {
        let labels = match nodes.get_opt(node_name).await {
            Ok(Some(node)) => node.metadata.labels.unwrap_or_default(),
            // No Node registered for the stand-in: it takes every Pod.
            _ => return true,
        };
        if selector
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
        {
            return true;
        }
        if !shown {
            let message = "0/1 nodes are available: 1 node(s) didn't match Pod's node \
                           affinity/selector. preemption: 0/1 nodes are available: 1 \
                           Preemption is not helpful for scheduling.";
            write_status(
                &pods,
                &pod.name_any(),
                status::unschedulable(message, &now()),
            )
            .await;
            shown = true;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = control.stop.cancelled() => {
                confirm_deletion(pods, pod.clone()).await;
                return false;
            }
            () = shutdown.cancelled() => return false,
        }
    }
}

/// Waits for room on the node when it has a Pod limit, showing the Pod unschedulable
/// meanwhile (the scheduler binds no Pod to a full node). `None` when the Pod is deleted
/// or the stand-in stops first.
async fn node_slot(
    client: &Client,
    slots: Option<Arc<Semaphore>>,
    control: &Control,
    shutdown: &CancellationToken,
    pod: &Pod,
) -> Option<Option<OwnedSemaphorePermit>> {
    let Some(slots) = slots else {
        return Some(None);
    };
    if let Ok(permit) = slots.clone().try_acquire_owned() {
        return Some(Some(permit));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let message = "0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are \
                   available: 1 No preemption victims found for incoming pod.";
    write_status(
        &pods,
        &pod.name_any(),
        status::unschedulable(message, &now()),
    )
    .await;
    tokio::select! {
        permit = slots.acquire_owned() => permit.ok().map(Some),
        () = control.stop.cancelled() => {
            confirm_deletion(pods, pod.clone()).await;
            None
        }
        () = shutdown.cancelled() => None,
    }
}

/// A Pod whose agent container ended, for the status written while sidecars end.
struct Ended<'a> {
    pods: &'a Api<Pod>,
    pod: &'a Pod,
    agent: &'a Termination,
    started_at: &'a str,
}

#[derive(Debug, PartialEq, Eq)]
enum SidecarsEnded {
    /// Every sidecar ended (by itself, or stopped).
    Ended,
    /// The stand-in is stopping: nothing more is reported.
    Shutdown,
}

/// Ends the sidecars once the agent (and the git steps) ended, as a kubelet does: a native
/// sidecar (an init container with `restartPolicy: Always`) gets SIGTERM; a plain sidecar is
/// a main container like any other, so the Pod stays Running, shown so, until it exits by
/// itself (its end goes into `others`). A deletion stops them all.
async fn end_sidecars(
    ended: &Ended<'_>,
    sidecars: &mut [(Prepared, bool, tokio::process::Child)],
    others: &mut Vec<(String, Termination)>,
    control: &Control,
    shutdown: &CancellationToken,
) -> SidecarsEnded {
    let plain_running = sidecars.iter().any(|(_, native, _)| !native);
    if plain_running && !control.stop.is_cancelled() {
        let status = status::agent_ended(ended.pod, ended.agent, others, ended.started_at, &now());
        write_status(ended.pods, &ended.pod.name_any(), status).await;
    }
    for (prepared, native, child) in sidecars.iter_mut() {
        let exit = if *native || control.stop.is_cancelled() {
            process::stop(child, Duration::from_secs(2)).await
        } else {
            tokio::select! {
                exit = child.wait() => exit,
                () = control.stop.cancelled() => process::stop(child, Duration::from_secs(2)).await,
                () = shutdown.cancelled() => {
                    process::kill_group(child);
                    return SidecarsEnded::Shutdown;
                }
            }
        };
        if !*native {
            let code = exit.map(process::exit_code).unwrap_or(137);
            others.push((prepared.name.clone(), Termination::from_exit(code, None)));
        }
    }
    SidecarsEnded::Ended
}

/// The git steps of an agent Pod (`ralph git ...`): init containers run before the agent,
/// regular containers beside it.
#[derive(Default)]
struct GitSteps {
    init: Vec<Prepared>,
    main: Vec<Prepared>,
}

async fn prepare_git_steps(
    client: &Client,
    layout: &NodeLayout,
    pod: &Pod,
    pod_dir: &std::path::Path,
) -> Result<GitSteps, String> {
    let mut steps = GitSteps::default();
    let Some(spec) = &pod.spec else {
        return Ok(steps);
    };
    let volumes = prepare_volumes(client, layout, pod, pod_dir)
        .await
        .map_err(|e| e.to_string())?;
    for (init, container) in spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (true, c))
        .chain(spec.containers.iter().map(|c| (false, c)))
        .filter(|(_, c)| runs_ralph(c, "git"))
    {
        let prepared = prepare_container(client, layout, pod, container, &volumes, pod_dir)
            .await
            .map_err(|e| e.to_string())?;
        if init {
            steps.init.push(prepared);
        } else {
            steps.main.push(prepared);
        }
    }
    Ok(steps)
}

/// Prepares the agent container and, when sidecars run, the other containers and native
/// sidecar init containers.
async fn prepare_all(
    client: &Client,
    layout: &NodeLayout,
    pod: &Pod,
    pod_dir: &std::path::Path,
    with_sidecars: bool,
) -> Result<(Prepared, Vec<(Prepared, bool)>), String> {
    let volumes = prepare_volumes(client, layout, pod, pod_dir)
        .await
        .map_err(|e| e.to_string())?;
    let agent = agent_container(pod).ok_or("the Pod has no containers")?;
    let prepared_agent = prepare_container(client, layout, pod, agent, &volumes, pod_dir)
        .await
        .map_err(|e| e.to_string())?;
    let mut sidecars = Vec::new();
    if with_sidecars && let Some(spec) = &pod.spec {
        let candidates = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_native_sidecar(c))
            .chain(spec.containers.iter().filter(|c| c.name != agent.name))
            .filter(|c| runs_ralph(c, "sidecar"));
        for container in candidates {
            let prepared = prepare_container(client, layout, pod, container, &volumes, pod_dir)
                .await
                .map_err(|e| e.to_string())?;
            sidecars.push((prepared, is_native_sidecar(container)));
        }
    }
    Ok((prepared_agent, sidecars))
}
