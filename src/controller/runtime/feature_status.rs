//! Writing a Feature's status: the whole status by server-side apply, and the Events of
//! its changes (the phase, a cost that became unknown).

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

use super::context::{Context, FIELD_MANAGER};
use super::feature::ReconcileError;
use crate::api::{Feature, FeatureStatus};
use crate::controller::client::call::bounded;
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::FeaturePlan;
use crate::controller::plan::status::{self, FeatureEvents};

/// Writes the Feature's status when it changed.
/// Writes `status` as the Feature's whole status (server-side apply).
pub(super) async fn patch_status(
    feature: &Feature,
    ctx: &Context,
    status: &FeatureStatus,
) -> Result<(), ReconcileError> {
    let name = feature.name_any();
    let namespace = feature.namespace().unwrap_or_default();
    let api: Api<Feature> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = serde_json::json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "Feature",
        "metadata": {"name": name},
        "status": status,
    });
    bounded(
        ctx.api_timeout,
        format!("write status of Feature {namespace}/{name}"),
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        ),
    )
    .await?;
    Ok(())
}

pub(super) async fn write_status(
    feature: &Feature,
    ctx: &Context,
    plan: &FeaturePlan,
    tasks: &[Arc<CachedTask>],
    effects: &FeatureEvents,
    now_ms: i64,
) -> Result<(), ReconcileError> {
    let new = status::feature_status(feature, plan, tasks, effects, now_ms);
    if feature.status.as_ref() == Some(&new) {
        return Ok(());
    }
    let old_phase = feature.status.as_ref().map(|s| s.phase);
    let name = feature.name_any();
    patch_status(feature, ctx, &new).await?;
    ctx.cache
        .planning_writes
        .record(feature, new.planning.as_ref());
    let old_conditions = feature.status.as_ref().map_or(&[][..], |s| &s.conditions);
    if let Some(warning) =
        crate::controller::plan::budget::cost_became_unknown(old_conditions, &new.conditions)
    {
        ctx.events
            .warning(
                &feature.object_ref(&()),
                crate::controller::plan::budget::REASON_COST_UNKNOWN,
                warning,
            )
            .await;
    }
    if old_phase != Some(new.phase) {
        ctx.events
            .normal(
                &feature.object_ref(&()),
                "FeaturePhase",
                format!(
                    "feature {name} is {:?}: {}",
                    new.phase,
                    new.message.clone().unwrap_or_default()
                ),
            )
            .await;
    }
    Ok(())
}
