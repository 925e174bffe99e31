//! Completion sigils: the tags an agent writes to say what it did
//! (`<task-done>ID</task-done>`, `<promise>COMPLETE</promise>`, ...).
//!
//! Interface fixed here; the parser is filled in by the engine work.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `<promise>…</promise>`: the agent's claim about the whole feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Promise {
    /// `<promise>COMPLETE</promise>`
    Complete,
    /// `<promise>FAILURE</promise>`
    Failure,
}

/// `<verify-pass>` / `<verify-fail>`: a verifier's verdict on a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// `<verify-pass>ID</verify-pass>`
    Pass(String),
    /// `<verify-fail>ID</verify-fail>`
    Fail(String),
}

/// `<knowledge tags="a,b" title="T">body</knowledge>`: a learning worth keeping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Knowledge {
    /// Tags, split on commas and trimmed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Title.
    pub title: String,
    /// Body text, trimmed.
    pub body: String,
}

/// Every sigil found in one prompt turn's message text (first occurrence wins for the
/// single-valued ones).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sigils {
    /// `<task-done>ID</task-done>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_done: Option<String>,
    /// `<task-failed>ID</task-failed>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_failed: Option<String>,
    /// The agent's reason given with `<task-failed>` (text next to the tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_failed_reason: Option<String>,
    /// `<promise>COMPLETE|FAILURE</promise>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise: Option<Promise>,
    /// The agent's reason given with `<promise>FAILURE</promise>` (text next to the tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise_reason: Option<String>,
    /// `<next-model>NAME</next-model>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_model: Option<String>,
    /// `<verify-pass>ID</verify-pass>` or `<verify-fail>ID</verify-fail>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// `<journal>text</journal>` entries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<String>,
    /// `<knowledge …>` entries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<Knowledge>,
}

impl Sigils {
    /// True when no sigil at all was found.
    pub fn is_empty(&self) -> bool {
        *self == Sigils::default()
    }
}

/// Parses all sigils in a complete text.
pub fn parse(text: &str) -> Sigils {
    let mut scanner = SigilScanner::new();
    scanner.push(text);
    scanner.finish()
}

/// Incremental sigil parser for text that arrives in chunks (a tag may be split anywhere).
#[derive(Debug, Default)]
pub struct SigilScanner {
    buffer: String,
}

impl SigilScanner {
    /// A scanner that has seen no text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of message text.
    pub fn push(&mut self, chunk: &str) {
        self.buffer.push_str(chunk);
    }

    /// The sigils found in all text pushed so far.
    pub fn finish(self) -> Sigils {
        // Placeholder until the parser lands (engine work).
        let _ = self.buffer;
        Sigils::default()
    }
}
