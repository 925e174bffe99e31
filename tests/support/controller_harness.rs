//! Runs the real controller against the fake API server, and stands in for the kubelet by
//! writing agent Pod statuses (the runner's result as the agent container's termination
//! message). Include with `#[path = "support/controller_harness.rs"] mod harness;` after
//! the fake API server module.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::{WatchStreamExt, watcher};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use ralph::api::{Feature, Task, TaskStatus};
use ralph::controller::{ControllerConfig, NativeSidecars};
use tokio_util::sync::CancellationToken;

use super::fake_apiserver::FakeApiServer;
#[allow(unused_imports)]
pub use super::fake_apiserver::assert_mentions;

/// Namespace every test works in.
pub const NS: &str = "team";
/// Upper bound for anything a test waits for (a hang fails instead of blocking forever).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A fake API server with the controller running against it.
pub struct Harness {
    /// The fake API server.
    pub server: FakeApiServer,
    /// A client in [`NS`].
    pub client: Client,
    max_concurrent_attempts: usize,
    finished_pod_ttl: Duration,
    stop: CancellationToken,
    controller: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// Starts the server and the controller (one namespace, no leader election).
    pub async fn start() -> Harness {
        Self::start_with(100).await
    }

    /// Starts the server and the controller with the Feature `name` of `tasks` and `extra`
    /// spec fields ([`feature_manifest`]) created.
    pub async fn with_feature(
        name: &str,
        tasks: serde_json::Value,
        extra: serde_json::Value,
    ) -> Harness {
        let harness = Self::start().await;
        harness.create(name, tasks, extra).await;
        harness
    }

    /// Same, with a controller-wide attempt limit.
    pub async fn start_with(max_concurrent_attempts: usize) -> Harness {
        let server = FakeApiServer::start().await.expect("fake API server");
        Self::start_on(server, max_concurrent_attempts)
    }

    /// Starts the server and the controller with finished Pods kept for `ttl`.
    pub async fn start_with_pod_ttl(ttl: Duration) -> Harness {
        let server = FakeApiServer::start().await.expect("fake API server");
        Self::start_on_keeping_pods(server, 100, ttl)
    }

    /// Starts the server, lets `faults` prepare it (lagging watches, failing requests), then
    /// starts the controller.
    pub async fn start_after(faults: impl FnOnce(&FakeApiServer)) -> Harness {
        let server = FakeApiServer::start().await.expect("fake API server");
        faults(&server);
        Self::start_on(server, 100)
    }

    /// Starts the server with `resource` watches delivering every event `delay` late, then the
    /// controller.
    pub async fn start_lagging(resource: &str, delay: Duration) -> Harness {
        Self::start_after(|server| server.lag_watches(resource, delay)).await
    }

    /// Starts the controller with the Feature and Task watches `delay` behind.
    pub async fn start_with_features_and_tasks_lagging(delay: Duration) -> Harness {
        Self::start_after(|server| {
            server.lag_watches("features", delay);
            server.lag_watches("tasks", delay);
        })
        .await
    }

    /// Starts the controller against `server` (faults may be injected before it starts).
    pub fn start_on(server: FakeApiServer, max_concurrent_attempts: usize) -> Harness {
        Self::start_on_keeping_pods(server, max_concurrent_attempts, Duration::from_secs(3600))
    }

    fn start_on_keeping_pods(
        server: FakeApiServer,
        max_concurrent_attempts: usize,
        finished_pod_ttl: Duration,
    ) -> Harness {
        let client = server.client_in(NS);
        server.enforce_rbac(
            super::fake_apiserver::rbac::CONTROLLER_USER,
            super::fake_apiserver::rbac::controller_rules(),
        );
        let (stop, controller) = spawn_controller(
            &server,
            client.clone(),
            max_concurrent_attempts,
            finished_pod_ttl,
        );
        Harness {
            server,
            client,
            max_concurrent_attempts,
            finished_pod_ttl,
            stop,
            controller,
        }
    }

    /// Stops the controller and starts a new one against the same server (a restart).
    pub async fn restart_controller(&mut self) {
        self.stop.cancel();
        let old = std::mem::replace(&mut self.controller, tokio::spawn(async {}));
        let _ = tokio::time::timeout(PATIENCE, old).await;
        let (stop, controller) = spawn_controller(
            &self.server,
            self.client.clone(),
            self.max_concurrent_attempts,
            self.finished_pod_ttl,
        );
        self.stop = stop;
        self.controller = controller;
    }

    /// Stops the controller and waits for it.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(PATIENCE, self.controller).await;
    }

    /// Events in [`NS`] with this reason.
    pub async fn events_with_reason(&self, reason: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), NS);
        events
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Every phase the Feature's status shows from now on, as a watch sees them.
    pub fn record_feature_phases(&self, name: &str) -> Arc<Mutex<Vec<String>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let features = self.features();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let sink = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(features, config).applied_objects());
            while let Some(Ok(feature)) = stream.next().await {
                if let Some(phase) = feature
                    .status
                    .and_then(|s| serde_json::to_value(s.phase).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
                {
                    sink.lock().expect("phases").push(phase);
                }
            }
        });
        seen
    }

    /// The condition `type_` of the Feature's status, once it has that status and reason.
    pub async fn wait_for_feature_condition(
        &self,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> Condition {
        self.wait_for_condition(&self.features(), name, type_, reason)
            .await
    }

    /// The condition `type_` of the Task's status, once it has that reason.
    pub async fn wait_for_task_condition(
        &self,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> Condition {
        self.wait_for_condition(&self.tasks(), name, type_, reason)
            .await
    }

    /// The condition of `name`'s status with this type and reason, once it has it.
    async fn wait_for_condition<K: WithConditions>(
        &self,
        api: &Api<K>,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> Condition {
        let what = format!("{} {name} condition {type_} {reason}", K::KIND);
        self.eventually(&what, || async {
            let conditions = api.get(name).await.ok()?.conditions()?;
            condition_with(conditions, type_, reason)
        })
        .await
    }

    /// Creates the Feature `name` of one task `a` (defaults otherwise) and waits for the Pod
    /// of its first attempt.
    pub async fn start_one_task_feature(&self, name: &str) -> Pod {
        self.create(name, one_task(), serde_json::json!({})).await;
        self.wait_for_pod(&format!("{name}-a-a1")).await
    }

    /// Starts the one-task Feature `name`; its first attempt's agent is OOM-killed. The Pod of
    /// the retry.
    pub async fn crash_first_attempt(&self, name: &str) -> Pod {
        self.start_one_task_feature(name).await;
        self.terminate_agent(&format!("{name}-a-a1"), 137, "OOMKilled", None)
            .await;
        self.wait_for_pod(&format!("{name}-a-a2")).await
    }

    /// Creates the Feature `name` of `tasks` with `extra` spec fields ([`feature_manifest`]).
    pub async fn create(
        &self,
        name: &str,
        tasks: serde_json::Value,
        extra: serde_json::Value,
    ) -> Feature {
        self.create_feature(feature_manifest(name, tasks, extra))
            .await
    }

    /// Creates a standalone Task `name` (one no Feature template made) with `spec`.
    pub async fn create_task(&self, name: &str, spec: serde_json::Value) -> Task {
        let task: Task = serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec
        }))
        .expect("task manifest");
        self.tasks()
            .create(&PostParams::default(), &task)
            .await
            .expect("create task")
    }

    /// Merges `spec` into the Feature's spec (a new generation).
    pub async fn patch_feature_spec(&self, name: &str, spec: serde_json::Value) {
        let patch = serde_json::json!({ "spec": spec });
        self.features()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|error| panic!("patch the spec of Feature {name}: {error}"));
    }

    /// Ages the claim Lease of the Task: its holder stopped renewing long ago (node lost).
    pub async fn expire_claim(&self, task: &str) {
        let stale = serde_json::json!({"spec": {"renewTime": "2020-01-01T00:00:00.000000Z"}});
        self.leases()
            .patch(task, &PatchParams::default(), &Patch::Merge(&stale))
            .await
            .unwrap_or_else(|error| panic!("age the claim of {task}: {error}"));
    }

    /// The Task's status now.
    pub async fn task_status(&self, name: &str) -> TaskStatus {
        let task = self.tasks().get(name).await.expect("task");
        task.status
            .unwrap_or_else(|| panic!("Task {name} has no status"))
    }

    /// Whether a Pod of that name exists now.
    pub async fn has_pod(&self, name: &str) -> bool {
        self.pods().get_opt(name).await.expect("get pod").is_some()
    }

    /// Creates a Feature from its JSON manifest.
    pub async fn create_feature(&self, manifest: serde_json::Value) -> Feature {
        let feature: Feature = serde_json::from_value(manifest).expect("feature manifest");
        self.features()
            .create(&PostParams::default(), &feature)
            .await
            .expect("create feature")
    }

    /// Features in [`NS`].
    pub fn features(&self) -> Api<Feature> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Tasks in [`NS`].
    pub fn tasks(&self) -> Api<Task> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Pods in [`NS`].
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// ConfigMaps in [`NS`].
    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// The ConfigMap `name` in [`NS`], which must exist.
    pub async fn config_map(&self, name: &str) -> ConfigMap {
        self.config_maps()
            .get(name)
            .await
            .unwrap_or_else(|error| panic!("ConfigMap {name}: {error}"))
    }

    /// Leases in [`NS`].
    pub fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Agent Pods that exist now, by name.
    pub async fn agent_pods(&self) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels("ralph.dev/attempt"))
            .await
            .expect("list pods")
            .items
    }

    /// Waits until `check` returns `Some`, polling; panics after [`PATIENCE`] naming `what`.
    pub async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        poll_until(what, check, || {}).await
    }

    /// Waits for the Feature's status phase to be `phase` (as printed, e.g. "Complete").
    pub async fn wait_for_feature_phase(&self, name: &str, phase: &str) -> Feature {
        self.eventually(&format!("feature {name} to be {phase}"), || async {
            let feature = self.features().get(name).await.ok()?;
            let current = serde_json::to_value(feature.status.as_ref()?.phase).ok()?;
            (current == phase).then_some(feature)
        })
        .await
    }

    /// Waits for a Pod of that name to exist.
    pub async fn wait_for_pod(&self, name: &str) -> Pod {
        self.eventually(&format!("Pod {name}"), || async {
            self.pods().get_opt(name).await.ok().flatten()
        })
        .await
    }

    /// Waits for the Pod to be gone.
    pub async fn wait_for_pod_gone(&self, name: &str) {
        self.eventually(&format!("Pod {name} to be deleted"), || async {
            match self.pods().get_opt(name).await {
                Ok(None) => Some(()),
                _ => None,
            }
        })
        .await
    }

    /// Kubelet stand-in: the Pod is running.
    pub async fn set_running(&self, pod: &str) {
        let status = serde_json::json!({"status": {"phase": "Running"}});
        self.patch_pod_status(pod, status).await;
    }

    /// Kubelet stand-in: the agent container ended with `exit_code`, `reason` and the
    /// termination `message` (the runner's result), and the Pod with it.
    pub async fn terminate_agent(
        &self,
        pod: &str,
        exit_code: i32,
        reason: &str,
        message: Option<String>,
    ) {
        let phase = if exit_code == 0 {
            "Succeeded"
        } else {
            "Failed"
        };
        let status = serde_json::json!({"status": {
            "phase": phase,
            "containerStatuses": [{
                "name": "agent",
                "image": "agent:test",
                "imageID": "",
                "ready": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "message": message,
                }}
            }]
        }});
        self.patch_pod_status(pod, status).await;
    }

    /// Kubelet stand-in: the runner reported `sigils` for its task with stop reason end_turn.
    pub async fn finish_attempt(&self, pod: &Pod, sigils: serde_json::Value) {
        let fields = serde_json::json!({
            "sigils": sigils,
            "usage": {"inputTokens": 100, "outputTokens": 20},
        });
        self.finish_with_result(pod, fields).await;
    }

    /// Kubelet stand-in: the runner finished its turn (end_turn, exit 0) and reported a
    /// result with these `fields` (sigils, usage, check ...).
    pub async fn finish_with_result(&self, pod: &Pod, fields: serde_json::Value) {
        let name = pod.name_any();
        let task_id = runner_arg(pod, "--task").expect("runner --task");
        let mut result = serde_json::json!({
            "version": 1,
            "task": task_id,
            "attempt": name,
            "outcome": "finished",
            "stopReason": "end_turn",
            "exitCode": 0,
            "timings": {"startedAtMs": 0, "endedAtMs": jiff::Timestamp::now().as_millisecond()}
        });
        if let (Some(result), Some(fields)) = (result.as_object_mut(), fields.as_object()) {
            result.extend(fields.clone());
        }
        self.terminate_agent(&name, 0, "Completed", Some(result.to_string()))
            .await;
    }

    /// Kubelet stand-in: the runner reported its task done; waits for `feature` to complete.
    pub async fn finish_done_to_complete(&self, pod: &Pod, feature: &str) -> Feature {
        self.finish_done(pod).await;
        self.wait_for_feature_phase(feature, "Complete").await
    }

    /// Kubelet stand-in: the runner reported its task done.
    pub async fn finish_done(&self, pod: &Pod) {
        let task_id = runner_arg(pod, "--task").expect("runner --task");
        self.finish_attempt(pod, serde_json::json!({"taskDone": task_id}))
            .await;
    }

    async fn patch_pod_status(&self, pod: &str, status: serde_json::Value) {
        self.pods()
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|error| panic!("patch status of Pod {pod}: {error}"));
    }
}

/// The condition of type `type_` among `conditions`, if it has `reason`.
/// An object whose status holds conditions.
trait WithConditions:
    kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync
{
    /// How errors name its kind.
    const KIND: &'static str;

    /// Its status's conditions, once it has a status.
    fn conditions(self) -> Option<Vec<Condition>>;
}

impl WithConditions for Feature {
    const KIND: &'static str = "feature";

    fn conditions(self) -> Option<Vec<Condition>> {
        Some(self.status?.conditions)
    }
}

impl WithConditions for Task {
    const KIND: &'static str = "task";

    fn conditions(self) -> Option<Vec<Condition>> {
        Some(self.status?.conditions)
    }
}

fn condition_with(conditions: Vec<Condition>, type_: &str, reason: &str) -> Option<Condition> {
    conditions
        .into_iter()
        .find(|c| c.type_ == type_ && c.reason == reason)
}

/// Polls `check` until it returns `Some`, calling `still_healthy` (which may panic with what
/// went wrong) before each wait; panics after [`PATIENCE`] naming `what`.
pub async fn poll_until<T, Fut>(
    what: &str,
    mut check: impl FnMut() -> Fut,
    mut still_healthy: impl FnMut(),
) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        still_healthy();
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The tasks of a Feature of one task, `a`.
pub fn one_task() -> serde_json::Value {
    serde_json::json!([{"name": "a"}])
}

/// The tasks of a Feature of two tasks: `a`, then `b` after it.
pub fn a_then_b() -> serde_json::Value {
    serde_json::json!([{"name": "a"}, {"name": "b", "dependsOn": ["a"]}])
}

/// The prompt an agent Pod carries (empty when it has none).
pub fn prompt_of(pod: &Pod) -> String {
    pod.annotations()
        .get("ralph.dev/prompt")
        .cloned()
        .unwrap_or_default()
}

/// Kubelet stand-in for the benches: every new Pod labelled `label` in `namespace` ends at
/// once, with the status patch `status_of(task, pod name)` gives.
#[allow(dead_code)] // the controller benches'
pub fn finish_every_pod_with(
    client: Client,
    namespace: &'static str,
    label: &'static str,
    status_of: fn(&str, &str) -> serde_json::Value,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let mut finished = std::collections::BTreeSet::new();
        let mut stream = watcher(pods.clone(), watcher::Config::default().labels(label))
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = stream.next().await {
            let name = pod.name_any();
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) || !finished.insert(name.clone()) {
                continue;
            }
            let status = status_of(&runner_arg(&pod, "--task").unwrap_or_default(), &name);
            let pods = pods.clone();
            tokio::spawn(async move {
                let _ = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            });
        }
    })
}

/// The value after `flag` in the agent container's command.
pub fn runner_arg(pod: &Pod, flag: &str) -> Option<String> {
    let command = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "agent")?
        .command
        .clone()?;
    let at = command.iter().position(|a| a == flag)?;
    command.get(at + 1).cloned()
}

/// A Feature manifest in [`NS`] with the given tasks and extra spec fields.
pub fn feature_manifest(
    name: &str,
    tasks: serde_json::Value,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut manifest = serde_json::json!({
        "apiVersion": "ralph.dev/v1alpha1",
        "kind": "Feature",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "agent": {"image": "agent:test", "command": ["scripted-agent"]},
            "retry": {"maxRetries": 3, "backoffBaseSeconds": 1, "backoffMaxSeconds": 2},
            "tasks": tasks
        }
    });
    if let (Some(spec), Some(extra)) = (manifest["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    manifest
}

/// Runs the controller (one namespace, no leader election) until the token is cancelled. It
/// authenticates as [`super::fake_apiserver::rbac::CONTROLLER_USER`], under the chart's RBAC rules
/// when the server enforces them; `admin` creates what the chart would.
fn spawn_controller(
    server: &FakeApiServer,
    admin: Client,
    max_concurrent_attempts: usize,
    finished_pod_ttl: Duration,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let config = ControllerConfig {
        namespace: Some(NS.to_owned()),
        ralph_image: "ralph:test".to_owned(),
        agent_service_account: "ralph-agent".to_owned(),
        native_sidecars: NativeSidecars::Auto,
        max_concurrent_attempts,
        api_timeout: Duration::from_secs(5),
        queue_wait: Duration::ZERO,
        leader_election: None,
        metrics_addr: None,
        instance: "test".to_owned(),
        finished_pod_ttl,
        gateway_prices: Default::default(),
    };
    let token = stop.clone();
    let client = server.client_as(NS, super::fake_apiserver::rbac::CONTROLLER_USER);
    let controller = tokio::spawn(async move {
        create_agent_service_account(&admin).await;
        let shutdown = async move { token.cancelled().await };
        if let Err(error) = ralph::controller::run(client, config, shutdown).await {
            panic!("controller failed: {error}");
        }
    });
    (stop, controller)
}

/// The agent Pods' ServiceAccount in [`NS`], as the Helm chart creates it (the controller
/// claims nothing while it is missing). Best effort: it may exist already.
pub async fn create_agent_service_account(client: &Client) {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), NS);
    let account = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ralph-agent"}
    }))
    .expect("ServiceAccount");
    let _ = accounts
        .create(&kube::api::PostParams::default(), &account)
        .await;
}
