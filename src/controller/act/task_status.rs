//! Task status writes (server-side apply, fenced by the resourceVersion decided on), recorded
//! in the read-your-writes overlay.

use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::api::{Task, TaskStatus};
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::runtime::context::{Context, FIELD_MANAGER};

/// Writes a Task's status by server-side apply, with the resourceVersion it was decided on
/// as a precondition (a stale view gets a conflict, not a lost update).
pub(crate) async fn write_status(
    ctx: &Context,
    task: &CachedTask,
    status: &TaskStatus,
) -> Result<(), CallError> {
    let name = task.name_any();
    let namespace = task.namespace().unwrap_or_default();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = serde_json::json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "Task",
        "metadata": {"name": name, "resourceVersion": task.resource_version()},
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = bounded(
        ctx.api_timeout,
        format!("write status of Task {namespace}/{name}"),
        api.patch_status(&name, &params, &Patch::Apply(&patch)),
    )
    .await?;
    ctx.cache.task_writes.record(task, written);
    Ok(())
}
