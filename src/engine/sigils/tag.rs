//! Recognising sigil tags: the opening tag (with `knowledge` attributes) and the search for
//! its closing tag. Every function works on a prefix of the text and says when it needs more.

/// Longest opening tag, attributes included (bytes); a longer one is not a sigil.
const MAX_OPEN_TAG: usize = 1024;
/// Longest body of an ID-valued sigil (`task-done`, `promise`, ...), whitespace included.
const MAX_ID_BODY: usize = 256;
/// Longest body of a text sigil (`journal`, `knowledge`).
const MAX_TEXT_BODY: usize = 64 * 1024;

/// The sigil tag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TagName {
    TaskDone,
    TaskFailed,
    Promise,
    NextModel,
    VerifyPass,
    VerifyFail,
    Journal,
    Knowledge,
}

impl TagName {
    pub(super) const ALL: [Self; 8] = [
        Self::TaskDone,
        Self::TaskFailed,
        Self::Promise,
        Self::NextModel,
        Self::VerifyPass,
        Self::VerifyFail,
        Self::Journal,
        Self::Knowledge,
    ];

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "task-done" => Self::TaskDone,
            "task-failed" => Self::TaskFailed,
            "promise" => Self::Promise,
            "next-model" => Self::NextModel,
            "verify-pass" => Self::VerifyPass,
            "verify-fail" => Self::VerifyFail,
            "journal" => Self::Journal,
            "knowledge" => Self::Knowledge,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::TaskDone => "task-done",
            Self::TaskFailed => "task-failed",
            Self::Promise => "promise",
            Self::NextModel => "next-model",
            Self::VerifyPass => "verify-pass",
            Self::VerifyFail => "verify-fail",
            Self::Journal => "journal",
            Self::Knowledge => "knowledge",
        }
    }

    fn closing(self) -> &'static str {
        match self {
            Self::TaskDone => "</task-done>",
            Self::TaskFailed => "</task-failed>",
            Self::Promise => "</promise>",
            Self::NextModel => "</next-model>",
            Self::VerifyPass => "</verify-pass>",
            Self::VerifyFail => "</verify-fail>",
            Self::Journal => "</journal>",
            Self::Knowledge => "</knowledge>",
        }
    }

    /// Text sigils may contain markup; ID sigils may not contain any `<`.
    fn has_text_body(self) -> bool {
        matches!(self, Self::Journal | Self::Knowledge)
    }

    fn max_body(self) -> usize {
        if self.has_text_body() {
            MAX_TEXT_BODY
        } else {
            MAX_ID_BODY
        }
    }

    fn accepts_attributes(self) -> bool {
        self == Self::Knowledge
    }
}

/// A complete opening tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OpenTag {
    pub name: TagName,
    /// Attribute names and values, in order.
    pub attributes: Vec<(String, String)>,
    /// Length of the opening tag in bytes (the body starts here).
    pub len: usize,
}

/// What the text at a `<` is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Open {
    Tag(OpenTag),
    NotATag,
    NeedMore,
}

/// Reads the opening tag at the start of `text` (which starts with `<`).
pub(super) fn parse_open(text: &str) -> Open {
    let window = &text.as_bytes()[..text.len().min(MAX_OPEN_TAG)];
    let at_end = |i: usize| {
        if i >= text.len() {
            Open::NeedMore
        } else {
            Open::NotATag
        }
    };
    let name_end = 1 + window[1..]
        .iter()
        .take_while(|b| b.is_ascii_lowercase() || **b == b'-')
        .count();
    if name_end >= window.len() {
        let partial = &text[1..name_end];
        return if TagName::ALL
            .iter()
            .any(|tag| tag.name().starts_with(partial))
        {
            at_end(name_end)
        } else {
            Open::NotATag
        };
    }
    let Some(name) = TagName::from_name(&text[1..name_end]) else {
        return Open::NotATag;
    };
    let mut attributes = Vec::new();
    let mut i = name_end;
    loop {
        let spaces = window[i..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        let had_space = spaces > 0;
        i += spaces;
        match window.get(i) {
            None => return at_end(i),
            Some(b'>') => {
                return Open::Tag(OpenTag {
                    name,
                    attributes,
                    len: i + 1,
                });
            }
            Some(_) if !had_space || !name.accepts_attributes() => return Open::NotATag,
            Some(_) => match parse_attribute(window, i) {
                Attribute::Parsed {
                    name: key,
                    value,
                    end,
                } => {
                    attributes.push((text[key].to_owned(), text[value].to_owned()));
                    i = end;
                }
                Attribute::Invalid => return Open::NotATag,
                Attribute::Truncated => return at_end(window.len()),
            },
        }
    }
}

enum Attribute {
    Parsed {
        name: std::ops::Range<usize>,
        value: std::ops::Range<usize>,
        end: usize,
    },
    Invalid,
    Truncated,
}

/// Reads `name = "value"` (or single quotes) starting at `start`.
fn parse_attribute(bytes: &[u8], start: usize) -> Attribute {
    let name_len = bytes[start..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_')
        .count();
    if name_len == 0 {
        return if start >= bytes.len() {
            Attribute::Truncated
        } else {
            Attribute::Invalid
        };
    }
    let mut i = start + name_len;
    i += bytes[i..]
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    match bytes.get(i) {
        None => return Attribute::Truncated,
        Some(b'=') => i += 1,
        Some(_) => return Attribute::Invalid,
    }
    i += bytes[i..]
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    let quote = match bytes.get(i) {
        None => return Attribute::Truncated,
        Some(q @ (b'"' | b'\'')) => *q,
        Some(_) => return Attribute::Invalid,
    };
    let value_start = i + 1;
    match bytes[value_start..].iter().position(|b| *b == quote) {
        None => Attribute::Truncated,
        Some(len) => Attribute::Parsed {
            name: start..start + name_len,
            value: value_start..value_start + len,
            end: value_start + len + 1,
        },
    }
}

/// Where the body of an open tag ends.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Close {
    /// The body is `body[..body_end]`; the closing tag ends at `end`.
    Closed { body_end: usize, end: usize },
    /// Not a sigil after all (a `<` in an ID, a nested opening tag, a body too long).
    Abandon,
    /// No verdict yet; resume the search at `resume_at` when more text arrives.
    NeedMore { resume_at: usize },
}

/// Searches `body` (the text after the opening tag) for the closing tag, from `from`.
pub(super) fn find_close(name: TagName, body: &str, from: usize) -> Close {
    let closing = name.closing();
    let mut i = from;
    let verdict = loop {
        let Some(offset) = body[i..].find('<') else {
            break Close::NeedMore {
                resume_at: body.len(),
            };
        };
        let lt = i + offset;
        let rest = &body[lt..];
        if rest.starts_with(closing) {
            break Close::Closed {
                body_end: lt,
                end: lt + closing.len(),
            };
        }
        if closing.starts_with(rest) {
            break Close::NeedMore { resume_at: lt };
        }
        if !name.has_text_body() {
            break Close::Abandon;
        }
        match nested_open(name, rest) {
            Some(true) => break Close::Abandon,
            Some(false) => i = lt + 1,
            None => break Close::NeedMore { resume_at: lt },
        }
    };
    match verdict {
        Close::Closed { body_end, .. } if body_end > name.max_body() => Close::Abandon,
        Close::NeedMore { resume_at } if resume_at > name.max_body() => Close::Abandon,
        verdict => verdict,
    }
}

/// Whether `rest` starts with another opening tag of the same name (`None`: cannot tell yet).
fn nested_open(name: TagName, rest: &str) -> Option<bool> {
    let after_lt = &rest[1..];
    let tag = name.name();
    if after_lt.len() < tag.len() {
        return if tag.starts_with(after_lt) {
            None
        } else {
            Some(false)
        };
    }
    if !after_lt.starts_with(tag) {
        return Some(false);
    }
    after_lt
        .as_bytes()
        .get(tag.len())
        .map(|b| *b == b'>' || b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(name: TagName, attributes: &[(&str, &str)], len: usize) -> Open {
        let attributes = attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Open::Tag(OpenTag {
            name,
            attributes,
            len,
        })
    }

    #[test]
    fn opening_tag_is_recognised_by_its_exact_name() {
        assert_eq!(parse_open("<task-done>x"), tag(TagName::TaskDone, &[], 11));
        assert_eq!(parse_open("<task-done-x>"), Open::NotATag);
        assert_eq!(parse_open("<Task-done>"), Open::NotATag);
    }

    #[test]
    fn opening_tag_cut_short_needs_more_text() {
        assert_eq!(parse_open("<task-do"), Open::NeedMore);
        assert_eq!(parse_open("<knowledge title=\"a"), Open::NeedMore);
    }

    #[test]
    fn only_knowledge_takes_attributes() {
        assert_eq!(parse_open("<journal a=\"b\">"), Open::NotATag);
        assert_eq!(
            parse_open("<knowledge  title = 'T' tags=\"a>b\">"),
            tag(TagName::Knowledge, &[("title", "T"), ("tags", "a>b")], 35)
        );
    }

    #[test]
    fn overlong_opening_tag_is_not_a_tag() {
        let long = format!("<knowledge title=\"{}", "x".repeat(MAX_OPEN_TAG));
        assert_eq!(parse_open(&long), Open::NotATag);
    }

    #[test]
    fn id_body_ends_at_its_closing_tag() {
        assert_eq!(
            find_close(TagName::TaskDone, "a</task-done>", 0),
            Close::Closed {
                body_end: 1,
                end: 13
            }
        );
    }

    #[test]
    fn id_body_with_other_markup_is_abandoned() {
        assert_eq!(find_close(TagName::TaskDone, "a<b>", 0), Close::Abandon);
    }

    #[test]
    fn partial_closing_tag_needs_more_text() {
        assert_eq!(
            find_close(TagName::Promise, "X</prom", 0),
            Close::NeedMore { resume_at: 1 }
        );
    }

    #[test]
    fn text_body_may_hold_markup_but_not_its_own_opening_tag() {
        assert_eq!(
            find_close(TagName::Journal, "a <b> c</journal>", 0),
            Close::Closed {
                body_end: 7,
                end: 17
            }
        );
        assert_eq!(
            find_close(TagName::Journal, "a <journal>b</journal>", 0),
            Close::Abandon
        );
    }
}
