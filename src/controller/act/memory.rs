//! The journal and knowledge in a cluster (see docs/memory.md).
//!
//! - Journal: derived from each Task's `status.attempts` (outcome, times, usage, the
//!   agent's sigils with its `<journal>` notes), which the controller writes anyway when an
//!   attempt ends: no extra write, survives restarts, bounded per Task (the last
//!   [`crate::api::MAX_ATTEMPT_HISTORY`] attempts), so a 1,000-task Feature adds nothing to
//!   the Feature object.
//! - Knowledge: a ConfigMap `<feature>-knowledge` owned by the Feature, one key per title,
//!   written only when an attempt brings knowledge (before the Task status that records the
//!   attempt, so a restart re-ingests rather than loses it), bounded to
//!   [`knowledge::MAX_KNOWLEDGE_BYTES`]. Seeded knowledge is read from the Feature's spec.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::api::{Feature, TextSource, memory::parse_seeds};
use crate::controller::cache::texts::TextError;
use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::cached::CachedTask;
use crate::controller::runtime::context::Context;
use crate::engine::attempt::AttemptResult;
use crate::engine::memory::journal::{self, AttemptFacts};
use crate::engine::memory::knowledge;
use crate::engine::memory::{self, JournalEntry, KnowledgeEntry, Recall, RecallInput};

/// How often a knowledge write is tried again after losing a race with another write.
const WRITE_ATTEMPTS: usize = 3;

/// Name of the ConfigMap holding a feature's learned knowledge.
pub(crate) fn knowledge_config_map(feature: &str) -> String {
    format!("{feature}-knowledge")
}

/// The journal of a Task: one entry per ended attempt its status keeps.
pub(crate) fn task_journal(task: &CachedTask) -> Vec<JournalEntry> {
    let id = crate::controller::plan::decide::task_id(task);
    let Some(status) = task.status.as_ref() else {
        return Vec::new();
    };
    status
        .attempts
        .iter()
        .filter_map(|record| {
            let outcome = record.outcome?;
            let ended_at_ms = record.ended_at.as_ref()?.0.as_millisecond();
            Some(journal::entry(&AttemptFacts {
                task: &id,
                attempt: record.number,
                outcome,
                started_at_ms: record.started_at.as_ref().map(|t| t.0.as_millisecond()),
                ended_at_ms,
                usage: &record.usage,
                sigils: &record.sigils,
                crash: record.crash.as_deref(),
            }))
        })
        .collect()
}

/// What the next prompt of `task` recalls: its own journal, that of the tasks it depends on
/// (`siblings` by object name), and the feature's knowledge, within the Feature's budgets.
pub(crate) fn recall(
    feature: &Feature,
    task: &CachedTask,
    task_id: &str,
    siblings: &BTreeMap<String, std::sync::Arc<CachedTask>>,
    book: &[KnowledgeEntry],
) -> Recall {
    let own = task_journal(task);
    let blockers: Vec<JournalEntry> = task
        .spec
        .fields
        .depends_on
        .iter()
        .filter_map(|name| siblings.get(name))
        .flat_map(|blocker| task_journal(blocker))
        .collect();
    memory::recall(&RecallInput {
        task: task_id,
        tags: &task.spec.fields.tags,
        own: &own,
        blockers: &blockers,
        knowledge: book,
        budgets: feature.spec.memory.budgets(),
    })
}

/// The feature's knowledge: seeded (inline, then `knowledgeFrom`), replaced and extended by
/// what agents learned (its ConfigMap).
pub(crate) async fn feature_knowledge(
    feature: &Feature,
    ctx: &Context,
) -> Result<Vec<KnowledgeEntry>, TextError> {
    let spec = &feature.spec.memory;
    let mut seeded = spec.seeded();
    if let Some(selector) = &spec.knowledge_from {
        const WHAT: &str = "spec.memory.knowledgeFrom";
        let source = TextSource {
            inline: None,
            config_map_key_ref: Some(selector.clone()),
        };
        let text =
            crate::controller::cache::texts::read_text(feature, ctx, Some(&source), WHAT).await?;
        let more = parse_seeds(text.as_deref().unwrap_or_default()).map_err(|error| {
            TextError::Unreadable {
                feature: feature.name_any(),
                what: WHAT,
                problem: format!("ConfigMap {} key {}: {error}", selector.name, selector.key),
            }
        })?;
        seeded = knowledge::merged(&seeded, &more);
    }
    let (learned, _) = learned(feature, ctx).await?;
    Ok(knowledge::merged(&seeded, &learned))
}

/// The learned entries in the feature's ConfigMap, and the ConfigMap (when it exists).
async fn learned(
    feature: &Feature,
    ctx: &Context,
) -> Result<(Vec<KnowledgeEntry>, Option<ConfigMap>), CallError> {
    let namespace = feature.namespace().unwrap_or_default();
    let name = knowledge_config_map(&feature.name_any());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let config_map = bounded(
        ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    let entries = config_map
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .map(|data| {
            data.iter()
                .filter_map(|(key, value)| match serde_yaml_ng::from_str(value) {
                    Ok(entry) => Some(entry),
                    Err(error) => {
                        tracing::warn!(config_map = %name, %key, %error, "knowledge entry unreadable; ignored");
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok((entries, config_map))
}

/// Event reason when the knowledge of an attempt cannot be kept.
pub(crate) const REASON_KNOWLEDGE_NOT_KEPT: &str = "KnowledgeNotKept";

/// [`record_knowledge`], before the attempt is recorded in the Task's status. A failure the
/// user must fix (403: RBAC without ConfigMap create/update; 400/422: a ConfigMap the API
/// server refuses) is a Warning Event on the Task and does not hold up the task; any other
/// failure is returned, so the result is ingested again later.
pub(crate) async fn keep_knowledge(
    ctx: &Context,
    feature: &Feature,
    task: &CachedTask,
    result: &AttemptResult,
    attempt: &str,
    now_ms: i64,
) -> Result<(), CallError> {
    match record_knowledge(ctx, feature, result, attempt, now_ms).await {
        Err(error) if matches!(error.status_code(), Some(400 | 403 | 422)) => {
            let note = format!(
                "the knowledge attempt {attempt} wrote was not kept: {error}; the controller \
                 needs get, create and update on ConfigMaps (see docs/deploy.md)"
            );
            ctx.events
                .warning(&task.object_ref(&()), REASON_KNOWLEDGE_NOT_KEPT, note)
                .await;
            Ok(())
        }
        other => other,
    }
}

/// Keeps the knowledge an attempt wrote in the feature's ConfigMap (created, owned by the
/// Feature, on the first entry). Nothing is written when the attempt brought none or
/// nothing new.
pub(crate) async fn record_knowledge(
    ctx: &Context,
    feature: &Feature,
    result: &AttemptResult,
    attempt: &str,
    now_ms: i64,
) -> Result<(), CallError> {
    if result.sigils.knowledge.is_empty() {
        return Ok(());
    }
    let new: Vec<KnowledgeEntry> = result
        .sigils
        .knowledge
        .iter()
        .map(|k| KnowledgeEntry::learned(k, attempt, now_ms))
        .collect();
    let namespace = feature.namespace().unwrap_or_default();
    let name = knowledge_config_map(&feature.name_any());
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut tries = 0;
    loop {
        tries += 1;
        let (mut book, existing) = learned(feature, ctx).await?;
        if !knowledge::learn(&mut book, new.clone()) {
            return Ok(());
        }
        let written = match existing {
            Some(mut config_map) => {
                config_map.data = Some(data(&book));
                bounded(
                    ctx.api_timeout,
                    format!("replace ConfigMap {namespace}/{name}"),
                    api.replace(&name, &PostParams::default(), &config_map),
                )
                .await
            }
            None => {
                let config_map = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            crate::api::FEATURE_LABEL.to_owned(),
                            feature.name_any(),
                        )])),
                        owner_references: feature.controller_owner_ref(&()).map(|o| vec![o]),
                        ..ObjectMeta::default()
                    },
                    data: Some(data(&book)),
                    ..ConfigMap::default()
                };
                bounded(
                    ctx.api_timeout,
                    format!("create ConfigMap {namespace}/{name}"),
                    api.create(&PostParams::default(), &config_map),
                )
                .await
            }
        };
        match written {
            Err(error) if error.is_conflict() && tries < WRITE_ATTEMPTS => continue,
            Err(error) => return Err(error),
            Ok(_) => return Ok(()),
        }
    }
}

/// The ConfigMap data of a book: one YAML document per entry, keyed by its title.
fn data(book: &[KnowledgeEntry]) -> BTreeMap<String, String> {
    book.iter()
        .filter_map(|entry| {
            let value = serde_yaml_ng::to_string(entry).ok()?;
            Some((knowledge::storage_key(entry), value))
        })
        .collect()
}
