//! The Task objects a Feature's templates describe, kept in line with them: applied when
//! a template changed (read whole from the Feature's spec), deleted when their template is
//! gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::api::{Feature, Task, conditions, desired_tasks};
use crate::controller::cache::index::by_name;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::feature_key;
use crate::controller::plan::origin::{TEMPLATE_HASH_ANNOTATION, template_hash};
use crate::controller::plan::problem::Problem;
use crate::controller::runtime::context::{Context, FIELD_MANAGER};
use crate::engine::dag::TaskPhase;

/// How many of a feature's templated Tasks are applied at once (all features together: at
/// most [`super::context::TEMPLATE_APPLIES`]; the client's token bucket,
/// `--kube-api-qps`/`--kube-api-burst`, paces them further).
const CONCURRENT_TEMPLATE_APPLIES: usize = 32;

/// What [`sync_tasks`] found.
#[derive(Debug, Default)]
pub(crate) struct TaskSync {
    /// Templated Tasks the cache does not show as applied yet.
    pub(crate) missing: Vec<String>,
    /// A Task the API server refused (the first in spec order), with its template's index.
    pub(crate) rejected: Option<(usize, Problem)>,
    /// Whether it applied or deleted a Task (the listing it was given is behind).
    pub(crate) wrote: bool,
}

/// Applies the Task objects the Feature's templates describe (only those whose applied
/// template differs from the cache: a restart re-applies nothing; several at once, within
/// the client's QPS) and deletes templated Tasks whose template is gone, unless they are
/// running. Once this process applied a generation and the cache shows every templated
/// Task, later reconciles of that generation skip the templates altogether.
pub(crate) async fn sync_tasks(
    feature: &Feature,
    ctx: &Context,
    listed: &[Arc<CachedTask>],
) -> Result<TaskSync, CallError> {
    let mut sync = TaskSync::default();
    let namespace = feature.namespace().unwrap_or_default();
    let key = feature_key(&namespace, &feature.name_any());
    let generation = feature.metadata.generation.unwrap_or(0);
    let applied_before = ctx.applied_generation(&key) == Some(generation);
    let uid = feature.metadata.uid.clone().unwrap_or_default();
    let templated = listed
        .iter()
        .filter(|t| t.origin().is_templated_by(&uid))
        .count();
    if applied_before && templated == feature.spec.tasks.len() {
        return Ok(sync);
    }
    let cached: BTreeMap<String, Arc<CachedTask>> = by_name(listed.to_vec());
    // The cached Feature holds no prompt texts: the hashes recorded when it was cached say
    // which Tasks differ, and only those are read whole (below). None without a uid.
    let hashes = crate::controller::cache::trim::template_hashes(feature);
    if hashes.len() != feature.spec.tasks.len() {
        return Ok(sync);
    }
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let (wanted, stale) = stale_templates(feature, &cached, &hashes);
    // Applied for this generation already and not in the cache: the watch lags, unless a
    // live read says the Task is gone (deleted by someone), then it is applied again.
    if applied_before && let Some((_, first)) = stale.first() {
        let live = bounded(
            ctx.api_timeout,
            format!("get Task {namespace}/{first}"),
            api.get_opt(first),
        )
        .await?;
        if live.is_some_and(|t| {
            crate::controller::plan::origin::of(&t)
                .template_hash
                .is_some()
        }) {
            sync.missing = stale.into_iter().map(|(_, name)| name).collect();
            return Ok(sync);
        }
    }
    let turn = match stale.is_empty() {
        true => None,
        false => ctx.cache.specs.applying().await,
    };
    let stale = match stale_tasks(feature, ctx, stale).await? {
        WholeTasks::Built(tasks) => tasks,
        WholeTasks::SpecMoved(names) => {
            sync.missing = names;
            return Ok(sync);
        }
    };
    sync.wrote = !stale.is_empty();
    let applies = stale
        .into_iter()
        .map(|(index, name, task)| apply_template(ctx, &api, index, name, task));
    let applied: Vec<_> = futures::stream::iter(applies)
        .buffer_unordered(CONCURRENT_TEMPLATE_APPLIES)
        .collect()
        .await;
    drop(turn);
    if let Some(error) = record_applied(feature, &mut sync, applied) {
        return Err(error);
    }
    if sync.rejected.is_none() {
        ctx.set_applied_generation(&key, generation);
    }
    sync.wrote |= delete_orphans(ctx, &api, &namespace, &cached, &wanted, &uid).await?;
    Ok(sync)
}

/// The names of the Tasks the Feature's templates describe, and those (with their
/// template's index) whose applied template differs from `hashes` or that the cache lacks.
fn stale_templates(
    feature: &Feature,
    cached: &BTreeMap<String, Arc<CachedTask>>,
    hashes: &[String],
) -> (std::collections::BTreeSet<String>, Vec<(usize, String)>) {
    let mut wanted = std::collections::BTreeSet::new();
    let mut stale = Vec::new();
    for (index, (template, hash)) in feature.spec.tasks.iter().zip(hashes).enumerate() {
        let name = crate::api::task_object_name(&feature.name_any(), &template.name);
        wanted.insert(name.clone());
        let up_to_date = cached
            .get(&name)
            .is_some_and(|c| c.origin().template_hash == Some(hash.as_str()));
        if !up_to_date {
            stale.push((index, name));
        }
    }
    (wanted, stale)
}

/// Records the templates applied (to be seen in the cache) and the first one the API
/// server refused in spec order; returns the first other error.
fn record_applied(
    feature: &Feature,
    sync: &mut TaskSync,
    applied: Vec<(usize, String, Result<(), CallError>)>,
) -> Option<CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let mut first_error = None;
    for (index, name, result) in applied {
        match result {
            Ok(()) => sync.missing.push(name),
            Err(error) if error.status_code() == Some(422) => {
                let template = feature
                    .spec
                    .tasks
                    .get(index)
                    .map_or("", |t| t.name.as_str());
                // The first template in spec order that was refused.
                let earlier = sync.rejected.as_ref().is_some_and(|(i, _)| *i < index);
                if !earlier {
                    sync.rejected = Some((
                        index,
                        Problem {
                            reason: conditions::REASON_TASK_REJECTED,
                            message: format!(
                                "the API server rejected Task {namespace}/{name} \
                                 (spec.tasks[{index}], {template:?}) of Feature {namespace}/{}: \
                                 {error}; fix that template",
                                feature.name_any()
                            ),
                        },
                    ));
                }
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error
}

/// Deletes the Feature's templated Tasks (of Feature uid `uid`) whose template is gone
/// (not in `wanted`), unless they are running; whether there was any. Tasks the Feature
/// owns without a template (its planning Task, its planned Tasks) are not templated.
async fn delete_orphans(
    ctx: &Context,
    api: &Api<Task>,
    namespace: &str,
    cached: &BTreeMap<String, Arc<CachedTask>>,
    wanted: &std::collections::BTreeSet<String>,
    uid: &str,
) -> Result<bool, CallError> {
    let mut any = false;
    let orphans = cached.values().filter(|t| {
        !wanted.contains(&t.name_any())
            && t.origin().is_templated_by(uid)
            && t.status.as_ref().map(|s| s.phase) != Some(TaskPhase::Running)
    });
    for orphan in orphans {
        any = true;
        let name = orphan.name_any();
        let deleted = bounded(
            ctx.api_timeout,
            format!("delete Task {namespace}/{name}"),
            api.delete(&name, &DeleteParams::default()),
        )
        .await;
        match deleted {
            Err(error) if !error.is_not_found() => return Err(error),
            _ => {}
        }
    }
    Ok(any)
}

/// The Tasks to apply for the changed templates of a cached Feature.
enum WholeTasks {
    /// Each (template index, Task name, Task with its hash annotation).
    Built(Vec<(usize, String, Task)>),
    /// The API server has a newer generation than the cache (or no Feature): nothing is
    /// applied from the cached one; the names of the Tasks not applied.
    SpecMoved(Vec<String>),
}

/// The whole Tasks to apply for the templates `stale` (index, Task name) of the cached
/// `feature`, built from the Feature's whole spec of the same generation (read,
/// [`super::spec_cache`], unless the cached Feature is whole, [`crate::controller::cache::trim::is_whole`]). When the spec moved on, the watch brings the newer Feature and
/// its reconcile applies that.
async fn stale_tasks(
    feature: &Feature,
    ctx: &Context,
    stale: Vec<(usize, String)>,
) -> Result<WholeTasks, CallError> {
    if stale.is_empty() {
        return Ok(WholeTasks::Built(Vec::new()));
    }
    let moved = |stale: Vec<(usize, String)>| {
        Ok(WholeTasks::SpecMoved(
            stale.into_iter().map(|(_, name)| name).collect(),
        ))
    };
    let read = match crate::controller::cache::trim::is_whole(feature) {
        true => None,
        false => match ctx
            .cache
            .specs
            .spec(&ctx.client, ctx.api_timeout, feature)
            .await?
        {
            Some(read) => Some(read),
            None => return moved(stale),
        },
    };
    let whole = read.as_deref().unwrap_or(feature);
    let same_generation = whole.metadata.generation == feature.metadata.generation;
    let desired = match desired_tasks(whole) {
        Ok(desired) if same_generation => desired,
        _ => return moved(stale),
    };
    let mut desired: Vec<Option<Task>> = desired.into_iter().map(Some).collect();
    Ok(WholeTasks::Built(
        stale
            .into_iter()
            .filter_map(|(index, name)| {
                let mut task = desired.get_mut(index)?.take()?;
                let hash = template_hash(&task);
                task.annotations_mut()
                    .insert(TEMPLATE_HASH_ANNOTATION.to_owned(), hash);
                Some((index, name, task))
            })
            .collect(),
    ))
}

/// Applies one templated Task (server-side apply, forced: the controller owns templates).
async fn apply_template(
    ctx: &Context,
    api: &Api<Task>,
    index: usize,
    name: String,
    task: Task,
) -> (usize, String, Result<(), CallError>) {
    let mut body = serde_json::to_value(&task).unwrap_or_default();
    if let Some(object) = body.as_object_mut() {
        object.remove("status");
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespace = task.namespace().unwrap_or_default();
    // A permit of the process-wide bound: many Features applying at once share it.
    let _permit = ctx.template_applies.acquire().await;
    let applied = bounded(
        ctx.api_timeout,
        format!("apply Task {namespace}/{name}"),
        api.patch(&name, &params, &Patch::Apply(&body)),
    )
    .await;
    (index, name, applied.map(|_| ()))
}
