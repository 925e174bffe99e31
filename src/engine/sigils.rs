//! Completion sigils: the tags an agent writes to say what it did
//! (`<task-done>ID</task-done>`, `<promise>COMPLETE</promise>`, ...).
//!
//! Where a sigil counts (docs/sigils.md states the rule for users):
//! - Verdicts (`task-done`, `task-failed`, `promise`, `verify-pass`, `verify-fail`) come only
//!   from the agent's final answer: the block of sigils that ends the last message of the turn,
//!   with nothing but whitespace and other sigils after it. The block must start a line or
//!   follow the end of a sentence (`.`, `!`, `?`), so a sigil inside a sentence
//!   ("I will not write <task-done>a</task-done>") is not an answer.
//! - Notes (`journal`, `knowledge`, `next-model`) count anywhere in the turn's messages.
//! - Neither counts inside code (fences, inline code) or a quotation line (`>`), nor after a
//!   backslash (`\<task-done>`); `&lt;task-done>` is not a tag at all.
//!
//! Grammar: whole tags only (`<task-done-x>` is not a sigil), whitespace inside tags trimmed,
//! the first occurrence wins for single-valued sigils, malformed or unclosed tags are read as
//! prose. IDs must be valid task names ([`is_valid_task_id`]), and a body that is a
//! `{PLACEHOLDER}` never counts, so a prompt that shows the sigils with placeholders cannot
//! complete anything when an agent echoes it.

mod markdown;
mod reason;
mod tag;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use markdown::Mode;
use reason::ProseWindow;
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

/// The sigils of one prompt turn: verdicts from its final answer, notes from all its messages
/// (first occurrence wins for the single-valued ones).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sigils {
    /// `<task-done>ID</task-done>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_done: Option<String>,
    /// `<task-failed>ID</task-failed>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_failed: Option<String>,
    /// The agent's reason given with `<task-failed>` (the prose before the final block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_failed_reason: Option<String>,
    /// `<promise>COMPLETE|FAILURE</promise>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise: Option<Promise>,
    /// The agent's reason given with `<promise>FAILURE</promise>` (the prose before the final
    /// block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise_reason: Option<String>,
    /// `<next-model>NAME</next-model>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_model: Option<String>,
    /// `<verify-pass>ID</verify-pass>` or `<verify-fail>ID</verify-fail>`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The verifier's reason given with `<verify-fail>` (the prose before the final block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_fail_reason: Option<String>,
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

/// Parses the sigils of a turn made of one complete message.
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

/// One sigil with a valid body.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sigil {
    TaskDone(String),
    TaskFailed(String),
    Promise(Promise),
    Verify(Verdict),
    NextModel(String),
    Journal(String),
    Knowledge(Knowledge),
}

impl Sigil {
    /// Reads a complete tag; `None` when its body is not valid for it.
    fn read(open: &OpenTag, body: &str) -> Option<Self> {
        let body = body.trim();
        let id = || is_valid_task_id(body).then(|| body.to_owned());
        match open.name {
            TagName::TaskDone => id().map(Self::TaskDone),
            TagName::TaskFailed => id().map(Self::TaskFailed),
            TagName::Promise => match body {
                "COMPLETE" => Some(Self::Promise(Promise::Complete)),
                "FAILURE" => Some(Self::Promise(Promise::Failure)),
                _ => None,
            },
            TagName::VerifyPass => id().map(|id| Self::Verify(Verdict::Pass(id))),
            TagName::VerifyFail => id().map(|id| Self::Verify(Verdict::Fail(id))),
            TagName::NextModel => {
                is_valid_model_name(body).then(|| Self::NextModel(body.to_owned()))
            }
            TagName::Journal => {
                (!body.is_empty() && !is_placeholder(body)).then(|| Self::Journal(body.to_owned()))
            }
            TagName::Knowledge => knowledge(&open.attributes, body).map(Self::Knowledge),
        }
    }
}

/// The verdicts of one sigil block (the first of each kind).
#[derive(Clone, Debug, Default)]
struct Verdicts {
    task_done: Option<String>,
    task_failed: Option<String>,
    promise: Option<Promise>,
    verify: Option<Verdict>,
}

/// How the current line reads so far: whether a sigil here may start the final block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum LineEnd {
    /// Nothing but whitespace and sigils since the line started.
    #[default]
    Blank,
    /// The last prose on the line ends a sentence.
    Sentence,
    /// Anything else: a sigil here would be part of a sentence, code or a quotation.
    Other,
}

impl LineEnd {
    /// After prose that ends with a non-whitespace character (emphasis markers ignored).
    fn after(prose: &str) -> Self {
        match prose.trim_end_matches(['*', '_']).chars().next_back() {
            Some('.' | '!' | '?' | '…' | '。' | '！' | '？') => Self::Sentence,
            _ => Self::Other,
        }
    }

    fn may_start_block(self) -> bool {
        self != Self::Other
    }
}

/// Incremental sigil reader for the agent messages of one prompt turn, which arrive in chunks
/// split anywhere.
///
/// Feed each message with [`push`](Self::push), call [`end_message`](Self::end_message) when
/// the message ends (another kind of update arrived), and [`finish`](Self::finish) at the end
/// of the turn. Each byte is examined a bounded number of times: only an unfinished tag is kept
/// between pushes, and the search for its closing tag resumes where it stopped.
#[derive(Debug)]
pub struct SigilScanner {
    /// Unconsumed text; when not empty it starts with the `<` of an undecided tag.
    tail: String,
    /// The opening tag at the start of `tail`, once complete, and where its close search resumes.
    open: Option<(OpenTag, usize)>,
    /// Where in the message's Markdown the reader is.
    mode: Mode,
    line_end: LineEnd,
    /// The last byte read before `tail` (a backslash escapes a following `<` or backtick).
    last_byte: u8,
    /// Whether the current message holds anything but whitespace.
    message_has_text: bool,
    /// The verdicts of the sigil block at the current end of the message.
    block: Verdicts,
    /// The block that ended the last message with text: the turn's final answer so far.
    final_block: Verdicts,
    /// Notes (journal, knowledge, next model) from every message.
    notes: Sigils,
    prose: ProseWindow,
}

impl Default for SigilScanner {
    fn default() -> Self {
        Self {
            tail: String::new(),
            open: None,
            mode: Mode::LineStart,
            line_end: LineEnd::Blank,
            last_byte: b'\n',
            message_has_text: false,
            block: Verdicts::default(),
            final_block: Verdicts::default(),
            notes: Sigils::default(),
            prose: ProseWindow::default(),
        }
    }
}

impl SigilScanner {
    /// A scanner that has seen no text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of the current message's text.
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

    /// Ends the current message: the next push starts a new one. A message with text replaces
    /// the turn's final answer; an empty one changes nothing.
    pub fn end_message(&mut self) {
        let tail = std::mem::take(&mut self.tail);
        self.scan(&tail, true);
        if self.message_has_text {
            self.final_block = std::mem::take(&mut self.block);
            self.prose.push("\n\n");
        }
        self.block = Verdicts::default();
        self.mode = Mode::LineStart;
        self.line_end = LineEnd::Blank;
        self.last_byte = b'\n';
        self.message_has_text = false;
    }

    /// The sigils of the turn: verdicts from the block that ends its last message, notes from
    /// all of them.
    pub fn finish(mut self) -> Sigils {
        self.end_message();
        let Verdicts {
            task_done,
            task_failed,
            promise,
            verify,
        } = self.final_block;
        let reason = reason::reason_before(self.prose.recent());
        Sigils {
            task_failed_reason: task_failed.is_some().then(|| reason.clone()).flatten(),
            verify_fail_reason: matches!(verify, Some(Verdict::Fail(_)))
                .then(|| reason.clone())
                .flatten(),
            promise_reason: (promise == Some(Promise::Failure))
                .then_some(reason)
                .flatten(),
            task_done,
            task_failed,
            promise,
            verdict: verify,
            ..self.notes
        }
    }

    /// Consumes `text`; returns where an undecided tag at its end starts, to be kept for the
    /// next push (never when `at_end`). Text is handed on in runs, not byte by byte.
    fn scan(&mut self, text: &str, at_end: bool) -> Option<usize> {
        let bytes = text.as_bytes();
        // `text[..handed]` has been handed on.
        let (mut pos, mut handed) = (0, 0);
        while pos < bytes.len() {
            if self.open.is_some()
                && let Some((open, resume_at)) = self.open.take()
            {
                let body = &text[pos + open.len..];
                match tag::find_close(open.name, body, resume_at) {
                    Close::Closed { body_end, end } => {
                        let tag_end = pos + open.len + end;
                        match Sigil::read(&open, &body[..body_end]) {
                            Some(sigil) => self.on_sigil(sigil),
                            None => self.on_text(&text[pos..tag_end], false),
                        }
                        (pos, handed) = (tag_end, tag_end);
                    }
                    Close::NeedMore { resume_at } if !at_end => {
                        self.open = Some((open, resume_at));
                        return Some(pos);
                    }
                    Close::Abandon | Close::NeedMore { .. } => pos += 1,
                }
                continue;
            }
            if self.mode != Mode::Text {
                let (mode, next) = markdown::step(self.mode, bytes, pos);
                if mode.hides() != self.mode.hides() {
                    self.on_text(&text[handed..next], self.mode.hides());
                    handed = next;
                }
                (self.mode, pos) = (mode, next);
                continue;
            }
            let Some(offset) = memchr::memchr3(b'<', b'`', b'\n', &bytes[pos..]) else {
                break;
            };
            pos += offset;
            let escaped = self.escaped(bytes, pos);
            match bytes[pos] {
                b'\n' => {
                    pos += 1;
                    // a line starting with ordinary text stays in text (the common case)
                    if bytes.get(pos).is_none_or(|b| markdown::may_open_line(*b)) {
                        self.mode = Mode::LineStart;
                    }
                }
                _ if escaped => pos += 1,
                b'`' => {
                    self.on_text(&text[handed..pos], false);
                    handed = pos;
                    (self.mode, pos) = code_opened(bytes, pos);
                }
                _ => match tag::parse_open(&text[pos..]) {
                    Open::Tag(open) => {
                        self.on_text(&text[handed..pos], false);
                        handed = pos;
                        self.open = Some((open, 0));
                    }
                    Open::NeedMore if !at_end => {
                        self.on_text(&text[handed..pos], false);
                        return Some(pos);
                    }
                    Open::NotATag | Open::NeedMore => pos += 1,
                },
            }
        }
        self.on_text(&text[handed..], self.mode.hides());
        None
    }

    /// Whether the byte at `pos` follows a backslash (in this chunk or at the end of the last).
    fn escaped(&self, bytes: &[u8], pos: usize) -> bool {
        match pos.checked_sub(1) {
            Some(before) => bytes[before] == b'\\',
            None => self.last_byte == b'\\',
        }
    }

    /// Takes in text that is not a sigil; `hidden` when it is code or a quotation.
    fn on_text(&mut self, text: &str, hidden: bool) {
        let bytes = text.as_bytes();
        let Some(&last) = bytes.last() else {
            return;
        };
        self.prose.push(text);
        self.last_byte = last;
        match bytes.iter().rposition(|b| !b.is_ascii_whitespace()) {
            None => {
                if memchr::memchr(b'\n', bytes).is_some() {
                    self.line_end = LineEnd::Blank;
                }
            }
            Some(end) => {
                self.message_has_text = true;
                self.block = Verdicts::default();
                self.line_end = if memchr::memchr(b'\n', &bytes[end..]).is_some() {
                    LineEnd::Blank
                } else if hidden {
                    LineEnd::Other
                } else {
                    LineEnd::after(&text[..=end])
                };
            }
        }
    }

    /// Takes in a sigil read as ordinary text (not code or quotation).
    fn on_sigil(&mut self, sigil: Sigil) {
        self.message_has_text = true;
        self.last_byte = b'>';
        let may_start_block = self.line_end.may_start_block();
        let (notes, block) = (&mut self.notes, &mut self.block);
        match sigil {
            Sigil::NextModel(model) => {
                notes.next_model.get_or_insert(model);
            }
            Sigil::Journal(note) => notes.journal.push(note),
            Sigil::Knowledge(knowledge) => notes.knowledge.push(knowledge),
            _ if !may_start_block => {}
            Sigil::TaskDone(id) => {
                block.task_done.get_or_insert(id);
            }
            Sigil::TaskFailed(id) => {
                block.task_failed.get_or_insert(id);
            }
            Sigil::Promise(promise) => {
                block.promise.get_or_insert(promise);
            }
            Sigil::Verify(verdict) => {
                block.verify.get_or_insert(verdict);
            }
        }
    }
}

/// Whether `text` holds a valid sigil anywhere, whatever its place or the Markdown around it:
/// the check for text shown to an agent, which must hold none.
pub fn contains_sigil(text: &str) -> bool {
    memchr::memchr_iter(b'<', text.as_bytes()).any(|lt| {
        let Open::Tag(open) = tag::parse_open(&text[lt..]) else {
            return false;
        };
        let body = &text[lt + open.len..];
        match tag::find_close(open.name, body, 0) {
            Close::Closed { body_end, .. } => Sigil::read(&open, &body[..body_end]).is_some(),
            Close::Abandon | Close::NeedMore { .. } => false,
        }
    })
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

/// The mode after a run of backticks that starts at `pos` in text, and where reading goes
/// on: a code span of that many backticks, or a run still being counted when it reaches the
/// end of the chunk.
fn code_opened(bytes: &[u8], pos: usize) -> (Mode, usize) {
    let run = markdown::run_length(&bytes[pos..], b'`');
    if pos + run < bytes.len() {
        (Mode::Code { len: run }, pos + run)
    } else {
        (
            Mode::Run {
                marker: b'`',
                len: 0,
                at_line_start: false,
            },
            pos,
        )
    }
}

#[cfg(test)]
mod tests;
