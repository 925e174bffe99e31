//! A kubelet stand-in for tests and for control-plane-only clusters (envtest): watches Pods
//! labelled `ralph.dev/attempt` through the kube client.
//!
//! Mode A ([`KubeletStandIn::manual`] plus the functions in [`manual`]): the test binds Pods
//! and writes their status (Running, then Succeeded/Failed with a termination message, or
//! OOMKilled/Evicted, or Pending with a container the kubelet cannot start); the stand-in only confirms graceful deletions, as a kubelet does.
//! Mode B ([`KubeletStandIn::node`]): the stand-in is the node. It binds each Pod, writes
//! its ConfigMap/Secret volumes to a temp directory, runs the agent container's command
//! (`/ralph/bin/ralph runner ...` rewritten to the local `ralph` binary and to the temp
//! paths) as a local process, reports Running, and on exit reports the agent container
//! terminated with the termination-log file's content as its message. A graceful deletion
//! sends SIGTERM, waits the grace period, then kills, reports, and confirms the deletion.
//! A container whose image is under the `.invalid` domain (e.g. `registry.invalid/x`) is
//! never pulled: the Pod stays Pending with that container waiting in `ErrImagePull`.
//! A container without `command` is taken to run the ralph image's entrypoint (the local
//! binary). As a real node does: a plain (non-native) sidecar keeps its Pod Running until it
//! exits by itself; Pods beyond the node's Pod limit wait unschedulable; a NotReady node
//! starts nothing; a volume mounted onto a path that is a file in the image fails the
//! container (`StartError`); emptyDirs do not belong to the agent's user. With a kubeconfig, `ralph sidecar` containers (plain or native) run too, with
//! `KUBECONFIG` set, and get SIGTERM once the agent has ended; other init containers (the
//! binary install) are not run: the binary is mapped instead.
//!
//! Include with `#[path = "support/kubelet_standin.rs"] mod kubelet_standin;`.

#[path = "kubelet_standin/container.rs"]
mod container;
#[path = "kubelet_standin/manual.rs"]
pub mod manual;
#[path = "kubelet_standin/node.rs"]
mod node;
#[path = "kubelet_standin/process.rs"]
mod process;
#[path = "kubelet_standin/status.rs"]
pub mod status;

use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use tokio_util::sync::CancellationToken;

use container::NodeLayout;
use node::{Mode, Shared, pod_key};

#[allow(unused_imports)]
pub use node::RunInfo;
#[allow(unused_imports)]
pub use status::Termination;

/// The label every agent Pod carries.
pub const ATTEMPT_LABEL: &str = "ralph.dev/attempt";

/// Options of the node stand-in (mode B).
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The local `ralph` binary (in tests: `env!("CARGO_BIN_EXE_ralph")`).
    pub ralph_binary: PathBuf,
    /// Path of the `ralph` binary inside the Pod.
    pub in_pod_ralph: String,
    /// Node name used in bindings.
    pub node_name: String,
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    /// Pods to act on.
    pub label_selector: String,
    /// Kubeconfig for sidecar containers (`ralph sidecar`); `None`: sidecars are not run.
    pub sidecar_kubeconfig: Option<PathBuf>,
    /// Extra environment for every process.
    pub extra_env: Vec<(String, String)>,
    /// Host directories Pods may name directly (e.g. test fixtures in the agent command):
    /// paths under them are never rewritten onto the Pod's volumes.
    pub host_dirs: Vec<PathBuf>,
    /// The node's Pod limit (`maxPods`); `None`: no limit.
    pub max_pods: Option<usize>,
    /// Files in images, as `(image, path)`: mounting a volume onto one fails the container.
    pub image_files: Vec<(String, String)>,
}

impl NodeOptions {
    /// Defaults: `/ralph/bin/ralph` mapped to `ralph_binary`, node `standin`, every
    /// namespace, Pods with the `ralph.dev/attempt` label, sidecars not run.
    pub fn new(ralph_binary: impl Into<PathBuf>) -> Self {
        Self {
            ralph_binary: ralph_binary.into(),
            in_pod_ralph: "/ralph/bin/ralph".into(),
            node_name: "standin".into(),
            namespace: None,
            label_selector: ATTEMPT_LABEL.into(),
            sidecar_kubeconfig: None,
            extra_env: Vec::new(),
            host_dirs: Vec::new(),
            max_pods: None,
            image_files: Vec::new(),
        }
    }

    /// Runs at most `max_pods` Pods at once; the others wait unscheduled.
    pub fn max_pods(mut self, max_pods: usize) -> Self {
        self.max_pods = Some(max_pods);
        self
    }

    /// `path` is a file in `image`: a container of it cannot mount a volume there.
    pub fn image_file(mut self, image: &str, path: &str) -> Self {
        self.image_files.push((image.to_owned(), path.to_owned()));
        self
    }

    /// Lets Pods name paths under `dir` on this machine (not rewritten onto volumes).
    pub fn host_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.host_dirs.push(dir.into());
        self
    }

    /// Only Pods in `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Also runs `ralph sidecar` containers, with this kubeconfig.
    pub fn sidecar_kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.sidecar_kubeconfig = Some(path.into());
        self
    }
}

/// A running stand-in; dropping it stops watching and kills the processes it started.
pub struct KubeletStandIn {
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    /// The node's root directory (mode B), removed when the stand-in is dropped.
    _root: Option<tempfile::TempDir>,
}

impl Drop for KubeletStandIn {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl KubeletStandIn {
    /// Mode A: the test writes Pod status; the stand-in confirms graceful deletions of
    /// Pods labelled `ralph.dev/attempt` in `namespace` (or all namespaces).
    pub fn manual(client: Client, namespace: Option<&str>) -> Self {
        Self::spawn(
            client,
            namespace.map(str::to_owned),
            ATTEMPT_LABEL.into(),
            Mode::Manual,
            None,
        )
    }

    /// Mode B: the stand-in runs the Pods' agent containers as local processes.
    pub fn node(client: Client, options: NodeOptions) -> std::io::Result<Self> {
        let root = tempfile::Builder::new()
            .prefix("kubelet-standin-")
            .tempdir()?;
        let mode = Mode::Node {
            layout: NodeLayout {
                root: root.path().to_path_buf(),
                ralph_binary: options.ralph_binary,
                in_pod_ralph: options.in_pod_ralph,
                host_dirs: options.host_dirs,
                image_files: options.image_files,
            },
            node_name: options.node_name,
            sidecar_kubeconfig: options.sidecar_kubeconfig,
            extra_env: options.extra_env,
            slots: options
                .max_pods
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
        };
        Ok(Self::spawn(
            client,
            options.namespace,
            options.label_selector,
            mode,
            Some(root),
        ))
    }

    fn spawn(
        client: Client,
        namespace: Option<String>,
        selector: String,
        mode: Mode,
        root: Option<tempfile::TempDir>,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let shutdown = CancellationToken::new();
        tokio::spawn(node::run(
            client,
            namespace,
            selector,
            mode,
            shared.clone(),
            shutdown.clone(),
        ));
        Self {
            shared,
            shutdown,
            _root: root,
        }
    }

    /// Marks the node Ready or NotReady (mode B): while NotReady, Pods bound to it are not
    /// started (they stay Pending), as when its kubelet is down; they start once it is Ready.
    pub fn set_ready(&self, ready: bool) {
        self.shared.ready.send_replace(ready);
    }

    /// What the stand-in knows about the Pod it ran under this name (mode B).
    pub fn run_info(&self, namespace: &str, pod: &str) -> Option<RunInfo> {
        self.shared.runs().get(&pod_key(namespace, pod)).cloned()
    }

    /// The agent container's output so far.
    pub fn log(&self, namespace: &str, pod: &str) -> Option<String> {
        let path = self.run_info(namespace, pod)?.log?;
        std::fs::read_to_string(path).ok()
    }
}
