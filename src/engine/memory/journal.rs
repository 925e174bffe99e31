//! Journal entries: what one attempt did (outcome, duration, usage) and what its agent wrote
//! down in `<journal>` notes, for the next attempts of the task and the tasks that build on it.

use std::fmt::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cut;
use crate::engine::attempt::Usage;
use crate::engine::policy::AttemptOutcome;
use crate::engine::sigils::{self, Sigils};

/// Longest failure or crash detail kept in an entry, in characters.
pub(crate) const MAX_DETAIL_CHARS: usize = 500;

/// One attempt, as the journal remembers it. Usage an agent did not report is `None`
/// (unknown), never 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// The task's ID.
    pub task: String,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// When it ended, Unix ms.
    pub ended_at_ms: i64,
    /// How long it ran, when its start is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Input plus output tokens, when the agent reported any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost in US dollars, when the agent reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Why it failed or crashed, in short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The agent's `<journal>` notes, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What is known about an ended attempt, as either mode records it.
#[derive(Clone, Copy, Debug)]
pub struct AttemptFacts<'a> {
    /// The task's ID.
    pub task: &'a str,
    /// Attempt number.
    pub attempt: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// When it started, Unix ms, when known.
    pub started_at_ms: Option<i64>,
    /// When it ended, Unix ms.
    pub ended_at_ms: i64,
    /// Its usage.
    pub usage: &'a Usage,
    /// The sigils the agent wrote (its notes and failure reasons).
    pub sigils: &'a Sigils,
    /// The crash summary, when it crashed.
    pub crash: Option<&'a str>,
}

/// The journal entry of an ended attempt.
pub(crate) fn entry(facts: &AttemptFacts<'_>) -> JournalEntry {
    let detail = facts
        .crash
        .or(facts.sigils.task_failed_reason.as_deref())
        .or(facts.sigils.promise_reason.as_deref())
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| cut(d, MAX_DETAIL_CHARS));
    let tokens =
        facts.usage.total_tokens() + facts.usage.tokens.cache_read + facts.usage.tokens.cache_write;
    JournalEntry {
        task: facts.task.to_owned(),
        attempt: facts.attempt,
        outcome: facts.outcome,
        ended_at_ms: facts.ended_at_ms,
        duration_ms: facts
            .started_at_ms
            .and_then(|start| u64::try_from(facts.ended_at_ms - start).ok()),
        tokens: (tokens > 0).then_some(facts.usage.total_tokens()),
        cost_usd: facts.usage.cost_usd,
        detail,
        notes: facts
            .sigils
            .journal
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect(),
    }
}

impl JournalEntry {
    /// The entry as a prompt shows it (Markdown list item, agent text defused); `own` leaves
    /// out the task's name (the section is about the task itself).
    pub fn render(&self, own: bool) -> String {
        let mut out = String::new();
        let outcome = self.outcome.as_str();
        if own {
            let _ = write!(out, "- Attempt {}: {outcome}", self.attempt);
        } else {
            let task = sigils::defuse(&self.task);
            let _ = write!(out, "- {task}, attempt {}: {outcome}", self.attempt);
        }
        let _ = write!(out, "; {}", self.figures());
        out.push('\n');
        if let Some(detail) = &self.detail {
            indented(&mut out, "Why: ", detail);
        }
        for note in &self.notes {
            indented(&mut out, "Note: ", note);
        }
        out
    }

    /// Duration, tokens and cost, `unknown` where not reported.
    pub fn figures(&self) -> String {
        let duration = self.duration_ms.map_or_else(
            || "duration unknown".to_owned(),
            |ms| format!("took {}", duration(ms)),
        );
        let tokens = self
            .tokens
            .map_or_else(|| "tokens unknown".to_owned(), |t| format!("{t} tokens"));
        // Written as everywhere else costs are (`$0.25`, `$0.001`).
        let cost = self.cost_usd.map_or_else(
            || "cost unknown".to_owned(),
            |c| match crate::engine::budget::MicroUsd::from_dollars(c) {
                Some(cost) => format!("${cost}"),
                None => format!("${c}"),
            },
        );
        format!("{duration}, {tokens}, {cost}")
    }
}

/// `text` defused, as an indented continuation of a list item.
fn indented(out: &mut String, label: &str, text: &str) {
    let text = sigils::defuse(text.trim());
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let _ = writeln!(out, "  {label}{first}");
    for line in lines {
        let _ = writeln!(out, "  {line}");
    }
}

/// `ms` as `1h2m`, `3m12s` or `4.5s`.
fn duration(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m{}s", seconds / 60, seconds % 60),
        _ => format!("{}h{}m", seconds / 3600, seconds / 60 % 60),
    }
}

/// Newest first (by end, then attempt number).
fn newest_first(entries: &mut [&JournalEntry]) {
    entries.sort_by(|a, b| {
        (b.ended_at_ms, b.attempt, &b.task).cmp(&(a.ended_at_ms, a.attempt, &a.task))
    });
}

/// A task's own entries, newest first.
pub(crate) fn ranked_own(entries: &[JournalEntry]) -> Vec<&JournalEntry> {
    let mut ranked: Vec<&JournalEntry> = entries.iter().collect();
    newest_first(&mut ranked);
    ranked
}

/// The entries of the tasks a task depends on: the latest of each task first (newest first),
/// then the older ones (newest first).
pub(crate) fn ranked_blockers(entries: &[JournalEntry]) -> Vec<&JournalEntry> {
    let mut all: Vec<&JournalEntry> = entries.iter().collect();
    newest_first(&mut all);
    let mut latest = Vec::new();
    let mut older = Vec::new();
    for entry in all {
        if latest.iter().any(|l: &&JournalEntry| l.task == entry.task) {
            older.push(entry);
        } else {
            latest.push(entry);
        }
    }
    latest.extend(older);
    latest
}
