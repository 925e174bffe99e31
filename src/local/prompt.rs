//! The prompt of a local attempt: the engine's prompt, fed from the stored tasks.

use std::collections::HashMap;

use crate::engine::memory::{self, Recall, RecallInput, knowledge};
use crate::engine::policy::PreviousAttempt;
use crate::engine::prompt::{self, CompletedBlocker, FeatureText, PromptInput, TaskText};
use crate::local::feature::LocalFeature;
use crate::local::store::{Store, StoreError, TaskRow};

fn text(row: &TaskRow) -> TaskText {
    TaskText {
        id: row.spec.name.clone(),
        title: row.spec.fields.title.clone(),
        description: row.spec.fields.description.clone(),
    }
}

/// The engine's prompt input for `row`'s next attempt; `memory` is what it recalls of the
/// journal and knowledge ([`recall`]).
pub(crate) fn input(
    feature: &LocalFeature,
    tasks: &HashMap<String, TaskRow>,
    row: &TaskRow,
    memory: Recall,
) -> PromptInput {
    PromptInput {
        task: text(row),
        parent: row
            .spec
            .fields
            .parent
            .as_ref()
            .and_then(|parent| tasks.get(parent))
            .map(text),
        completed_blockers: row
            .spec
            .fields
            .depends_on
            .iter()
            .filter_map(|name| tasks.get(name))
            .map(|blocker| CompletedBlocker {
                id: blocker.spec.name.clone(),
                title: blocker.spec.fields.title.clone(),
                summary: None,
            })
            .collect(),
        feature: FeatureText {
            name: feature.name.clone(),
            spec: feature.spec_text.clone(),
            plan: feature.plan_text.clone(),
        },
        retry_count: row.retry_count,
        max_retries: feature
            .retry()
            .for_task(row.spec.fields.max_retries)
            .max_retries,
        previous_attempt: row
            .previous_attempt
            .as_deref()
            .and_then(|json| serde_json::from_str::<PreviousAttempt>(json).ok()),
        reported: None,
        memory,
    }
}

/// The rendered prompt for `row`'s next attempt.
pub(crate) fn render(
    feature: &LocalFeature,
    tasks: &HashMap<String, TaskRow>,
    row: &TaskRow,
    memory: Recall,
) -> String {
    prompt::render(&input(feature, tasks, row, memory))
}

/// What `row`'s next prompt recalls from the store: its own journal, the journal of the
/// tasks it depends on, and the feature's knowledge (seeded in the manifest, replaced and
/// extended by what agents learned), within the manifest's budgets.
pub(crate) fn recall(
    store: &Store,
    feature: &LocalFeature,
    row: &TaskRow,
) -> Result<Recall, StoreError> {
    let own = store.journal(Some(row.name()))?;
    let mut blockers = Vec::new();
    for blocker in &row.spec.fields.depends_on {
        blockers.extend(store.journal(Some(blocker))?);
    }
    let book = knowledge::merged(&feature.memory.seeded(), &store.learned_knowledge()?);
    Ok(memory::recall(&RecallInput {
        task: row.name(),
        tags: &row.spec.fields.tags,
        own: &own,
        blockers: &blockers,
        knowledge: &book,
        budgets: feature.memory.budgets(),
    }))
}
