//! Mode A: the test plays the kubelet, writing Pod status step by step.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::status::{self, Termination};

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Assigns the Pod to `node` (the scheduler's binding), unless it already is.
pub async fn bind(pods: &Api<Pod>, name: &str, node: &str) -> Result<(), kube::Error> {
    let pod = pods.get(name).await?;
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Ok(());
    }
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": { "name": name },
        "target": { "apiVersion": "v1", "kind": "Node", "name": node },
    });
    pods.create_subresource::<_, kube::core::Status>(
        "binding",
        name,
        &PostParams::default(),
        &binding,
    )
    .await?;
    Ok(())
}

async fn write_status(
    pods: &Api<Pod>,
    name: &str,
    status: serde_json::Value,
) -> Result<Pod, kube::Error> {
    let patch = json!({ "status": status });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Binds the Pod (node `standin`) and reports every container running.
pub async fn set_running(pods: &Api<Pod>, name: &str) -> Result<Pod, kube::Error> {
    bind(pods, name, "standin").await?;
    let pod = pods.get(name).await?;
    write_status(pods, name, status::running(&pod, &now())).await
}

/// Binds the Pod and reports container `container` waiting with the kubelet's `reason`
/// and `message`, as a kubelet that cannot start it does (e.g. `ErrImagePull`,
/// `CreateContainerConfigError`); the Pod stays Pending.
pub async fn set_waiting(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    reason: &str,
    message: &str,
) -> Result<Pod, kube::Error> {
    bind(pods, name, "standin").await?;
    let pod = pods.get(name).await?;
    write_status(
        pods,
        name,
        status::waiting(&pod, container, reason, message, &now()),
    )
    .await
}

/// Reports the agent container terminated as given (and the Pod Succeeded or Failed).
pub async fn set_terminated(
    pods: &Api<Pod>,
    name: &str,
    termination: &Termination,
) -> Result<Pod, kube::Error> {
    let pod = pods.get(name).await?;
    let started = started_at(&pod);
    write_status(
        pods,
        name,
        status::terminated(&pod, termination, &started, &now()),
    )
    .await
}

/// Runs the Pod to completion: Running, then the agent exits 0 with `result` (the runner's
/// JSON result document) as its termination message.
pub async fn succeed_with(pods: &Api<Pod>, name: &str, result: &str) -> Result<Pod, kube::Error> {
    set_running(pods, name).await?;
    set_terminated(pods, name, &Termination::completed(result)).await
}

/// Runs the Pod and has the kernel OOM-kill the agent (exit 137, reason OOMKilled, no message).
pub async fn oom_kill(pods: &Api<Pod>, name: &str) -> Result<Pod, kube::Error> {
    set_running(pods, name).await?;
    set_terminated(pods, name, &Termination::oom_killed()).await
}

/// Evicts the Pod (phase Failed, reason Evicted, containers killed without a message).
pub async fn evict(pods: &Api<Pod>, name: &str, message: &str) -> Result<Pod, kube::Error> {
    let pod = pods.get(name).await?;
    let started = started_at(&pod);
    write_status(pods, name, status::evicted(&pod, message, &started, &now())).await
}

fn started_at(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(now)
}
