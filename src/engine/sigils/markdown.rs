//! Where the Markdown of a message hides text from the sigil reader: fenced code (` ``` ` and
//! `~~~`), inline code spans and quotation lines (`>`). A state machine over bytes, so a message
//! may arrive in chunks split anywhere; ordinary text ([`Mode::Text`]) is left to the caller.
//!
//! Simplified CommonMark: a fence is three or more backticks or tildes at the start of a line
//! (after any indentation) and ends at a line holding only a run of the same character at
//! least as long; a backtick fence whose line holds another backtick is an inline code span
//! instead. An inline code span ends at a run of as many backticks, or, when it has none, at
//! a blank line (CommonMark would make the backticks literal; reading that stretch as code
//! can only hide a sigil, never invent one). A quotation is a line starting with `>`.

/// Where in a message's Markdown the reader is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Ordinary text, inside a line: read for sigils by the caller.
    Text,
    /// At the start of a line; indentation is being skipped.
    LineStart,
    /// A run of `marker` (backtick or tilde) being counted; `at_line_start` when it opened the line.
    Run {
        marker: u8,
        len: usize,
        at_line_start: bool,
    },
    /// The rest of a line that opened with `len` backticks: a fence, unless another backtick
    /// follows on the line.
    FenceInfo { len: usize },
    /// Inside fenced code; `at_line_start` while a line's indentation is being skipped.
    Fence {
        marker: u8,
        len: usize,
        at_line_start: bool,
    },
    /// A run of the fence's marker at the start of a line inside fenced code.
    FenceRun { marker: u8, len: usize, run: usize },
    /// After a run long enough to close the fence: it does when only whitespace follows.
    FenceClose { marker: u8, len: usize },
    /// Inside an inline code span opened by `len` backticks.
    Code { len: usize },
    /// A run of backticks inside an inline code span.
    CodeRun { len: usize, run: usize },
    /// At the start of a line inside an inline code span (a blank line ends the span).
    CodeLineStart { len: usize },
    /// A quotation line.
    Quote,
}

impl Mode {
    /// Inside fenced code of `len` times `marker`.
    const fn fence(marker: u8, len: usize, at_line_start: bool) -> Mode {
        Mode::Fence {
            marker,
            len,
            at_line_start,
        }
    }

    /// Whether text read in this mode is code or quotation (never a sigil).
    pub(super) fn hides(self) -> bool {
        !matches!(self, Mode::Text | Mode::LineStart)
    }
}

/// Fences need at least this many markers.
const MIN_FENCE: usize = 3;

fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r')
}

/// Whether a line starting with `byte` may be anything but ordinary text (indentation, a blank
/// line, a fence or a quotation).
pub(super) fn may_open_line(byte: u8) -> bool {
    is_blank(byte) || matches!(byte, b'\n' | b'`' | b'~' | b'>')
}

/// How many times `marker` repeats at the start of `bytes`.
pub(super) fn run_length(bytes: &[u8], marker: u8) -> usize {
    bytes.iter().take_while(|b| **b == marker).count()
}

/// Reads on from `bytes[pos]` (`pos < bytes.len()`) in any mode but [`Mode::Text`]; returns the
/// next mode and position. Either the position advances or the mode changes to one that will
/// consume the byte at `pos`, so repeated calls always make progress.
pub(super) fn step(mode: Mode, bytes: &[u8], pos: usize) -> (Mode, usize) {
    let byte = bytes[pos];
    match mode {
        Mode::Text => (Mode::Text, pos),
        Mode::LineStart => line_start(byte, pos),
        Mode::Run {
            marker,
            len,
            at_line_start,
        } => run(marker, len, at_line_start, byte, pos),
        Mode::FenceInfo { len } => fence_info(len, bytes, pos),
        Mode::Fence {
            marker,
            len,
            at_line_start: false,
        } => match memchr::memchr(b'\n', &bytes[pos..]) {
            None => (mode, bytes.len()),
            Some(i) => (Mode::fence(marker, len, true), pos + i + 1),
        },
        Mode::Fence { marker, len, .. } => fence_line_start(marker, len, byte, pos),
        Mode::FenceRun { marker, len, run } => fence_run(marker, len, run, byte, pos),
        Mode::FenceClose { marker, len } => match byte {
            b'\n' => (Mode::LineStart, pos + 1),
            _ if is_blank(byte) => (mode, pos + 1),
            _ => (Mode::fence(marker, len, false), pos),
        },
        Mode::Code { len } => code(len, bytes, pos),
        Mode::CodeRun { len, run } => code_run(len, run, byte, pos),
        Mode::CodeLineStart { len } => match byte {
            b'\n' => (Mode::LineStart, pos + 1),
            _ if is_blank(byte) => (mode, pos + 1),
            _ => (Mode::Code { len }, pos),
        },
        Mode::Quote => match memchr::memchr(b'\n', &bytes[pos..]) {
            None => (mode, bytes.len()),
            Some(i) => (Mode::LineStart, pos + i + 1),
        },
    }
}

/// At the start of a line: indentation and blank lines are skipped; a run of backticks or
/// tildes may open a fence or a code span, `>` a quotation; anything else is text.
fn line_start(byte: u8, pos: usize) -> (Mode, usize) {
    match byte {
        b'\n' => (Mode::LineStart, pos + 1),
        _ if is_blank(byte) => (Mode::LineStart, pos + 1),
        b'`' | b'~' => (
            Mode::Run {
                marker: byte,
                len: 0,
                at_line_start: true,
            },
            pos,
        ),
        b'>' => (Mode::Quote, pos),
        _ => (Mode::Text, pos),
    }
}

/// A run of `marker` being counted; at its end, a fence (at a line start, long enough), a
/// code span (backticks) or text.
fn run(marker: u8, len: usize, at_line_start: bool, byte: u8, pos: usize) -> (Mode, usize) {
    if byte == marker {
        let run = Mode::Run {
            marker,
            len: len + 1,
            at_line_start,
        };
        return (run, pos + 1);
    }
    let fence = at_line_start && len >= MIN_FENCE;
    let next = match marker {
        b'`' if fence => Mode::FenceInfo { len },
        b'`' => Mode::Code { len },
        _ if fence => Mode::fence(marker, len, false),
        _ => Mode::Text,
    };
    (next, pos)
}

/// The rest of a line opened by `len` backticks: another backtick makes it a code span,
/// the line's end a fence.
fn fence_info(len: usize, bytes: &[u8], pos: usize) -> (Mode, usize) {
    match memchr::memchr2(b'`', b'\n', &bytes[pos..]) {
        None => (Mode::FenceInfo { len }, bytes.len()),
        Some(i) if bytes[pos + i] == b'`' => (Mode::CodeRun { len, run: 0 }, pos + i),
        Some(i) => (Mode::fence(b'`', len, true), pos + i + 1),
    }
}

/// At a line start inside fenced code: a run of the marker may close the fence.
fn fence_line_start(marker: u8, len: usize, byte: u8, pos: usize) -> (Mode, usize) {
    if byte == marker {
        (
            Mode::FenceRun {
                marker,
                len,
                run: 0,
            },
            pos,
        )
    } else if byte == b'\n' || is_blank(byte) {
        (Mode::fence(marker, len, true), pos + 1)
    } else {
        (Mode::fence(marker, len, false), pos)
    }
}

/// A run of the fence's marker at a line start inside fenced code: long enough, it may
/// close the fence.
fn fence_run(marker: u8, len: usize, run: usize, byte: u8, pos: usize) -> (Mode, usize) {
    if byte == marker {
        (
            Mode::FenceRun {
                marker,
                len,
                run: run + 1,
            },
            pos + 1,
        )
    } else if run >= len {
        (Mode::FenceClose { marker, len }, pos)
    } else {
        (Mode::fence(marker, len, false), pos)
    }
}

/// Inside a code span opened by `len` backticks: a run of as many closes it, a line's end
/// may (a blank line follows).
fn code(len: usize, bytes: &[u8], pos: usize) -> (Mode, usize) {
    match memchr::memchr2(b'`', b'\n', &bytes[pos..]) {
        None => (Mode::Code { len }, bytes.len()),
        Some(i) if bytes[pos + i] == b'`' => {
            let end = pos + i + run_length(&bytes[pos + i..], b'`');
            let run = end - pos - i;
            match bytes.get(end) {
                None => (Mode::CodeRun { len, run }, end),
                Some(_) if run == len => (Mode::Text, end),
                Some(_) => (Mode::Code { len }, end),
            }
        }
        Some(i) => (Mode::CodeLineStart { len }, pos + i + 1),
    }
}

/// A run of backticks inside a code span (continued from an earlier chunk).
fn code_run(len: usize, run: usize, byte: u8, pos: usize) -> (Mode, usize) {
    if byte == b'`' {
        (Mode::CodeRun { len, run: run + 1 }, pos + 1)
    } else if run == len {
        (Mode::Text, pos)
    } else {
        (Mode::Code { len }, pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::named_cases;

    /// Runs `text` through the machine from a line start and returns, per byte, whether it was
    /// hidden (`#`) or left to the caller as text (`.`). Text-mode bytes are skipped one by one,
    /// with a newline returning to a line start, as the caller does.
    fn hidden(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut marks = vec![b'?'; bytes.len()];
        let (mut mode, mut pos) = (Mode::LineStart, 0);
        while pos < bytes.len() {
            let (next, next_pos) = if mode == Mode::Text {
                let next = if bytes[pos] == b'\n' {
                    Mode::LineStart
                } else if bytes[pos] == b'`' {
                    Mode::Run {
                        marker: b'`',
                        len: 0,
                        at_line_start: false,
                    }
                } else {
                    Mode::Text
                };
                if next == Mode::Text || next == Mode::LineStart {
                    (next, pos + 1)
                } else {
                    (next, pos)
                }
            } else {
                step(mode, bytes, pos)
            };
            for mark in &mut marks[pos..next_pos] {
                *mark = if mode.hides() { b'#' } else { b'.' };
            }
            (mode, pos) = (next, next_pos);
        }
        String::from_utf8(marks).unwrap_or_default()
    }

    fn assert_hidden(text: &str, marks: &str) {
        assert_eq!(hidden(text), marks, "{text:?}");
    }

    named_cases! { assert_hidden;
        inline_code_is_hidden_up_to_its_matching_run("a `b` c", "..###..");
        inline_code_ends_at_a_run_as_long_as_its_opening("a ``b`c`` d", "..#######..");
        unmatched_backticks_hide_text_up_to_a_blank_line("a `b\nc\n\nd", "..######.");
        backtick_fence_hides_up_to_its_closing_line("```rust\nx\n```\ny", "##############.");
        closing_fence_needs_as_many_markers_and_nothing_else
            ("````\n```\n```` x\n````\ny", "#####################.");
        tilde_fence_may_hold_backticks("~~~\n`\n~~~\ny", "##########.");
        backticks_on_a_fence_line_make_it_inline_code("```x``` y", "#######..");
        indented_fences_count("  ```\nx\n  ```\ny", "..############.");
        quotation_lines_are_hidden("a\n  > b\nc", "....####.");
        a_greater_than_sign_inside_a_line_is_text("a > b", ".....");
        two_tildes_open_no_fence("~~x\ny", "##...");
    }
}
