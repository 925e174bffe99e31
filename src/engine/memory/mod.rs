//! The loop's memory: the journal (one entry per attempt) and the feature's knowledge
//! (lessons agents wrote with `<knowledge>`, and those the user seeded), and what of them a
//! prompt recalls within its character budgets. Pure: both modes store entries their own way
//! (the local store; Task status and a ConfigMap in a cluster) and call [`recall`].

pub(crate) mod journal;
pub(crate) mod knowledge;

pub use journal::{AttemptFacts, JournalEntry};
pub use knowledge::KnowledgeEntry;

/// Default budget of the journal section of a prompt, in characters.
pub const DEFAULT_JOURNAL_PROMPT_CHARS: usize = 6000;
/// Default budget of the knowledge section of a prompt, in characters.
pub const DEFAULT_KNOWLEDGE_PROMPT_CHARS: usize = 4000;
/// An entry that does not fit whole is shortened to the rest of the budget when at least
/// this much is left; otherwise it is left out.
pub const MIN_SHORTENED_CHARS: usize = 160;
/// Appended to an entry shortened to fit its budget.
pub const SHORTENED_MARKER: &str = " …[shortened]";

/// How many characters of a prompt each section may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// The journal section.
    pub journal_chars: usize,
    /// The knowledge section.
    pub knowledge_chars: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            journal_chars: DEFAULT_JOURNAL_PROMPT_CHARS,
            knowledge_chars: DEFAULT_KNOWLEDGE_PROMPT_CHARS,
        }
    }
}

/// What the memory holds for one task's next attempt.
#[derive(Clone, Copy, Debug)]
pub struct RecallInput<'a> {
    /// The task's ID (its words match knowledge tags).
    pub task: &'a str,
    /// The task's own tags.
    pub tags: &'a [String],
    /// The task's own journal entries (earlier attempts), any order.
    pub own: &'a [JournalEntry],
    /// The journal entries of the tasks it depends on, any order.
    pub blockers: &'a [JournalEntry],
    /// The feature's knowledge, one entry per title (see [`knowledge::merged`]).
    pub knowledge: &'a [KnowledgeEntry],
    /// The character budgets.
    pub budgets: Budgets,
}

/// What a prompt recalls: rendered, defused entries, most relevant first, within budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recall {
    /// The task's own earlier attempts, newest first.
    pub own: Vec<String>,
    /// Attempts of the tasks it depends on: each one's latest first, then older ones.
    pub blockers: Vec<String>,
    /// Knowledge whose tags match the task, best match first.
    pub knowledge: Vec<String>,
}

impl Recall {
    /// True when nothing is recalled.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.blockers.is_empty() && self.knowledge.is_empty()
    }
}

/// The journal entries and knowledge a task's next prompt gets: the journal newest and most
/// relevant first (its own attempts, then the latest attempt of each task it depends on,
/// then their older attempts), the knowledge whose tags match the task's tags or the words of
/// its name, each within its budget.
pub fn recall(input: &RecallInput<'_>) -> Recall {
    let mut journal = Fitter::new(input.budgets.journal_chars);
    let own: Vec<String> = journal::ranked_own(input.own)
        .into_iter()
        .filter_map(|entry| journal.take(entry.render(true)))
        .collect();
    let blockers: Vec<String> = journal::ranked_blockers(input.blockers)
        .into_iter()
        .filter_map(|entry| journal.take(entry.render(false)))
        .collect();
    let mut knowledge_fit = Fitter::new(input.budgets.knowledge_chars);
    let knowledge = knowledge::matching(input.knowledge, input.task, input.tags)
        .into_iter()
        .filter_map(|entry| knowledge_fit.take(entry.render()))
        .collect();
    Recall {
        own,
        blockers,
        knowledge,
    }
}

/// Takes rendered items in rank order while they fit a character budget.
struct Fitter {
    left: usize,
}

impl Fitter {
    fn new(budget: usize) -> Self {
        Self { left: budget }
    }

    /// The item whole when it fits, shortened to the rest of the budget when enough is left,
    /// else nothing.
    fn take(&mut self, item: String) -> Option<String> {
        let chars = item.chars().count();
        if chars <= self.left {
            self.left -= chars;
            return Some(item);
        }
        if self.left < MIN_SHORTENED_CHARS {
            return None;
        }
        let keep = self.left - SHORTENED_MARKER.chars().count();
        let mut short: String = item.chars().take(keep).collect();
        short.push_str(SHORTENED_MARKER);
        self.left = 0;
        Some(short)
    }
}

/// `text` cut to at most `max` characters, with `…` when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests;
