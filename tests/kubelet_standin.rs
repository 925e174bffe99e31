//! The kubelet stand-in against the fake API server: mode A helpers (the test writes Pod
//! status) and mode B (the stand-in runs the agent container as a local process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/kubelet_standin.rs"]
mod kubelet_standin;

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

async fn create(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod)
        .await
        .expect("create pod");
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

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn node(server: &FakeApiServer) -> KubeletStandIn {
    KubeletStandIn::node(
        server.client(),
        NodeOptions::new(env!("CARGO_BIN_EXE_ralph")),
    )
    .expect("stand-in starts")
}

#[tokio::test]
async fn manual_success_reports_the_result_as_termination_message() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    create(&pods, &simple_pod("t-a1", &["true"])).await;
    let ended = manual::succeed_with(&pods, "t-a1", "{\"version\":1}")
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
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    create(&pods, &simple_pod("t-a1", &["true"])).await;
    let running = manual::set_running(&pods, "t-a1").await.expect("running");
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
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    create(&pods, &simple_pod("t-a1", &["true"])).await;
    let ended = manual::oom_kill(&pods, "t-a1").await.expect("oom");
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
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    create(&pods, &simple_pod("t-a1", &["true"])).await;
    manual::set_running(&pods, "t-a1").await.expect("running");
    let evicted = manual::evict(&pods, "t-a1", "The node was low on resource: memory.")
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
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let _kubelet = KubeletStandIn::manual(server.client(), Some("default"));
    create(&pods, &simple_pod("t-a1", &["true"])).await;
    let running = manual::set_running(&pods, "t-a1").await.expect("running");
    pods.delete("t-a1", &DeleteParams::default())
        .await
        .expect("delete");
    let uid = running.metadata.uid.unwrap_or_default();
    await_condition(pods.clone(), "t-a1", conditions::is_deleted(&uid))
        .await
        .expect("watch");
    assert!(pods.get_opt("t-a1").await.expect("get").is_none());
}

#[tokio::test]
async fn node_mounts_a_pod_annotation_through_the_downward_api() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let _kubelet = node(&server);
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/cp", "/ralph/prompt/prompt.md", "/dev/termination-log"],
        "volumeMounts": [{ "name": "prompt", "mountPath": "/ralph/prompt" }],
    });
    let volumes = json!([{ "name": "prompt", "downwardAPI": { "items": [{
        "path": "prompt.md",
        "fieldRef": { "fieldPath": "metadata.annotations['ralph.dev/prompt']" }
    }]}}]);
    let mut annotated = pod("t-a1", container, volumes);
    annotated.metadata.annotations =
        Some([("ralph.dev/prompt".to_owned(), "do the thing".to_owned())].into());
    create(&pods, &annotated).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(
        agent_termination(&ended).message.as_deref(),
        Some("do the thing")
    );
}

#[tokio::test]
async fn node_reports_the_termination_log_written_by_the_container() {
    let server = FakeApiServer::start().await.expect("server");
    let client = server.client();
    let prompts: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let prompt = serde_json::from_value(
        json!({ "metadata": { "name": "t-a1-prompt" }, "data": { "prompt.md": "do the thing" } }),
    )
    .expect("cm");
    prompts
        .create(&PostParams::default(), &prompt)
        .await
        .expect("prompt");
    let pods: Api<Pod> = Api::default_namespaced(client);
    let _kubelet = node(&server);
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/cp", "/ralph/prompt/prompt.md", "/dev/termination-log"],
        "volumeMounts": [{ "name": "prompt", "mountPath": "/ralph/prompt" }],
    });
    let volumes = json!([{ "name": "prompt", "configMap": { "name": "t-a1-prompt" } }]);
    create(&pods, &pod("t-a1", container, volumes)).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(phase(&ended), "Succeeded");
    assert_eq!(
        agent_termination(&ended).message.as_deref(),
        Some("do the thing")
    );
}

#[tokio::test]
async fn node_reports_a_failing_exit_code() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let _kubelet = node(&server);
    create(&pods, &simple_pod("t-a1", &["/bin/sh", "-c", "exit 3"])).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(phase(&ended), "Failed");
    assert_eq!(agent_termination(&ended).exit_code, 3);
}

#[tokio::test]
async fn node_falls_back_to_logs_for_a_failure_without_message() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let _kubelet = node(&server);
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/sh", "-c", "echo boom >&2; exit 1"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    create(&pods, &pod("t-a1", container, json!([]))).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(
        agent_termination(&ended).message.as_deref().map(str::trim),
        Some("boom")
    );
}

#[tokio::test]
async fn node_runs_the_in_pod_ralph_binary_as_the_local_one() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let kubelet = node(&server);
    create(
        &pods,
        &simple_pod("t-a1", &["/ralph/bin/ralph", "--version"]),
    )
    .await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(phase(&ended), "Succeeded");
    assert!(
        kubelet
            .log("default", "t-a1")
            .unwrap_or_default()
            .contains("ralph")
    );
}

#[tokio::test]
async fn node_resolves_environment_from_config_maps_fields_and_mounts() {
    let server = FakeApiServer::start().await.expect("server");
    let client = server.client();
    let settings: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = serde_json::from_value(
        json!({ "metadata": { "name": "settings" }, "data": { "greeting": "hi" } }),
    )
    .expect("cm");
    settings
        .create(&PostParams::default(), &cm)
        .await
        .expect("cm");
    let pods: Api<Pod> = Api::default_namespaced(client);
    let _kubelet = node(&server);
    let container = json!({
        "name": "agent", "image": "agent:1",
        "command": ["/bin/sh", "-c", "printf '%s-%s' \"$GREETING\" \"$POD\" > \"$OUT\""],
        "env": [
            { "name": "GREETING", "valueFrom": { "configMapKeyRef": { "name": "settings", "key": "greeting" } } },
            { "name": "POD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "OUT", "value": "/dev/termination-log" },
        ],
    });
    create(&pods, &pod("t-a1", container, json!([]))).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(
        agent_termination(&ended).message.as_deref(),
        Some("hi-t-a1")
    );
}

#[tokio::test]
async fn node_stops_the_process_on_graceful_deletion_and_confirms_it() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let kubelet = node(&server);
    create(&pods, &simple_pod("t-a1", &["/bin/sleep", "600"])).await;
    wait_until_running(&pods, "t-a1").await;
    let uid = pods
        .get("t-a1")
        .await
        .expect("get")
        .metadata
        .uid
        .unwrap_or_default();
    pods.delete("t-a1", &DeleteParams::default())
        .await
        .expect("delete");
    await_condition(pods.clone(), "t-a1", conditions::is_deleted(&uid))
        .await
        .expect("watch");
    let exit = kubelet
        .run_info("default", "t-a1")
        .and_then(|r| r.exit_code);
    assert_eq!(exit, Some(128 + 15), "SIGTERM ended the process");
}

#[tokio::test]
async fn node_runs_a_container_without_command_as_the_ralph_entrypoint() {
    let server = FakeApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let kubelet = node(&server);
    let container = json!({ "name": "agent", "image": "ralph:1", "args": ["--version"] });
    create(&pods, &pod("t-a1", container, json!([]))).await;
    let ended = wait_until_ended(&pods, "t-a1").await;
    assert_eq!(phase(&ended), "Succeeded");
    assert!(
        kubelet
            .log("default", "t-a1")
            .unwrap_or_default()
            .contains("ralph")
    );
}
