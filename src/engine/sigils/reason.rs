//! The agent's reason for a `<task-failed>` or `<promise>FAILURE</promise>` verdict: the last
//! paragraph of prose before the final sigil block.

/// Prose kept before the final block to find its reason (bytes).
pub(super) const CONTEXT_BYTES: usize = 4096;
/// Longest reason (characters).
pub const MAX_REASON_CHARS: usize = 500;

/// The most recent prose (text outside sigils), at least its last [`CONTEXT_BYTES`].
#[derive(Debug, Default)]
pub(super) struct ProseWindow {
    text: String,
}

impl ProseWindow {
    pub(super) fn push(&mut self, prose: &str) {
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
    pub(super) fn recent(&self) -> &str {
        suffix(&self.text, CONTEXT_BYTES)
    }
}

/// The reason given in `before`, the prose that precedes the final block: its last non-blank
/// paragraph, whitespace collapsed, at most [`MAX_REASON_CHARS`] (the end kept).
pub(super) fn reason_before(before: &str) -> Option<String> {
    let paragraph = last_paragraph(before);
    if paragraph.is_empty() {
        return None;
    }
    let chars = paragraph.chars().count();
    if chars <= MAX_REASON_CHARS {
        return Some(paragraph);
    }
    let mut reason = String::from("…");
    reason.extend(paragraph.chars().skip(chars - MAX_REASON_CHARS));
    Some(reason)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_is_the_paragraph_the_block_ends() {
        let reason = reason_before("Intro.\n\nI cannot build it:\nthe SDK is missing. ");
        assert_eq!(
            reason.as_deref(),
            Some("I cannot build it: the SDK is missing.")
        );
    }

    #[test]
    fn a_block_on_its_own_takes_the_paragraph_before() {
        let reason = reason_before("Context.\n\nThe API key is revoked.\n  \n\n");
        assert_eq!(reason.as_deref(), Some("The API key is revoked."));
    }

    #[test]
    fn no_prose_means_no_reason() {
        assert_eq!(reason_before(" \n\n "), None);
    }

    #[test]
    fn long_reasons_keep_their_end() {
        let before = format!("{}END", "a".repeat(1000));
        let reason = reason_before(&before).unwrap_or_default();
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
