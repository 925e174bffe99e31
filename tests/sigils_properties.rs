//! Properties of the sigil parser: it never panics, and the way text is chunked never changes
//! what it finds.

use proptest::prelude::*;
use ralph::engine::sigils::{self, SigilScanner, Sigils};

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
    " ",
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
    fn a_valid_sigil_is_found_amid_arbitrary_prose(
        before in "[^<]{0,64}",
        after in "\\PC{0,64}",
        id in "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?",
    ) {
        let text = format!("{before}<task-done> {id} </task-done>{after}");
        prop_assert_eq!(sigils::parse(&text).task_done, Some(id));
    }
}
