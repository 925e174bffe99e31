//! Properties of the sigil parser: it never panics, the way text is chunked never changes
//! what it finds, and a verdict comes only from a sigil block that ends the last message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::sigil_scan;

use proptest::prelude::*;
use ralph::engine::sigils::{self, Promise, SigilScanner, Sigils};
use sigil_scan::scan;

/// Pieces of sigil markup, valid and broken, to build text that exercises the parser.
const FRAGMENTS: &[&str] = &[
    "<task-done>",
    "</task-done>",
    "<task-failed>",
    "</task-failed>",
    "<promise>",
    "</promise>",
    "COMPLETE",
    "FAILURE",
    "<next-model>",
    "</next-model>",
    "<verify-pass>",
    "</verify-fail>",
    "<journal>",
    "</journal>",
    "<knowledge title=\"t\" tags='a,b'>",
    "<knowledge title=\"",
    "</knowledge>",
    "build-api",
    "{TASK_ID}",
    "<",
    ">",
    "</",
    "\n\n",
    "\n",
    " ",
    "`",
    "``",
    "```",
    "\n```\n",
    "~~~",
    "\n> ",
    "\\",
    "Done. ",
    "é",
    "日本",
    "text",
];

fn markup_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(FRAGMENTS).prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

/// Splits `text` at the given fractions of its length (moved to char boundaries).
fn split_at_fractions<'a>(text: &'a str, fractions: &[f64]) -> Vec<&'a str> {
    let mut cuts: Vec<usize> = fractions
        .iter()
        .map(|f| {
            let mut cut = (text.len() as f64 * f) as usize;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            cut
        })
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(&text[start..cut]);
        start = cut;
    }
    pieces.push(&text[start..]);
    pieces
}

/// A final sigil block (with the whitespace around it) and the task ID it names.
fn final_block() -> impl Strategy<Value = (String, String)> {
    let id = "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?";
    (id, "[ \t\n]{0,3}", "[ \t]{0,3}", "[ \t\n]{0,3}").prop_map(|(id, before, inside, after)| {
        let block = format!(
            "{before}<journal>note</journal>\n<task-done>{inside}{id}{inside}</task-done>{after}"
        );
        (block, id)
    })
}

/// The verdict sigils of a parse (notes left out).
fn verdicts(sigils: &Sigils) -> (Option<&str>, Option<&str>, Option<Promise>) {
    (
        sigils.task_done.as_deref(),
        sigils.task_failed.as_deref(),
        sigils.promise,
    )
}

/// `text` with every code fence opener (three backticks or tildes) broken up.
fn without_fences(mut text: String) -> String {
    while text.contains("```") || text.contains("~~~") {
        text = text.replace("```", "``").replace("~~~", "~~");
    }
    text
}

fn parse_chunks(chunks: &[&str]) -> Sigils {
    let mut scanner = SigilScanner::new();
    for chunk in chunks {
        scanner.push(chunk);
    }
    scanner.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsing_arbitrary_text_never_panics(text in "\\PC*") {
        let _ = sigils::parse(&text);
    }

    #[test]
    fn parsing_arbitrary_chunks_never_panics(chunks in proptest::collection::vec("\\PC{0,16}", 0..32)) {
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let _ = parse_chunks(&chunks);
    }

    #[test]
    fn chunked_text_parses_like_whole_text(
        text in markup_text(),
        fractions in proptest::collection::vec(0.0f64..=1.0, 0..12),
    ) {
        let chunks = split_at_fractions(&text, &fractions);
        prop_assert_eq!(parse_chunks(&chunks), sigils::parse(&text));
    }

    #[test]
    fn byte_sized_chunks_parse_like_whole_text(text in markup_text()) {
        let chunks: Vec<String> = text.chars().map(String::from).collect();
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        prop_assert_eq!(parse_chunks(&chunks), sigils::parse(&text));
    }

    #[test]
    fn any_text_then_a_final_block_gives_exactly_its_verdict(
        // an unclosed fence would hide the block; fences are the one thing the text may not open
        text in markup_text().prop_map(without_fences),
        (block, id) in final_block(),
    ) {
        let sigils = sigils::parse(&format!("{text}\n\n{block}"));
        prop_assert_eq!(verdicts(&sigils), (Some(id.as_str()), None, None));
    }

    #[test]
    fn a_sigil_followed_by_prose_gives_no_verdict(
        text in markup_text(),
        (block, _) in final_block(),
        prose in "[^<]{0,20}",
    ) {
        prop_assume!(prose.chars().any(|c| !c.is_ascii_whitespace()));
        let sigils = sigils::parse(&format!("{text}\n\n{block}{prose}"));
        prop_assert_eq!(verdicts(&sigils), (None, None, None));
    }

    #[test]
    fn chunking_a_turn_of_several_messages_never_changes_the_result(
        messages in proptest::collection::vec(
            (markup_text(), proptest::collection::vec(0.0f64..=1.0, 0..6)),
            1..4,
        ),
    ) {
        let whole: Vec<Vec<&str>> = messages.iter().map(|(m, _)| vec![m.as_str()]).collect();
        let chunked: Vec<Vec<&str>> = messages
            .iter()
            .map(|(m, fractions)| split_at_fractions(m, fractions))
            .collect();
        prop_assert_eq!(scan(&chunked), scan(&whole));
    }
}
