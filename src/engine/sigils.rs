//! Completion sigils: the tags an agent writes to say what it did
//! (`<task-done>ID</task-done>`, `<promise>COMPLETE</promise>`, ...).
//!
//! Grammar: whole tags only (`<task-done-x>` is not a sigil), whitespace inside tags
//! trimmed, the first occurrence wins for single-valued sigils, malformed or unclosed tags
//! are ignored and read as prose. IDs must be valid task names ([`is_valid_task_id`]), and a
//! body that is a `{PLACEHOLDER}` never counts, so a prompt that shows the sigils with
//! placeholders cannot complete anything when an agent echoes it.

mod reason;
mod tag;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use reason::{ProseWindow, ReasonCapture};
use tag::{Close, Open, OpenTag, TagName};

pub use reason::MAX_REASON_CHARS;

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

/// Longest `<next-model>` name.
const MAX_MODEL_NAME: usize = 128;

/// Parses all sigils in a complete text.
pub fn parse(text: &str) -> Sigils {
    let mut scanner = SigilScanner::new();
    scanner.push(text);
    scanner.finish()
}

/// Whether `id` is a task name: a DNS-1123 label (1 to 63 lowercase alphanumerics or `-`,
/// starting and ending with an alphanumeric).
pub fn is_valid_task_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
        && bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
}

/// Rewrites every sigil tag in `text` (opening or closing) so it can never parse: its `<`
/// becomes `&lt;`. For user text embedded in a prompt.
pub fn defuse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let after = &rest[lt + 1..];
        let name = after.strip_prefix('/').unwrap_or(after);
        if TagName::ALL.iter().any(|tag| name.starts_with(tag.name())) {
            out.push_str("&lt;");
        } else {
            out.push('<');
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Whether `text` is a template placeholder such as `{TASK_ID}` (uppercase, digits, `_`, `|`).
pub fn is_placeholder(text: &str) -> bool {
    text.strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .is_some_and(|inner| {
            !inner.is_empty()
                && inner
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b"_| -".contains(&b))
        })
}

fn is_valid_model_name(name: &str) -> bool {
    (1..=MAX_MODEL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@".contains(&b))
}

/// Incremental sigil parser for text that arrives in chunks (a tag may be split anywhere).
///
/// Each byte is examined a bounded number of times: only an unfinished tag is kept between
/// pushes, and the search for its closing tag resumes where it stopped.
#[derive(Debug, Default)]
pub struct SigilScanner {
    /// Unconsumed text; when not empty it starts with the `<` of an undecided tag.
    tail: String,
    /// The opening tag at the start of `tail`, once complete, and where its close search resumes.
    open: Option<(OpenTag, usize)>,
    sigils: Sigils,
    prose: ProseWindow,
    failed_reason: Option<ReasonCapture>,
    promise_reason: Option<ReasonCapture>,
}

impl SigilScanner {
    /// A scanner that has seen no text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of message text.
    pub fn push(&mut self, chunk: &str) {
        if self.tail.is_empty() {
            if let Some(keep) = self.scan(chunk, false) {
                self.tail.push_str(&chunk[keep..]);
            }
        } else {
            let mut text = std::mem::take(&mut self.tail);
            text.push_str(chunk);
            if let Some(keep) = self.scan(&text, false) {
                text.drain(..keep);
                self.tail = text;
            }
        }
    }

    /// The sigils found in all text pushed so far.
    pub fn finish(mut self) -> Sigils {
        let tail = std::mem::take(&mut self.tail);
        self.scan(&tail, true);
        self.sigils.task_failed_reason = self.failed_reason.and_then(|c| c.reason());
        self.sigils.promise_reason = self.promise_reason.and_then(|c| c.reason());
        self.sigils
    }

    /// Consumes `text`; returns where an undecided tag at its end starts, to be kept for the
    /// next push (never when `at_end`).
    fn scan(&mut self, text: &str, at_end: bool) -> Option<usize> {
        let mut pos = 0;
        while pos < text.len() {
            let rest = &text[pos..];
            if let Some((open, resume_at)) = self.open.take() {
                match tag::find_close(open.name, &rest[open.len..], resume_at) {
                    Close::Closed { body_end, end } => {
                        self.record(&open, &rest[open.len..open.len + body_end]);
                        pos += open.len + end;
                    }
                    Close::NeedMore { resume_at } if !at_end => {
                        self.open = Some((open, resume_at));
                        return Some(pos);
                    }
                    Close::Abandon | Close::NeedMore { .. } => {
                        self.on_prose("<");
                        pos += 1;
                    }
                }
                continue;
            }
            let Some(lt) = rest.find('<') else {
                self.on_prose(rest);
                return None;
            };
            self.on_prose(&rest[..lt]);
            pos += lt;
            match tag::parse_open(&text[pos..]) {
                Open::Tag(open) => self.open = Some((open, 0)),
                Open::NeedMore if !at_end => return Some(pos),
                Open::NotATag | Open::NeedMore => {
                    self.on_prose("<");
                    pos += 1;
                }
            }
        }
        None
    }

    fn on_prose(&mut self, prose: &str) {
        if prose.is_empty() {
            return;
        }
        if self.sigils.task_failed.is_none() || self.sigils.promise.is_none() {
            self.prose.push(prose);
        }
        for capture in [&mut self.failed_reason, &mut self.promise_reason]
            .into_iter()
            .flatten()
        {
            capture.push_after(prose);
        }
    }

    /// Records a complete sigil if its body is valid; an invalid one is ignored.
    fn record(&mut self, open: &OpenTag, body: &str) {
        let body = body.trim();
        let sigils = &mut self.sigils;
        match open.name {
            TagName::TaskDone if is_valid_task_id(body) => {
                sigils.task_done.get_or_insert_with(|| body.to_owned());
            }
            TagName::TaskFailed if is_valid_task_id(body) && sigils.task_failed.is_none() => {
                sigils.task_failed = Some(body.to_owned());
                self.failed_reason = Some(ReasonCapture::new(self.prose.recent()));
            }
            TagName::Promise if sigils.promise.is_none() => {
                sigils.promise = match body {
                    "COMPLETE" => Some(Promise::Complete),
                    "FAILURE" => {
                        self.promise_reason = Some(ReasonCapture::new(self.prose.recent()));
                        Some(Promise::Failure)
                    }
                    _ => None,
                };
            }
            TagName::NextModel if is_valid_model_name(body) => {
                sigils.next_model.get_or_insert_with(|| body.to_owned());
            }
            TagName::VerifyPass if is_valid_task_id(body) => {
                sigils
                    .verdict
                    .get_or_insert_with(|| Verdict::Pass(body.to_owned()));
            }
            TagName::VerifyFail if is_valid_task_id(body) => {
                sigils
                    .verdict
                    .get_or_insert_with(|| Verdict::Fail(body.to_owned()));
            }
            TagName::Journal if !body.is_empty() && !is_placeholder(body) => {
                sigils.journal.push(body.to_owned());
            }
            TagName::Knowledge => {
                if let Some(knowledge) = knowledge(&open.attributes, body) {
                    sigils.knowledge.push(knowledge);
                }
            }
            _ => {}
        }
    }
}

/// A `<knowledge>` entry from its attributes and body; `None` when empty or a placeholder.
fn knowledge(attributes: &[(String, String)], body: &str) -> Option<Knowledge> {
    let attribute = |name: &str| {
        attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.trim())
    };
    let title = attribute("title").unwrap_or_default();
    let tags = attribute("tags").unwrap_or_default();
    if body.is_empty() || [title, tags, body].into_iter().any(is_placeholder) {
        return None;
    }
    Some(Knowledge {
        tags: tags
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        title: title.to_owned(),
        body: body.to_owned(),
    })
}

#[cfg(test)]
mod tests;
