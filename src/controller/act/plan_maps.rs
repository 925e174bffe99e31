//! The planning ConfigMaps the controller writes and what it reads of a planning Pod: the
//! Feature's plan (`<feature>-plan`), what a revision is told (`<feature>-revision`), and
//! whether a Pod's claim-keeper may still upload an answer or a proposal.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::scope::TaskScope;
use crate::api::Feature;
use crate::api::labels::{FEATURE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, TASK_LABEL};
use crate::api::planning::{plan_config_map_name, revision_config_map_name};
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedPod;
use crate::controller::plan::plan_map::{HASH_KEY, PlanFiles, PlanMapError, plan_map};
use crate::controller::plan::pod::SIDECAR_CONTAINER;
use crate::controller::runtime::context::Context;
use crate::engine::planning::{PLANNING_TASK, Revision};
use crate::manifest::answer::Answer;

/// The key of the revision ConfigMap that holds the revision (YAML).
pub(crate) const REVISION_KEY: &str = "revision.yaml";

/// Whether the attempt's Pod still runs its claim-keeper (it may yet upload the answer).
pub(super) fn claim_keeper_runs(scope: &TaskScope<'_>, namespace: &str, attempt: &str) -> bool {
    let Some(pod) = scope
        .ctx
        .cache
        .pods
        .get(&ObjectRef::<CachedPod>::new(attempt).within(namespace))
    else {
        return false;
    };
    let Some(status) = pod.status.as_ref() else {
        return true;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    let keeper = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|c| c.name == SIDECAR_CONTAINER);
    keeper.is_none_or(|c| c.state.as_ref().is_none_or(|s| s.terminated.is_none()))
}

/// The Feature's plan ConfigMap for a valid answer (pure).
pub(crate) fn plan_config_map(
    feature: &Feature,
    answer: &Answer,
    document: Option<String>,
    hash: &str,
) -> Result<ConfigMap, PlanMapError> {
    let meta = owned_meta(feature, plan_config_map_name(&feature.name_any()));
    let files = PlanFiles {
        tasks: Some(answer.canonical()),
        document,
    };
    plan_map(
        meta,
        &files,
        BTreeMap::from([(HASH_KEY.to_owned(), hash.to_owned())]),
    )
}

/// A planning ConfigMap `name` of `feature`: owned by it, labelled with it.
fn owned_meta(feature: &Feature, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: feature.namespace(),
        labels: Some(BTreeMap::from([
            (FEATURE_LABEL.to_owned(), feature.name_any()),
            (TASK_LABEL.to_owned(), PLANNING_TASK.to_owned()),
            (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        ])),
        owner_references: feature.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The ConfigMap that keeps `revision` for the Feature's planning attempts (pure).
pub(crate) fn revision_config_map(feature: &Feature, revision: &Revision) -> ConfigMap {
    let text = serde_yaml_ng::to_string(revision).unwrap_or_default();
    ConfigMap {
        metadata: owned_meta(feature, revision_config_map_name(&feature.name_any())),
        data: Some(BTreeMap::from([(REVISION_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    }
}

/// Writes `map`: created, or replacing the one of its name.
pub(crate) async fn keep_config_map(ctx: &Context, map: ConfigMap) -> Result<(), CallError> {
    let namespace = map.namespace().unwrap_or_default();
    let name = map.name_any();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let timeout = ctx.api_timeout;
    let created = bounded(
        timeout,
        format!("create ConfigMap {namespace}/{name}"),
        api.create(&PostParams::default(), &map),
    )
    .await;
    match created {
        Err(error) if error.is_conflict() => {
            let current = bounded(
                timeout,
                format!("get ConfigMap {namespace}/{name}"),
                api.get(&name),
            )
            .await?;
            let mut replacement = map;
            replacement.metadata.resource_version = current.resource_version();
            bounded(
                timeout,
                format!("replace ConfigMap {namespace}/{name}"),
                api.replace(&name, &PostParams::default(), &replacement),
            )
            .await?;
            Ok(())
        }
        other => other.map(drop),
    }
}
