//! The agent's reason next to a `<task-failed>` or `<promise>FAILURE</promise>` tag: the prose
//! of the tag's paragraph, else the paragraph before it, else the one after it.

/// Prose kept on each side of a tag to find its reason (bytes).
pub(super) const CONTEXT_BYTES: usize = 4096;
/// Longest reason (characters).
pub const MAX_REASON_CHARS: usize = 500;

/// The most recent prose (text outside sigils), at least its last [`CONTEXT_BYTES`].
#[derive(Debug, Default)]
pub(super) struct ProseWindow {
    text: String,
}

impl ProseWindow {
    pub fn push(&mut self, prose: &str) {
        if prose.len() >= CONTEXT_BYTES {
            self.text.clear();
            self.text.push_str(suffix(prose, CONTEXT_BYTES));
        } else {
            self.text.push_str(prose);
            if self.text.len() > 2 * CONTEXT_BYTES {
                let keep_from = self.text.len() - suffix(&self.text, CONTEXT_BYTES).len();
                self.text.drain(..keep_from);
            }
        }
    }

    /// The last [`CONTEXT_BYTES`] of prose (fewer when less was seen).
    pub fn recent(&self) -> &str {
        suffix(&self.text, CONTEXT_BYTES)
    }
}

/// The prose around one tag, collected as it arrives.
#[derive(Debug)]
pub(super) struct ReasonCapture {
    before: String,
    after: String,
}

impl ReasonCapture {
    pub fn new(before: &str) -> Self {
        Self {
            before: before.to_owned(),
            after: String::new(),
        }
    }

    /// Adds prose that follows the tag, up to [`CONTEXT_BYTES`].
    pub fn push_after(&mut self, prose: &str) {
        let room = CONTEXT_BYTES - self.after.len();
        if room > 0 {
            self.after.push_str(prefix(prose, room));
        }
    }

    /// The reason, when there is any prose near the tag.
    pub fn reason(&self) -> Option<String> {
        reason_from(&self.before, &self.after)
    }
}

/// The reason given prose before and after the tag.
fn reason_from(before: &str, after: &str) -> Option<String> {
    let (earlier, same_before) = split_last_paragraph(before);
    let (same_after, later) = split_first_paragraph(after);
    let (same_before, same_after) = (collapse(same_before), collapse(same_after));
    if !same_before.is_empty() || !same_after.is_empty() {
        return Some(join_bounded(&same_before, &same_after));
    }
    let previous = last_paragraph(earlier);
    if !previous.is_empty() {
        return Some(join_bounded(&previous, ""));
    }
    let next = first_paragraph(later);
    (!next.is_empty()).then(|| join_bounded("", &next))
}

/// The last non-blank paragraph of `text`, collapsed.
fn last_paragraph(mut text: &str) -> String {
    loop {
        let (earlier, last) = split_last_paragraph(text);
        let last = collapse(last);
        if !last.is_empty() || earlier.is_empty() {
            return last;
        }
        text = earlier;
    }
}

/// The first non-blank paragraph of `text`, collapsed.
fn first_paragraph(mut text: &str) -> String {
    loop {
        let (first, later) = split_first_paragraph(text);
        let first = collapse(first);
        if !first.is_empty() || later.is_empty() {
            return first;
        }
        text = later;
    }
}

/// Splits at the last paragraph break (a whitespace-only line): (before it, after it).
fn split_last_paragraph(text: &str) -> (&str, &str) {
    let mut end = text.len();
    while let Some(newline) = text[..end].rfind('\n') {
        if let Some(previous) = text[..newline].rfind('\n')
            && text[previous + 1..newline].trim().is_empty()
        {
            return (&text[..previous], &text[newline + 1..]);
        }
        end = newline;
    }
    ("", text)
}

/// Splits at the first paragraph break: (before it, after it).
fn split_first_paragraph(text: &str) -> (&str, &str) {
    let mut start = 0;
    while let Some(offset) = text[start..].find('\n') {
        let newline = start + offset;
        if let Some(next) = text[newline + 1..].find('\n')
            && text[newline + 1..newline + 1 + next].trim().is_empty()
        {
            return (&text[..newline], &text[newline + 1 + next + 1..]);
        }
        start = newline + 1;
    }
    (text, "")
}

/// Joins the text before and after the tag, keeping at most [`MAX_REASON_CHARS`] characters
/// nearest to the tag.
fn join_bounded(before: &str, after: &str) -> String {
    let (before_chars, after_chars) = (before.chars().count(), after.chars().count());
    let half = MAX_REASON_CHARS / 2;
    let keep_before = before_chars.min(half.max(MAX_REASON_CHARS.saturating_sub(after_chars)));
    let keep_after = after_chars.min(MAX_REASON_CHARS - keep_before);
    let mut reason = String::new();
    if keep_before < before_chars {
        reason.push('…');
    }
    reason.extend(before.chars().skip(before_chars - keep_before));
    if keep_before > 0 && keep_after > 0 {
        reason.push(' ');
    }
    reason.extend(after.chars().take(keep_after));
    if keep_after < after_chars {
        reason.push('…');
    }
    reason
}

/// Whitespace runs become one space; trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The last at most `max` bytes of `text`, starting on a character boundary.
fn suffix(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first at most `max` bytes of `text`, ending on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_is_the_tags_own_paragraph_on_both_sides() {
        let reason = reason_from(
            "Intro.\n\nI cannot build it:",
            " the SDK is missing.\n\nBye.",
        );
        assert_eq!(
            reason.as_deref(),
            Some("I cannot build it: the SDK is missing.")
        );
    }

    #[test]
    fn tag_alone_in_its_paragraph_takes_the_paragraph_before() {
        let reason = reason_from(
            "Context.\n\nThe API key is revoked.\n  \n",
            "\n\nNext steps.",
        );
        assert_eq!(reason.as_deref(), Some("The API key is revoked."));
    }

    #[test]
    fn tag_at_the_start_takes_the_paragraph_after() {
        let reason = reason_from("", "\n\n\nNo compiler in the image.\n\nMore.");
        assert_eq!(reason.as_deref(), Some("No compiler in the image."));
    }

    #[test]
    fn no_prose_means_no_reason() {
        assert_eq!(reason_from(" \n\n ", "\n"), None);
    }

    #[test]
    fn long_reasons_keep_the_text_nearest_the_tag() {
        let before = format!("{}END", "a".repeat(1000));
        let reason = reason_from(&before, "").unwrap_or_default();
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
        assert!(reason.starts_with('…') && reason.ends_with("aEND"));
    }

    #[test]
    fn prose_window_keeps_the_recent_text_on_a_char_boundary() {
        let mut window = ProseWindow::default();
        window.push(&"é".repeat(CONTEXT_BYTES));
        window.push("tail");
        assert!(window.recent().ends_with("éétail"));
        assert!(window.recent().len() <= CONTEXT_BYTES);
    }
}
