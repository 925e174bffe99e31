//! One e2e test's world: namespace, CRDs, agent RBAC, the controller, and either real
//! agent Pods (RALPH_E2E_IMAGE on a cluster with schedulable nodes) or the kubelet
//! stand-in running them on this machine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use ralph::api::{AttemptOutcome, Feature, FeaturePhase, FeatureStatus, Task};
use serde_json::{Value, json};

use crate::cluster::{self, DeleteOnDrop, Target};
use crate::controller_process::ControllerProcess;
use crate::fake_apiserver::{FakeApiServer, rbac};
use crate::kubelet_standin::{KubeletStandIn, NodeOptions};

/// Env var bounding each wait, in seconds (default 300).
const TIMEOUT_VAR: &str = "RALPH_E2E_TIMEOUT_SECS";

/// How long any one wait may take: `RALPH_E2E_TIMEOUT_SECS`, 300 s by default.
fn wait_limit() -> Duration {
    let seconds = std::env::var(TIMEOUT_VAR).ok().and_then(|s| s.parse().ok());
    Duration::from_secs(seconds.unwrap_or(300))
}

/// How agent Pods run.
pub enum PodRunner {
    /// Real Pods from this image (ralph binary plus the e2e scripts under /e2e).
    Cluster { image: String },
    /// The kubelet stand-in runs them as local processes.
    StandIn { node: String },
}

/// Everything one test needs; torn down in field order when dropped.
pub struct E2e {
    controller: ControllerProcess,
    _standin: Option<KubeletStandIn>,
    _node: Option<DeleteOnDrop>,
    _namespace: DeleteOnDrop,
    _fake: Option<FakeApiServer>,
    logs: Option<tempfile::TempDir>,
    /// Client of the cluster under test.
    pub client: Client,
    /// The test's namespace.
    pub namespace: String,
    /// How agent Pods run.
    pub runner: PodRunner,
    pods_seen: Arc<Mutex<Vec<(String, String)>>>,
}

/// The controller's ServiceAccount (the chart's `serviceAccount.name`).
const CONTROLLER_ACCOUNT: &str = "ralph-controller";
/// The agent Pods' ServiceAccount (the chart's `agentServiceAccount.name`).
const AGENT_ACCOUNT: &str = "ralph-agent";

/// Where a test's ServiceAccounts are made.
struct Accounts<'a> {
    client: &'a Client,
    namespace: &'a str,
    /// The suite's own (cluster-admin) kubeconfig.
    admin: &'a Path,
    /// Where the accounts' kubeconfigs are written.
    dir: &'a Path,
    /// The fake API server, when the test runs on it.
    fake: Option<&'a FakeApiServer>,
}

impl Accounts<'_> {
    /// Creates ServiceAccount `account` with a Role of `rules` and returns a kubeconfig
    /// acting as it, once the API server authorizes it. The fake's RBAC does not read
    /// Roles: it is given the same rules.
    async fn create(&self, account: &str, rules: Vec<rbac::Rule>) -> PathBuf {
        cluster::create_service_account(self.client, self.namespace, account, &rules).await;
        let user = rbac::service_account_user(self.namespace, account);
        if let Some(fake) = self.fake {
            fake.enforce_rbac(&user, rules);
        }
        let out = self.dir.join(format!("{account}-kubeconfig.yaml"));
        let kubeconfig = cluster::impersonating_kubeconfig(self.admin, &user, &out);
        cluster::wait_until_authorized(&kubeconfig, self.namespace).await;
        kubeconfig
    }
}

impl E2e {
    /// Sets up the world for `test` (panics naming the variables when there is no cluster).
    pub async fn setup(test: &str) -> Self {
        Self::setup_with(test, &[]).await
    }

    /// [`E2e::setup`] with extra arguments for `ralph controller` (e.g.
    /// `--native-sidecars false`).
    pub async fn setup_with(test: &str, controller_args: &[&str]) -> Self {
        let target = cluster::target(test);
        let logs = tempfile::Builder::new()
            .prefix(&format!("ralph-e2e-{test}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("temp dir: {e}"));
        let (kubeconfig, fake) = match target {
            Target::Kubeconfig(path) => (path, None),
            Target::Fake => {
                let server = FakeApiServer::start()
                    .await
                    .unwrap_or_else(|e| panic!("fake API server: {e}"));
                let path = logs.path().join("kubeconfig.yaml");
                std::fs::write(&path, server.kubeconfig_yaml("default"))
                    .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
                (path, Some(server))
            }
        };
        let client = cluster::client_from(&kubeconfig).await;
        cluster::install_crds(&client).await;
        let (namespace, namespace_guard) =
            cluster::create_namespace(&client, &kubeconfig, test).await;
        // The controller and the sidecars act as their ServiceAccounts, under the chart's
        // rules: on a cluster through its RBAC, on the fake through the same rules.
        let accounts = Accounts {
            client: &client,
            namespace: &namespace,
            admin: &kubeconfig,
            dir: logs.path(),
            fake: fake.as_ref(),
        };
        let as_controller = accounts
            .create(CONTROLLER_ACCOUNT, rbac::controller_rules())
            .await;
        let as_agent = accounts.create(AGENT_ACCOUNT, rbac::agent_rules()).await;
        let image = std::env::var(cluster::IMAGE_VAR)
            .ok()
            .filter(|i| !i.is_empty());
        let schedulable = cluster::has_schedulable_nodes(&client).await;
        let (runner, standin, node) = match image {
            Some(image) if schedulable => (PodRunner::Cluster { image }, None, None),
            _ => {
                let node_name = format!("{namespace}-standin");
                let node = cluster::create_standin_node(&client, &kubeconfig, &node_name).await;
                let mut options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
                    .namespace(&namespace)
                    .sidecar_kubeconfig(&as_agent)
                    .host_dir(scripts_dir());
                options.node_name = node_name.clone();
                let standin = KubeletStandIn::node(client.clone(), options)
                    .unwrap_or_else(|e| panic!("starting the kubelet stand-in: {e}"));
                (
                    PodRunner::StandIn { node: node_name },
                    Some(standin),
                    Some(node),
                )
            }
        };
        let ralph_image = match &runner {
            PodRunner::Cluster { image } => image.clone(),
            PodRunner::StandIn { .. } => "ralph-e2e:stand-in".to_owned(),
        };
        let extra: Vec<String> = controller_args.iter().map(|a| (*a).to_owned()).collect();
        let controller = ControllerProcess::start(
            &as_controller,
            &namespace,
            &ralph_image,
            logs.path(),
            &extra,
        );
        let pods_seen = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(record_pods(
            client.clone(),
            namespace.clone(),
            pods_seen.clone(),
        ));
        eprintln!(
            "e2e {test}: namespace {namespace}, agent pods on {}",
            match &runner {
                PodRunner::Cluster { .. } => "the cluster",
                PodRunner::StandIn { .. } => "the kubelet stand-in",
            }
        );
        Self {
            controller,
            _standin: standin,
            _node: node,
            _namespace: namespace_guard,
            _fake: fake,
            logs: Some(logs),
            client,
            namespace,
            runner,
            pods_seen,
        }
    }

    /// Restarts the API server: the fake goes away for a few seconds (every request fails,
    /// every watch is cut) and comes back with its state; a real cluster's is restarted by
    /// the command in RALPH_E2E_RESTART_APISERVER.
    pub async fn restart_api_server(&self) {
        if let Some(fake) = &self._fake {
            fake.start_outage();
            tokio::time::sleep(Duration::from_secs(3)).await;
            fake.end_outage();
            return;
        }
        let command = std::env::var(cluster::RESTART_VAR).unwrap_or_else(|_| {
            panic!(
                "{} must name a shell command that restarts the cluster's API server \
                 (e.g. `docker restart kind-control-plane`)",
                cluster::RESTART_VAR
            )
        });
        let status = tokio::process::Command::new("sh")
            .args(["-c", &command])
            .status()
            .await
            .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
        assert!(status.success(), "{command:?} failed: {status}");
    }

    /// Every phase the Feature's status shows from now on, as a watch sees them.
    pub fn record_phases(&self, name: &str) -> Arc<Mutex<Vec<FeaturePhase>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let features = self.features();
        let sink = Arc::clone(&seen);
        tokio::spawn(async move {
            // With backoff: a watch that keeps failing (the namespace going away at the end
            // of the test) must not spin a worker thread, which once held a test past its
            // limit.
            let events = watcher(features, config).default_backoff();
            let mut stream = std::pin::pin!(events.applied_objects());
            while let Some(next) = stream.next().await {
                if let Some(phase) = next.ok().and_then(|f| f.status).map(|s| s.phase) {
                    sink.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(phase);
                }
            }
        });
        seen
    }

    /// The first status the Feature `name` shows, as a watch opened before `apply` (which
    /// creates the Feature) sees it.
    pub async fn first_status(
        &self,
        name: &str,
        apply: impl std::future::Future<Output = ()>,
    ) -> FeatureStatus {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(self.features(), config).boxed();
        // The watch goes on from its first list's resourceVersion: every later change,
        // the Feature's creation first, reaches it.
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::InitDone)) => break,
                None => panic!("the watch of Feature {name} ended"),
                _ => {}
            }
        }
        apply.await;
        let first = async {
            loop {
                match events.next().await {
                    Some(Ok(watcher::Event::Apply(feature))) => {
                        if let Some(status) = feature.status {
                            return status;
                        }
                    }
                    None => panic!("the watch of Feature {name} ended"),
                    _ => {}
                }
            }
        };
        let limit = wait_limit();
        tokio::time::timeout(limit, first)
            .await
            .unwrap_or_else(|_| panic!("Feature {name} got no status within {limit:?}"))
    }

    /// Events in the namespace with this reason.
    pub async fn events_with_reason(&self, reason: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        events
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing Events: {e}"))
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Claim Leases in the namespace.
    pub async fn lease_names(&self) -> Vec<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        leases
            .list(&ListParams::default().labels("ralph.dev/feature"))
            .await
            .unwrap_or_else(|e| panic!("listing Leases: {e}"))
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect()
    }

    /// The `spec.agent` running the scripted agent with `script` (a file of tests/e2e/scripts).
    pub fn scripted_agent(&self, script: &str) -> Value {
        let (image, script_path) = match &self.runner {
            PodRunner::Cluster { image } => (image.clone(), format!("/e2e/{script}")),
            PodRunner::StandIn { .. } => (
                "ralph-e2e:stand-in".to_owned(),
                scripts_dir().join(script).display().to_string(),
            ),
        };
        json!({
            "image": image,
            "command": ["/ralph/bin/ralph", "agent", "script", script_path],
            "idleTimeoutSeconds": 900,
        })
    }

    /// Pod template overrides: under the stand-in, a node selector no real node matches,
    /// so only the stand-in binds the Pods.
    pub fn pod_template(&self) -> Value {
        match &self.runner {
            PodRunner::Cluster { .. } => json!({}),
            PodRunner::StandIn { node } => {
                json!({ "nodeSelector": { "ralph.dev/e2e-node": node } })
            }
        }
    }

    /// The Features API of the namespace.
    pub fn features(&self) -> Api<Feature> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Tasks API of the namespace.
    pub fn tasks(&self) -> Api<Task> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Pods API of the namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Server-side applies a Feature manifest (`spec` only; name given).
    pub async fn apply_feature(&self, name: &str, spec: Value) {
        let manifest = json!({
            "apiVersion": "ralph.dev/v1alpha1",
            "kind": "Feature",
            "metadata": { "name": name },
            "spec": spec,
        });
        let feature: Feature = serde_json::from_value(manifest)
            .unwrap_or_else(|e| panic!("Feature {name} manifest: {e}"));
        cluster::apply(&self.features(), &feature, "Feature").await;
    }

    /// Applies the Feature `name` run by the scripted agent playing `script`, its Pods on
    /// this test's node, with the rest of its `spec` (tasks, limits ...).
    pub async fn apply_scripted(&self, name: &str, script: &str, spec: Value) {
        let mut full = json!({
            "agent": self.scripted_agent(script),
            "podTemplate": self.pod_template(),
        });
        if let (Some(full), Value::Object(spec)) = (full.as_object_mut(), spec) {
            full.extend(spec);
        }
        self.apply_feature(name, full).await;
    }

    /// Applies the Feature `name` of one task, "design", run by `agent` (a scripted agent's
    /// spec, changed by the test), its Pods on this test's node.
    pub async fn apply_one_task_feature(&self, name: &str, agent: Value) {
        let spec = json!({
            "agent": agent,
            "podTemplate": self.pod_template(),
            "tasks": [{ "name": "design", "description": "Design it." }],
        });
        self.apply_feature(name, spec).await;
    }

    /// Waits (bounded) until the Feature has condition `type_` with `status`; returns it.
    pub async fn wait_for_condition(&mut self, name: &str, type_: &str, status: &str) -> Condition {
        let features = self.features();
        let what = format!("Feature {name} to be {type_}={status}");
        self.eventually(&what, || async {
            let feature = features.get_opt(name).await.ok().flatten()?;
            feature
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == type_ && c.status == status)
        })
        .await
    }

    /// Merge-patches a Feature's spec.
    pub async fn patch_feature_spec(&self, name: &str, spec: Value) {
        let patch = json!({ "spec": spec });
        self.features()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patching Feature {name}: {e}"));
    }

    /// Waits (bounded) until the Feature is in `phase`; returns it.
    pub async fn wait_for_phase(&mut self, name: &str, phase: FeaturePhase) -> Feature {
        let features = self.features();
        let what = format!("Feature {name} to reach phase {phase:?}");
        self.eventually(&what, || async {
            features
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|f| f.status.as_ref().is_some_and(|s| s.phase == phase))
        })
        .await
    }

    /// Polls `probe` every 500 ms until it yields a value, at most RALPH_E2E_TIMEOUT_SECS;
    /// on timeout panics with the controller's log. This bounds the wait; it does not
    /// measure speed.
    pub async fn eventually<T, F, Fut>(&mut self, what: &str, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let limit = wait_limit();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.controller.assert_running();
            // A probe whose request hangs ends at the deadline too.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Ok(Some(value)) = tokio::time::timeout(left, probe()).await {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                let pods: Vec<String> = self
                    .pods_seen()
                    .iter()
                    .map(|(name, state)| format!("{name}: {state}"))
                    .collect();
                let objects = self.objects_now().await;
                panic!(
                    "gave up waiting for {what} after {limit:?}\nagent pods seen:\n{}\n{objects}controller log:\n{}",
                    pods.join("\n"),
                    tail(&self.controller.log(), 200)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Agent Pods seen so far, in order of first appearance, with their last state (phase
    /// and how their containers ended).
    /// The namespace's Features and Tasks as they stand (phase, message, planning), for a
    /// failure report; what cannot be read is said.
    async fn objects_now(&self) -> String {
        let mut out = String::from("Features:\n");
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let features = self.features().list(&Default::default()).await?;
            let tasks = self.tasks().list(&Default::default()).await?;
            Ok::<_, kube::Error>((features.items, tasks.items))
        })
        .await;
        let (features, tasks) = match read {
            Ok(Ok(objects)) => objects,
            Ok(Err(error)) => return format!("cannot list the Features and Tasks: {error}\n"),
            Err(_) => return "cannot list the Features and Tasks: no answer in 10s\n".to_owned(),
        };
        for feature in features {
            let status = feature.status.unwrap_or_default();
            out.push_str(&format!(
                "{}: {:?} {:?} planning {}\n",
                feature.metadata.name.unwrap_or_default(),
                status.phase,
                status.message.unwrap_or_default(),
                serde_json::to_string(&status.planning).unwrap_or_default()
            ));
        }
        out.push_str("Tasks:\n");
        for task in tasks {
            let status = task.status.unwrap_or_default();
            out.push_str(&format!(
                "{} {:?}: {:?} {:?}\n",
                task.metadata.name.unwrap_or_default(),
                task.metadata
                    .labels
                    .unwrap_or_default()
                    .get("ralph.dev/plan"),
                status.phase,
                status.message.unwrap_or_default()
            ));
        }
        out
    }

    pub fn pods_seen(&self) -> Vec<(String, String)> {
        self.pods_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Names of the agent Pods seen so far, in order of first appearance.
    pub fn pod_names(&self) -> Vec<String> {
        self.pods_seen().into_iter().map(|(name, _)| name).collect()
    }

    /// Waits until none of `tasks` holds a live claim: each Task records no claim, and its
    /// Lease, when one is left, is free or spent (it names an attempt whose conclusion the
    /// Task records: a claim ends with its attempt and is left to expire, not released).
    pub async fn wait_for_claims_to_end(&mut self, tasks: &[&str]) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let task_api = self.tasks();
        let what = format!("claims of {tasks:?} to end");
        self.eventually(&what, || async {
            for name in tasks {
                let status = task_api.get(name).await.ok()?.status.unwrap_or_default();
                if status.claim.is_some() {
                    return None;
                }
                let lease = leases.get_opt(name).await.ok()?;
                let holder = lease
                    .and_then(|l| l.spec?.holder_identity)
                    .filter(|h| !h.is_empty());
                if let Some(holder) = holder
                    && !ralph::engine::lifecycle::is_spent(
                        name,
                        status.phase,
                        status.attempt_count,
                        &holder,
                    )
                {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "e2e failed in namespace {}; controller log tail:\n{}",
                self.namespace,
                tail(&self.controller.log(), 100)
            );
            if let Some(logs) = self.logs.take() {
                eprintln!("e2e logs kept in {}", logs.keep().display());
            }
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// tests/e2e/scripts.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts")
}

/// Records every agent Pod of the namespace (first appearance order, last state).
async fn record_pods(client: Client, namespace: String, seen: Arc<Mutex<Vec<(String, String)>>>) {
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let mut events = watcher(pods, watcher::Config::default().labels("ralph.dev/attempt"))
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        let state = pod_state(&pod);
        let mut seen = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match seen.iter_mut().find(|(name, _)| *name == pod.name_any()) {
            Some(entry) => entry.1 = state,
            None => seen.push((pod.name_any(), state)),
        }
    }
}

/// A Pod's phase and how each ended container ended (exit code, reason, message).
fn pod_state(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let ended: Vec<String> = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            Some(format!(
                "{} exit {} {} {}",
                c.name,
                t.exit_code,
                t.reason.clone().unwrap_or_default(),
                t.message.clone().unwrap_or_default()
            ))
        })
        .collect();
    format!("{} {}", status.phase.unwrap_or_default(), ended.join("; "))
}

/// The attempt records of a Task's status: number and outcome (unset while running).
pub fn attempts(task: &Task) -> Vec<(u32, Option<AttemptOutcome>)> {
    task.status
        .iter()
        .flat_map(|s| s.attempts.iter())
        .map(|a| (a.number, a.outcome))
        .collect()
}
