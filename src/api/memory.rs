//! `spec.memory` of a Feature: prompt budgets of the journal and knowledge, and knowledge
//! the user seeds. See docs/memory.md.

use k8s_openapi::api::core::v1::ConfigMapKeySelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::memory::knowledge::{MAX_BODY_CHARS, MAX_TITLE_CHARS};
use crate::engine::memory::{Budgets, KnowledgeEntry};

/// Largest prompt budget of the journal or the knowledge, in characters.
pub const MAX_PROMPT_CHARS: u32 = 65536;
/// Most knowledge entries seeded inline.
pub const MAX_SEEDED_KNOWLEDGE: usize = 100;
/// Most tags of a task or a knowledge entry.
pub const MAX_TAGS: usize = 16;
/// Longest tag.
pub const MAX_TAG_LEN: usize = 63;

/// What the agents of a feature remember: the journal (one entry per attempt) and the
/// knowledge (lessons matched to tasks by tags), and how much of them a prompt gets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySpec {
    /// Most characters of journal entries in a prompt (the task's own earlier attempts,
    /// then those of the tasks it depends on, newest first). Default 6000; 0 leaves the
    /// journal out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PROMPT_CHARS))]
    pub journal_prompt_chars: Option<u32>,

    /// Most characters of knowledge in a prompt (entries whose tags match the task's tags or
    /// the words of its name, best match first). Default 4000; 0 leaves knowledge out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PROMPT_CHARS))]
    pub knowledge_prompt_chars: Option<u32>,

    /// Knowledge to start with. An entry an agent writes with the same title replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_SEEDED_KNOWLEDGE))]
    pub knowledge: Vec<KnowledgeSeed>,

    /// A ConfigMap key holding more knowledge to start with: a YAML list of entries shaped
    /// like those of `knowledge` (title, tags, body). Not available to `ralph run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge_from: Option<ConfigMapKeySelector>,
}

impl MemorySpec {
    /// The prompt budgets, defaults where unset.
    pub fn budgets(&self) -> Budgets {
        let chars = |value: Option<u32>, default: usize| {
            value.map_or(default, |v| usize::try_from(v).unwrap_or(usize::MAX))
        };
        let default = Budgets::default();
        Budgets {
            journal_chars: chars(self.journal_prompt_chars, default.journal_chars),
            knowledge_chars: chars(self.knowledge_prompt_chars, default.knowledge_chars),
        }
    }

    /// The inline seeds as knowledge entries.
    pub fn seeded(&self) -> Vec<KnowledgeEntry> {
        self.knowledge.iter().map(KnowledgeSeed::entry).collect()
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == MemorySpec::default()
    }
}

/// A lesson the user gives the agents from the start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KnowledgeSeed {
    /// Its title; entries are unique by title (without case).
    #[schemars(length(min = 1, max = MAX_TITLE_CHARS))]
    pub title: String,

    /// Tags matched against a task's tags and the words of its name; no tags: every task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TAGS), inner(length(min = 1, max = MAX_TAG_LEN)))]
    pub tags: Vec<String>,

    /// The lesson.
    #[schemars(length(max = MAX_BODY_CHARS))]
    pub body: String,
}

impl KnowledgeSeed {
    /// The seed as a knowledge entry.
    pub fn entry(&self) -> KnowledgeEntry {
        KnowledgeEntry::seeded(&self.title, &self.tags, &self.body)
    }
}

/// Why seeded knowledge text cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("not a YAML list of knowledge entries (title, tags, body): {0}")]
pub struct SeedError(String);

/// Reads seeded knowledge from text: a YAML list of entries (title, tags, body).
pub fn parse_seeds(text: &str) -> Result<Vec<KnowledgeEntry>, SeedError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let seeds: Vec<KnowledgeSeed> =
        serde_yaml_ng::from_str(text).map_err(|error| SeedError(error.to_string()))?;
    Ok(seeds.iter().map(KnowledgeSeed::entry).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_budgets_take_the_defaults() {
        assert_eq!(MemorySpec::default().budgets(), Budgets::default());
    }

    #[test]
    fn a_budget_of_zero_is_kept() {
        let spec = MemorySpec {
            journal_prompt_chars: Some(0),
            ..MemorySpec::default()
        };
        assert_eq!(spec.budgets().journal_chars, 0);
    }

    #[test]
    fn seeds_parse_from_a_yaml_list() {
        let seeds = parse_seeds("- title: Build\n  tags: [Rust]\n  body: cargo build\n");
        let seeds = seeds.unwrap_or_default();
        assert_eq!(seeds.len(), 1);
        assert_eq!(seeds[0].tags, ["rust"]);
        assert_eq!(seeds[0].source.as_deref(), Some("seed"));
    }

    #[test]
    fn seed_text_that_is_not_a_list_is_refused_with_the_expected_shape() {
        let error = parse_seeds("title: x").err().map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("title, tags, body")));
    }
}
