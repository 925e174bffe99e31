//! The kubelet stand-in against the fake API server: mode A helpers (the test writes Pod
//! status) and mode B (the stand-in runs the agent container as a local process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, kubelet_standin};

use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kubelet_standin::{KubeletStandIn, NodeOptions, manual};
use serde_json::{Value, json};

fn pod(name: &str, container: Value, volumes: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "ralph.dev/attempt": name } },
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": volumes,
        },
    }))
    .expect("valid Pod")
}

fn simple_pod(name: &str, command: &[&str]) -> Pod {
    pod(
        name,
        json!({ "name": "agent", "image": "agent:1", "command": command }),
        json!([]),
    )
}

/// A fake API server and the Pods of its default namespace.
struct Cluster {
    server: FakeApiServer,
    pods: Api<Pod>,
}

impl Cluster {
    async fn start() -> Self {
        let server = FakeApiServer::start().await.expect("server");
        let pods = Api::default_namespaced(server.client());
        Self { server, pods }
    }

    /// [`Cluster::start`], holding the ConfigMap `name` with `data`.
    async fn with_config_map(name: &str, data: Value) -> Self {
        let cluster = Self::start().await;
        cluster.create_config_map(name, data).await;
        cluster
    }

    /// Starts a [`Cluster::node`], runs `pod` on it to its end; the node and the ended Pod.
    async fn run_on_a_node(&self, pod: &Pod) -> (KubeletStandIn, Pod) {
        let kubelet = self.node();
        let ended = self.run_to_end(pod).await;
        (kubelet, ended)
    }

    /// A stand-in node running the Pods' containers as local processes.
    fn node(&self) -> KubeletStandIn {
        KubeletStandIn::node(
            self.server.client(),
            NodeOptions::new(env!("CARGO_BIN_EXE_ralph")),
        )
        .expect("stand-in starts")
    }

    async fn create(&self, pod: &Pod) {
        self.pods
            .create(&PostParams::default(), pod)
            .await
            .expect("create pod");
    }

    /// Creates `pod` and waits until it has ended.
    async fn run_to_end(&self, pod: &Pod) -> Pod {
        self.create(pod).await;
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        wait_until_ended(&self.pods, name).await
    }

    async fn create_config_map(&self, name: &str, data: Value) {
        let config_map: ConfigMap =
            serde_json::from_value(json!({ "metadata": { "name": name }, "data": data }))
                .expect("valid ConfigMap");
        Api::default_namespaced(self.server.client())
            .create(&PostParams::default(), &config_map)
            .await
            .expect("create ConfigMap");
    }

    /// Deletes Pod `name` (of UID `uid`) and waits until it is gone.
    async fn delete_and_wait_until_gone(&self, name: &str, uid: &str) {
        self.pods
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        await_condition(self.pods.clone(), name, conditions::is_deleted(uid))
            .await
            .expect("watch");
    }
}

async fn wait_until_ended(pods: &Api<Pod>, name: &str) -> Pod {
    let ended = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
    };
    await_condition(pods.clone(), name, ended)
        .await
        .expect("watch")
        .expect("pod still exists")
}

async fn wait_until_running(pods: &Api<Pod>, name: &str) {
    let running = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            == Some("Running")
    };
    await_condition(pods.clone(), name, running)
        .await
        .expect("watch");
}

fn agent_termination(pod: &Pod) -> ContainerStateTerminated {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "agent"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .expect("agent container terminated")
}

/// The agent container's termination message.
fn termination_message(pod: &Pod) -> Option<String> {
    agent_termination(pod).message
}

/// A container that copies `prompt.md` of its volume `prompt` to its termination log.
fn prompt_copying_container() -> Value {
    json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/cp", "/ralph/prompt/prompt.md", "/dev/termination-log"],
        "volumeMounts": [{ "name": "prompt", "mountPath": "/ralph/prompt" }],
    })
}

/// Asserts that the Pod `ended` succeeded running the ralph binary (its log says so).
fn assert_ran_ralph(ended: &Pod, kubelet: &KubeletStandIn) {
    assert_eq!(phase(ended), "Succeeded");
    let log = kubelet.log("default", "t-a1").unwrap_or_default();
    assert!(log.contains("ralph"), "{log}");
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn manual_success_reports_the_result_as_termination_message() {
    let cluster = Cluster::start().await;
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    let ended = manual::succeed_with(&cluster.pods, "t-a1", "{\"version\":1}")
        .await
        .expect("succeed");
    let terminated = agent_termination(&ended);
    assert_eq!(phase(&ended), "Succeeded");
    assert_eq!(
        (terminated.exit_code, terminated.message.as_deref()),
        (0, Some("{\"version\":1}"))
    );
}

#[tokio::test]
async fn manual_running_binds_the_pod_and_marks_containers_running() {
    let cluster = Cluster::start().await;
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    let running = manual::set_running(&cluster.pods, "t-a1")
        .await
        .expect("running");
    let state = running
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.clone());
    assert_eq!(phase(&running), "Running");
    assert!(running.spec.and_then(|s| s.node_name).is_some());
    assert!(state.and_then(|s| s.running).is_some());
}

#[tokio::test]
async fn manual_oom_kill_reports_reason_without_message() {
    let cluster = Cluster::start().await;
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    let ended = manual::oom_kill(&cluster.pods, "t-a1").await.expect("oom");
    let terminated = agent_termination(&ended);
    assert_eq!(phase(&ended), "Failed");
    assert_eq!(
        (terminated.reason.as_deref(), terminated.exit_code),
        (Some("OOMKilled"), 137)
    );
    assert!(terminated.message.is_none());
}

#[tokio::test]
async fn manual_eviction_fails_the_pod_with_reason_evicted() {
    let cluster = Cluster::start().await;
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    manual::set_running(&cluster.pods, "t-a1")
        .await
        .expect("running");
    let evicted = manual::evict(
        &cluster.pods,
        "t-a1",
        "The node was low on resource: memory.",
    )
    .await
    .expect("evict");
    let status = evicted.status.clone().unwrap_or_default();
    assert_eq!(
        (status.phase.as_deref(), status.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
}

#[tokio::test]
async fn manual_stand_in_confirms_graceful_deletion_of_a_bound_pod() {
    let cluster = Cluster::start().await;
    let _kubelet = KubeletStandIn::manual(cluster.server.client(), Some("default"));
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    let running = manual::set_running(&cluster.pods, "t-a1")
        .await
        .expect("running");
    let uid = running.metadata.uid.unwrap_or_default();
    cluster.delete_and_wait_until_gone("t-a1", &uid).await;
    assert!(cluster.pods.get_opt("t-a1").await.expect("get").is_none());
}

#[tokio::test]
async fn node_mounts_a_pod_annotation_through_the_downward_api() {
    let cluster = Cluster::start().await;
    let container = prompt_copying_container();
    let volumes = json!([{ "name": "prompt", "downwardAPI": { "items": [{
        "path": "prompt.md",
        "fieldRef": { "fieldPath": "metadata.annotations['ralph.dev/prompt']" }
    }]}}]);
    let mut annotated = pod("t-a1", container, volumes);
    annotated.metadata.annotations =
        Some([("ralph.dev/prompt".to_owned(), "do the thing".to_owned())].into());
    let (_kubelet, ended) = cluster.run_on_a_node(&annotated).await;
    assert_eq!(termination_message(&ended).as_deref(), Some("do the thing"));
}

#[tokio::test]
async fn node_reports_the_termination_log_written_by_the_container() {
    let cluster =
        Cluster::with_config_map("t-a1-prompt", json!({ "prompt.md": "do the thing" })).await;
    let container = prompt_copying_container();
    let volumes = json!([{ "name": "prompt", "configMap": { "name": "t-a1-prompt" } }]);
    let (_kubelet, ended) = cluster
        .run_on_a_node(&pod("t-a1", container, volumes))
        .await;
    assert_eq!(phase(&ended), "Succeeded");
    assert_eq!(termination_message(&ended).as_deref(), Some("do the thing"));
}

#[tokio::test]
async fn node_reports_a_failing_exit_code() {
    let cluster = Cluster::start().await;
    let (_kubelet, ended) = cluster
        .run_on_a_node(&simple_pod("t-a1", &["/bin/sh", "-c", "exit 3"]))
        .await;
    assert_eq!(phase(&ended), "Failed");
    assert_eq!(agent_termination(&ended).exit_code, 3);
}

#[tokio::test]
async fn node_falls_back_to_logs_for_a_failure_without_message() {
    let cluster = Cluster::start().await;
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/sh", "-c", "echo boom >&2; exit 1"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    let (_kubelet, ended) = cluster
        .run_on_a_node(&pod("t-a1", container, json!([])))
        .await;
    assert_eq!(
        termination_message(&ended).as_deref().map(str::trim),
        Some("boom")
    );
}

#[tokio::test]
async fn node_runs_the_in_pod_ralph_binary_as_the_local_one() {
    let cluster = Cluster::start().await;
    let (kubelet, ended) = cluster
        .run_on_a_node(&simple_pod("t-a1", &["/ralph/bin/ralph", "--version"]))
        .await;
    assert_ran_ralph(&ended, &kubelet);
}

#[tokio::test]
async fn node_resolves_environment_from_config_maps_fields_and_mounts() {
    let cluster = Cluster::with_config_map("settings", json!({ "greeting": "hi" })).await;
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/sh", "-c", "printf '%s-%s' \"$GREETING\" \"$POD\" > \"$OUT\""],
        "env": [
            { "name": "GREETING", "valueFrom": { "configMapKeyRef": { "name": "settings", "key": "greeting" } } },
            { "name": "POD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "OUT", "value": "/dev/termination-log" },
        ],
    });
    let (_kubelet, ended) = cluster
        .run_on_a_node(&pod("t-a1", container, json!([])))
        .await;
    assert_eq!(termination_message(&ended).as_deref(), Some("hi-t-a1"));
}

#[tokio::test]
async fn node_stops_the_process_on_graceful_deletion_and_confirms_it() {
    let cluster = Cluster::start().await;
    let kubelet = cluster.node();
    cluster
        .create(&simple_pod("t-a1", &["/bin/sleep", "600"]))
        .await;
    wait_until_running(&cluster.pods, "t-a1").await;
    let uid = cluster
        .pods
        .get("t-a1")
        .await
        .expect("get")
        .metadata
        .uid
        .unwrap_or_default();
    cluster.delete_and_wait_until_gone("t-a1", &uid).await;
    let exit = kubelet
        .run_info("default", "t-a1")
        .and_then(|r| r.exit_code);
    assert_eq!(exit, Some(128 + 15), "SIGTERM ended the process");
}

#[tokio::test]
async fn node_runs_a_container_without_command_as_the_ralph_entrypoint() {
    let cluster = Cluster::start().await;
    let container = json!({ "name": "agent", "image": "ralph:1", "args": ["--version"] });
    let (kubelet, ended) = cluster
        .run_on_a_node(&pod("t-a1", container, json!([])))
        .await;
    assert_ran_ralph(&ended, &kubelet);
}

/// The waiting state of the Pod's first container.
fn first_waiting(pod: &Pod) -> Option<(String, Option<String>)> {
    let container = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    Some((waiting.reason.clone()?, waiting.message.clone()))
}

#[tokio::test]
async fn manual_waiting_leaves_the_pod_pending_with_the_kubelets_reason() {
    let cluster = Cluster::start().await;
    cluster.create(&simple_pod("t-a1", &["true"])).await;
    let waiting = manual::set_waiting(
        &cluster.pods,
        "t-a1",
        "agent",
        "CreateContainerConfigError",
        "secret \"key\" not found",
    )
    .await
    .expect("waiting");
    assert_eq!(phase(&waiting), "Pending");
    assert!(
        waiting
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .is_some()
    );
    assert_eq!(
        first_waiting(&waiting),
        Some((
            "CreateContainerConfigError".to_owned(),
            Some("secret \"key\" not found".to_owned())
        ))
    );
}

/// Pod `t-a1` of an image under a `.invalid` registry, created on the node, once it waits.
async fn unpullable_pod_waiting(cluster: &Cluster) -> Pod {
    let unpullable = pod(
        "t-a1",
        json!({ "name": "agent", "image": "registry.invalid/agent:1", "command": ["true"] }),
        json!([]),
    );
    cluster.create(&unpullable).await;
    await_condition(cluster.pods.clone(), "t-a1", |pod: Option<&Pod>| {
        pod.and_then(first_waiting).is_some()
    })
    .await
    .expect("watch")
    .expect("pod")
}

#[tokio::test]
async fn node_never_pulls_an_image_of_an_invalid_registry() {
    let cluster = Cluster::start().await;
    let _kubelet = cluster.node();
    let waiting = unpullable_pod_waiting(&cluster).await;
    assert_eq!(phase(&waiting), "Pending");
    let (reason, message) = first_waiting(&waiting).unwrap_or_default();
    assert_eq!(reason, "ErrImagePull");
    assert!(
        message.is_some_and(|m| m.contains("registry.invalid/agent:1")),
        "{waiting:?}"
    );
}

#[tokio::test]
async fn node_confirms_the_deletion_of_a_pod_it_could_not_start() {
    let cluster = Cluster::start().await;
    let _kubelet = cluster.node();
    let waiting = unpullable_pod_waiting(&cluster).await;
    let uid = waiting.metadata.uid.unwrap_or_default();
    cluster.delete_and_wait_until_gone("t-a1", &uid).await;
}

#[test]
fn only_images_of_an_invalid_registry_are_unpullable() {
    use kubelet_standin::status::unpullable;
    assert!(unpullable("registry.invalid/agent:1"));
    assert!(unpullable("registry.invalid:5000/team/agent@sha256:abc"));
    assert!(!unpullable("agent:1"));
    assert!(!unpullable("ghcr.io/team/agent:1"));
    assert!(!unpullable("invalid-looking/agent:1"));
    assert!(!unpullable("invalid/agent:1"));
}

/// The files `COPY --from=builder` puts into the Dockerfile's images (the release image and
/// its `e2e` stage, which agent images are built from).
fn files_of_the_dockerfiles_image() -> Vec<String> {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile"))
        .expect("Dockerfile");
    let files: Vec<String> = dockerfile
        .lines()
        .filter(|line| line.trim_start().starts_with("COPY --from=builder "))
        .filter_map(|line| line.split_whitespace().last().map(str::to_owned))
        .collect();
    assert!(!files.is_empty(), "the Dockerfile copies the binary in");
    files
}

/// An agent Pod as the controller builds it, its agent image `image`, playing the e2e plan
/// script.
fn attempt_pod_of_image(image: &str) -> Pod {
    attempt_pod_running(
        image,
        json!(["/ralph/bin/ralph", "agent", "script", PLAN_SCRIPT]),
    )
}

const PLAN_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/e2e/scripts/plan.script.yaml"
);

/// An agent Pod as the controller builds it, its agent `image` running `command`.
fn attempt_pod_running(image: &str, command: Value) -> Pod {
    use ralph::api::AgentSpec;
    use ralph::controller::plan::pod::{AttemptPod, PodSettings, SidecarMode, attempt_pod};
    let agent: AgentSpec =
        serde_json::from_value(json!({ "image": image, "command": command })).expect("agent spec");
    let input = AttemptPod {
        namespace: "default",
        task: "f-build",
        task_id: "build",
        feature: "f",
        attempt_id: "f-build-a1",
        prompt: "Your task ID is: build",
        owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "ralph.dev/v1alpha1".to_owned(),
            kind: "Task".to_owned(),
            name: "f-build".to_owned(),
            uid: "0a3c5e7f-0000-4000-8000-000000000001".to_owned(),
            ..Default::default()
        },
        agent: &agent,
        model: None,
        overrides: None,
        kind: ralph::engine::verification::AttemptKind::Work,
        verify: &Default::default(),
        lease_duration_seconds: 60,
    };
    let settings = PodSettings {
        ralph_image: image.to_owned(),
        service_account: "ralph-agent".to_owned(),
        sidecar: SidecarMode::Native,
        gateway_prices: Default::default(),
    };
    attempt_pod(&input, &settings).expect("agent Pod")
}

/// Runs the agent Pod `pod` on a node of `options` to its end: how its agent container ended.
async fn agent_pod_ended(
    cluster: &Cluster,
    options: NodeOptions,
    pod: Pod,
) -> ContainerStateTerminated {
    let _kubelet = KubeletStandIn::node(cluster.server.client(), options).expect("node");
    cluster.create(&pod).await;
    let ended = wait_until_ended(&cluster.pods, "f-build-a1").await;
    agent_termination(&ended)
}

#[tokio::test]
async fn the_dockerfiles_image_can_be_an_agent_image() {
    let cluster = Cluster::start().await;
    let mut options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
        .host_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/scripts"));
    for file in files_of_the_dockerfiles_image() {
        options = options.image_file("ralph:e2e", &file);
    }
    let agent = agent_pod_ended(&cluster, options, attempt_pod_of_image("ralph:e2e")).await;
    assert_ne!(agent.reason.as_deref(), Some("StartError"), "{agent:?}");
    assert_eq!(agent.exit_code, 0, "{agent:?}");
}

#[tokio::test]
async fn a_volume_mounted_onto_a_file_of_the_image_fails_the_container_as_runc_does() {
    let cluster = Cluster::start().await;
    let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph")).image_file("old:1", "/ralph");
    let agent = agent_pod_ended(&cluster, options, attempt_pod_of_image("old:1")).await;
    assert_eq!(
        (agent.reason.as_deref(), agent.exit_code),
        (Some("StartError"), 128)
    );
    let message = agent.message.unwrap_or_default();
    assert!(
        message.contains("to rootfs at \"/ralph/bin\"") && message.contains("not a directory"),
        "{message}"
    );
}

/// The condition the scheduler left on a Pod it could not place, as `(reason, message)`.
fn unscheduled(pod: &Pod) -> Option<(String, String)> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some((c.reason.clone()?, c.message.clone()?))
}

async fn wait_until(pods: &Api<Pod>, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(pod) = pods.get_opt(name).await.expect("get")
            && check(&pod)
        {
            return pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: never {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_pod_beyond_the_nodes_pod_limit_waits_unscheduled_until_one_ends() {
    let cluster = Cluster::start().await;
    let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph")).max_pods(1);
    let _kubelet = KubeletStandIn::node(cluster.server.client(), options).expect("node");
    cluster.create(&simple_pod("first", &["sleep", "2"])).await;
    wait_until_running(&cluster.pods, "first").await;
    cluster.create(&simple_pod("second", &["true"])).await;
    let waiting = wait_until(&cluster.pods, "second", "unscheduled", |p| {
        unscheduled(p).is_some()
    })
    .await;
    let (reason, message) = unscheduled(&waiting).expect("condition");
    assert_eq!(reason, "Unschedulable");
    assert!(message.contains("Too many pods"), "{message}");
    assert_eq!(phase(&waiting), "Pending");
    let ended = wait_until_ended(&cluster.pods, "second").await;
    assert_eq!(phase(&ended), "Succeeded");
}

#[tokio::test]
async fn a_node_that_is_not_ready_starts_nothing_until_it_is() {
    let cluster = Cluster::start().await;
    let kubelet = cluster.node();
    kubelet.set_ready(false);
    cluster.create(&simple_pod("held", &["true"])).await;
    let bound = wait_until(&cluster.pods, "held", "bound", |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let still = cluster.pods.get("held").await.expect("get");
    assert_eq!(phase(&still), "Pending", "{bound:?}");
    kubelet.set_ready(true);
    let ended = wait_until_ended(&cluster.pods, "held").await;
    assert_eq!(phase(&ended), "Succeeded");
}

#[tokio::test]
async fn a_workspace_emptydir_does_not_belong_to_the_agent() {
    let cluster = Cluster::start().await;
    let pod = pod(
        "owner",
        json!({
            "name": "agent", "image": "agent:1",
            "command": ["sh", "-c", "git init -q . && git status"],
            "workingDir": "/workspace",
            "volumeMounts": [{ "name": "workspace", "mountPath": "/workspace" }],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }),
        json!([{ "name": "workspace", "emptyDir": {} }]),
    );
    let (_kubelet, ended) = cluster.run_on_a_node(&pod).await;
    // As root, the stand-in gives the emptyDir to `nobody`; as another user it cannot.
    let message = termination_message(&ended).unwrap_or_default();
    assert!(
        message.contains("dubious ownership"),
        "run the tests as root: {message}"
    );
}

#[tokio::test]
async fn an_agent_that_runs_git_in_its_workspace_is_not_refused_for_ownership() {
    let cluster = Cluster::start().await;
    let options = NodeOptions::new(env!("CARGO_BIN_EXE_ralph"))
        .host_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/scripts"));
    // git status in the workspace, as agents run it all the time, then the scripted agent.
    let command = json!([
        "sh",
        "-c",
        "git init -q . && git status >&2 && exec \"$0\" \"$@\"",
        "/ralph/bin/ralph",
        "agent",
        "script",
        PLAN_SCRIPT,
    ]);
    let agent = agent_pod_ended(&cluster, options, attempt_pod_running("agent:git", command)).await;
    let result: Value =
        serde_json::from_str(agent.message.as_deref().unwrap_or("{}")).expect("result");
    assert_eq!(result["outcome"], "finished", "{result}");
}
