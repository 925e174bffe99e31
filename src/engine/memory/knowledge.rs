//! Knowledge: lasting lessons about the codebase, kept per feature, one per title (a later
//! entry with the same title replaces the earlier one), matched into prompts by tags.

use std::collections::BTreeSet;
use std::fmt::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cut;
use crate::engine::sigils::{self, Knowledge};

/// Longest title kept, in characters.
pub(crate) const MAX_TITLE_CHARS: usize = 200;
/// Longest body kept, in characters.
pub(crate) const MAX_BODY_CHARS: usize = 8192;
/// Most bytes a feature's learned knowledge may take (its ConfigMap or store rows): the
/// oldest entries are dropped beyond it.
pub(crate) const MAX_KNOWLEDGE_BYTES: usize = 512 * 1024;
/// The `source` of an entry the user seeded in the Feature.
pub(crate) const SEEDED: &str = "seed";

/// One lesson.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeEntry {
    /// Its title (entries are unique by title, compared without case or extra spaces).
    pub title: String,
    /// Lower-case tags; an entry without tags applies to every task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The lesson.
    pub body: String,
    /// Where it came from: the attempt that wrote it, or `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When it was recorded, Unix ms (0 for seeded entries).
    #[serde(default)]
    pub recorded_at_ms: i64,
}

impl KnowledgeEntry {
    /// An entry an attempt wrote with `<knowledge>`.
    pub fn learned(knowledge: &Knowledge, attempt: &str, now_ms: i64) -> Self {
        Self::new(
            &knowledge.title,
            &knowledge.tags,
            &knowledge.body,
            Some(attempt.to_owned()),
            now_ms,
        )
    }

    /// An entry the user seeded in the Feature.
    pub fn seeded(title: &str, tags: &[String], body: &str) -> Self {
        Self::new(title, tags, body, Some(SEEDED.to_owned()), 0)
    }

    fn new(title: &str, tags: &[String], body: &str, source: Option<String>, at: i64) -> Self {
        Self {
            title: cut(&one_line(title), MAX_TITLE_CHARS),
            tags: normalized_tags(tags),
            body: cut(body.trim(), MAX_BODY_CHARS),
            source,
            recorded_at_ms: at,
        }
    }

    /// The title as compared: lower case, whitespace collapsed.
    pub fn key(&self) -> String {
        one_line(&self.title).to_lowercase()
    }

    /// Approximate stored size in bytes.
    pub fn size(&self) -> usize {
        self.title.len() + self.body.len() + self.tags.iter().map(|t| t.len() + 1).sum::<usize>()
    }

    /// The entry as a prompt shows it (Markdown, defused).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "### {}", sigils::defuse(&self.title));
        if !self.tags.is_empty() {
            let _ = write!(out, " ({})", sigils::defuse(&self.tags.join(", ")));
        }
        let _ = write!(out, "\n\n{}\n\n", sigils::defuse(&self.body));
        out
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn normalized_tags(tags: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    tags.iter()
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty() && seen.insert(t.clone()))
        .collect()
}

/// Adds `new` to `book`: an entry replaces the one with the same title. Returns whether the
/// book changed. The book stays within [`MAX_KNOWLEDGE_BYTES`], oldest entries dropped first.
pub(crate) fn learn(
    book: &mut Vec<KnowledgeEntry>,
    new: impl IntoIterator<Item = KnowledgeEntry>,
) -> bool {
    let mut changed = false;
    for entry in new {
        let key = entry.key();
        match book.iter_mut().find(|e| e.key() == key) {
            Some(existing) if same_lesson(existing, &entry) => {}
            Some(existing) => {
                *existing = entry;
                changed = true;
            }
            None => {
                book.push(entry);
                changed = true;
            }
        }
    }
    changed | bound(book, MAX_KNOWLEDGE_BYTES)
}

fn same_lesson(a: &KnowledgeEntry, b: &KnowledgeEntry) -> bool {
    a.title == b.title && a.tags == b.tags && a.body == b.body
}

/// Drops the oldest entries until the book takes at most `max_bytes`; whether any went.
pub(crate) fn bound(book: &mut Vec<KnowledgeEntry>, max_bytes: usize) -> bool {
    let mut total: usize = book.iter().map(KnowledgeEntry::size).sum();
    if total <= max_bytes {
        return false;
    }
    book.sort_by_key(|e| e.recorded_at_ms);
    let mut drop = 0;
    while total > max_bytes && drop < book.len() {
        total -= book[drop].size();
        drop += 1;
    }
    book.drain(..drop);
    true
}

/// The feature's knowledge: the seeded entries, each replaced by a learned entry with the
/// same title, then the other learned entries.
pub(crate) fn merged(seeded: &[KnowledgeEntry], learned: &[KnowledgeEntry]) -> Vec<KnowledgeEntry> {
    let mut book = seeded.to_vec();
    for entry in learned {
        let key = entry.key();
        match book.iter_mut().find(|e| e.key() == key) {
            Some(existing) => *existing = entry.clone(),
            None => book.push(entry.clone()),
        }
    }
    book
}

/// The words a task is known by: its tags and the words of its ID (split at anything but
/// letters and digits), lower case.
pub(crate) fn task_words(task: &str, tags: &[String]) -> BTreeSet<String> {
    tags.iter()
        .map(|t| t.trim().to_lowercase())
        .chain(
            task.split(|c: char| !c.is_alphanumeric())
                .map(str::to_lowercase),
        )
        .filter(|w| !w.is_empty())
        .collect()
}

/// The entries for a task, best first: those sharing the most tags with the task's words
/// (newest first among equals), then the untagged ones (newest first). Entries whose tags
/// all miss are left out.
pub(crate) fn matching<'a>(
    book: &'a [KnowledgeEntry],
    task: &str,
    tags: &[String],
) -> Vec<&'a KnowledgeEntry> {
    let words = task_words(task, tags);
    let mut scored: Vec<(usize, &KnowledgeEntry)> = book
        .iter()
        .filter_map(|entry| {
            if entry.tags.is_empty() {
                return Some((0, entry));
            }
            let hits = entry.tags.iter().filter(|t| words.contains(*t)).count();
            (hits > 0).then_some((hits, entry))
        })
        .collect();
    scored.sort_by(|(ha, a), (hb, b)| {
        hb.cmp(ha)
            .then(b.recorded_at_ms.cmp(&a.recorded_at_ms))
            .then_with(|| a.title.cmp(&b.title))
    });
    scored.into_iter().map(|(_, entry)| entry).collect()
}

/// A ConfigMap data key for an entry's title: `[-._a-zA-Z0-9]`, stable, distinct per title
/// (a slug of the title and a hash of its compared form).
pub(crate) fn storage_key(entry: &KnowledgeEntry) -> String {
    let key = entry.key();
    let hash = crate::engine::stable_hash::fnv1a(key.as_bytes());
    let slug: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let slug: String = slug.chars().take(60).collect();
    format!("{slug}.{:08x}", hash as u32)
}
