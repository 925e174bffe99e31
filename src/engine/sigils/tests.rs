//! One test per grammar or placement rule of the sigils (tests/sigils_corpus.rs holds the
//! adversarial table).

use super::*;
use crate::engine::testing::named_cases;

/// Parses a turn made of these messages.
fn turn(messages: &[&str]) -> Sigils {
    let mut scanner = SigilScanner::new();
    for message in messages {
        scanner.push(message);
        scanner.end_message();
    }
    scanner.finish()
}

fn chunked(text: &str, size: usize) -> Sigils {
    let mut scanner = SigilScanner::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(size) {
        scanner.push(&piece.iter().collect::<String>());
    }
    scanner.finish()
}

fn assert_done_verdict(text: &str, expected: Option<&str>) {
    assert_eq!(parse(text).task_done.as_deref(), expected, "{text:?}");
}

fn assert_no_sigils(text: &str) {
    assert!(parse(text).is_empty(), "{text:?}");
}

/// Asserts the done verdict of a turn made of `messages`.
fn assert_turn_verdict(messages: &[&str], expected: Option<&str>) {
    assert_eq!(
        turn(messages).task_done.as_deref(),
        expected,
        "{messages:?}"
    );
}

named_cases! { assert_done_verdict;
    task_done_names_the_task("<task-done>build-api</task-done>", Some("build-api"));
    whitespace_inside_tags_is_trimmed("<task-done>\n  a1 \t</task-done>", Some("a1"));
    unclosed_tag_is_ignored_and_later_tags_still_count
        ("I will write <task-done> at the end. <task-done>api</task-done>", Some("api"));
    invalid_id_does_not_take_the_first_place
        ("<task-done>{TASK_ID}</task-done>\n<task-done>api</task-done>", Some("api"));
    the_final_block_on_its_own_line_is_the_verdict
        ("Implemented and tested.\n\n<task-done>api</task-done>", Some("api"));
    whitespace_after_the_final_block_is_allowed
        ("Done.\n<task-done>api</task-done>  \n\t\n", Some("api"));
    a_verdict_followed_by_prose_gives_none
        ("<task-done>api</task-done>\nThen I will write the docs.", None);
    a_verdict_inside_a_sentence_gives_none("I will not write <task-done>api</task-done>", None);
    a_verdict_after_a_colon_gives_none("Options: <task-done>api</task-done>", None);
    a_verdict_after_closed_code_counts
        ("Ran `cargo test`:\n```\nok\n```\n<task-done>api</task-done>", Some("api"));
    a_backslash_escapes_a_tag("Done.\n\\<task-done>api</task-done>", None);
}

named_cases! { assert_no_sigils;
    attributes_on_other_sigils_make_them_invalid("<task-done id=\"x\">a</task-done>");
    longer_tag_names_are_not_sigils("<task-done-x>a</task-done-x><xtask-done>a</xtask-done>");
    tag_names_are_case_sensitive("<TASK-DONE>a</TASK-DONE>");
    stray_closing_tags_are_prose("</task-done> a </promise>");
    invalid_task_id_is_not_a_sigil("<task-done>Build_API</task-done><task-failed>-x</task-failed>");
    empty_text_has_no_sigils("");
}

named_cases! { assert_turn_verdict;
    a_verdict_followed_by_another_message_gives_none
        (&["<task-done>api</task-done>", "Now checking the docs."], None);
    only_the_last_message_gives_the_verdict
        (&["Let me check.", "All good.\n<task-done>api</task-done>"], Some("api"));
    an_empty_message_leaves_the_final_answer_alone
        (&["Done.\n<task-done>api</task-done>", " \n"], Some("api"));
    a_code_fence_left_open_ends_with_its_message
        (&["```\nunfinished", "<task-done>api</task-done>"], Some("api"));
}

#[test]
fn task_failed_names_the_task() {
    assert_eq!(
        parse("<task-failed>build-api</task-failed>")
            .task_failed
            .as_deref(),
        Some("build-api")
    );
}

#[test]
fn promise_complete_and_failure() {
    assert_eq!(
        parse("<promise>COMPLETE</promise>").promise,
        Some(Promise::Complete)
    );
    assert_eq!(
        parse("<promise>FAILURE</promise>").promise,
        Some(Promise::Failure)
    );
}

#[test]
fn promise_with_another_word_is_ignored() {
    assert_eq!(parse("<promise>DONE</promise>").promise, None);
}

#[test]
fn next_model_names_a_model() {
    let sigils = parse("<next-model>claude-opus-4.1</next-model>");
    assert_eq!(sigils.next_model.as_deref(), Some("claude-opus-4.1"));
}

#[test]
fn verify_pass_and_fail_are_verdicts() {
    assert_eq!(
        parse("<verify-pass>t1</verify-pass>").verdict,
        Some(Verdict::Pass("t1".into()))
    );
    assert_eq!(
        parse("<verify-fail>t1</verify-fail>").verdict,
        Some(Verdict::Fail("t1".into()))
    );
}

#[test]
fn journal_entries_are_kept_in_order() {
    let sigils = parse("<journal>first</journal> and <journal> second\n</journal>");
    assert_eq!(sigils.journal, ["first", "second"]);
}

#[test]
fn journal_may_contain_markup() {
    let sigils = parse("<journal>used <b>Vec<u8></b></journal>");
    assert_eq!(sigils.journal, ["used <b>Vec<u8></b>"]);
}

#[test]
fn knowledge_has_tags_title_and_body() {
    let sigils =
        parse("<knowledge tags=\"rust, kube ,\" title=\"Leases\">Renew before expiry.</knowledge>");
    let expected = Knowledge {
        tags: vec!["rust".into(), "kube".into()],
        title: "Leases".into(),
        body: "Renew before expiry.".into(),
    };
    assert_eq!(sigils.knowledge, [expected]);
}

#[test]
fn knowledge_attributes_in_any_order_and_either_quote() {
    let sigils = parse("<knowledge title='T' tags='a'>b</knowledge>");
    assert_eq!(sigils.knowledge[0].title, "T");
    assert_eq!(sigils.knowledge[0].tags, ["a"]);
}

#[test]
fn knowledge_without_a_body_is_ignored() {
    assert!(
        parse("<knowledge title=\"T\">  </knowledge>")
            .knowledge
            .is_empty()
    );
}

#[test]
fn first_occurrence_wins_for_single_valued_sigils() {
    let sigils = parse(
        "<task-done>a</task-done><task-done>b</task-done>\
         <promise>FAILURE</promise><promise>COMPLETE</promise>\
         <next-model>m1</next-model><next-model>m2</next-model>\
         <verify-fail>a</verify-fail><verify-pass>a</verify-pass>",
    );
    assert_eq!(sigils.task_done.as_deref(), Some("a"));
    assert_eq!(sigils.promise, Some(Promise::Failure));
    assert_eq!(sigils.next_model.as_deref(), Some("m1"));
    assert_eq!(sigils.verdict, Some(Verdict::Fail("a".into())));
}

#[test]
fn done_and_failed_are_both_recorded() {
    let sigils = parse("<task-failed>a</task-failed><task-done>a</task-done>");
    assert_eq!(
        (sigils.task_done.as_deref(), sigils.task_failed.as_deref()),
        (Some("a"), Some("a"))
    );
}

#[test]
fn unclosed_journal_does_not_hide_later_sigils() {
    let sigils = parse("<journal>notes without end\n<task-done>api</task-done>");
    assert_eq!(sigils.task_done.as_deref(), Some("api"));
    assert!(sigils.journal.is_empty());
}

#[test]
fn nested_journal_abandons_the_outer_one() {
    assert_eq!(parse("<journal>a <journal>b</journal>").journal, ["b"]);
}

#[test]
fn placeholders_never_parse() {
    let text = "<task-done>{TASK_ID}</task-done><task-failed>{TASK_ID}</task-failed>\
                <promise>{COMPLETE|FAILURE}</promise><next-model>{MODEL}</next-model>\
                <verify-pass>{TASK_ID}</verify-pass><journal>{NOTE}</journal>\
                <knowledge tags=\"{TAGS}\" title=\"{TITLE}\">{BODY}</knowledge>";
    assert!(parse(text).is_empty());
}

#[test]
fn task_ids_are_dns_labels() {
    assert!(is_valid_task_id("a"));
    assert!(is_valid_task_id("build-api-2"));
    assert!(is_valid_task_id(&"a".repeat(63)));
    for bad in ["", "-a", "a-", "A", "a_b", "a.b", "{TASK_ID}", "é"] {
        assert!(!is_valid_task_id(bad), "{bad:?} accepted");
    }
    assert!(!is_valid_task_id(&"a".repeat(64)));
}

#[test]
fn failure_promise_carries_the_agents_reason() {
    let text = "Tried everything.\n\nThe build needs a GPU that this pod lacks.\n<promise>FAILURE</promise>\n";
    let sigils = parse(text);
    assert_eq!(
        sigils.promise_reason.as_deref(),
        Some("The build needs a GPU that this pod lacks.")
    );
}

#[test]
fn task_failed_carries_the_agents_reason() {
    let sigils = parse("The upstream schema is missing.\n\n<task-failed>api</task-failed>");
    assert_eq!(
        sigils.task_failed_reason.as_deref(),
        Some("The upstream schema is missing.")
    );
}

#[test]
fn the_reason_may_come_from_an_earlier_message() {
    let sigils = turn(&["The schema is missing.", "<task-failed>api</task-failed>"]);
    assert_eq!(
        sigils.task_failed_reason.as_deref(),
        Some("The schema is missing.")
    );
}

#[test]
fn complete_promise_has_no_reason() {
    assert_eq!(
        parse("All done. <promise>COMPLETE</promise>").promise_reason,
        None
    );
}

#[test]
fn reason_leaves_out_other_sigils() {
    let sigils = parse("No network. <task-failed>api</task-failed> <promise>FAILURE</promise>");
    assert_eq!(sigils.promise_reason.as_deref(), Some("No network."));
}

#[test]
fn tags_split_across_chunks_are_found() {
    let text = "x <knowledge title=\"T\" tags=\"a\">body</knowledge> `code` é.\n\
                <task-done>api</task-done> <promise>FAILURE</promise>\n";
    let whole = parse(text);
    assert_eq!(whole.task_done.as_deref(), Some("api"));
    assert_eq!(whole.knowledge.len(), 1);
    for size in 1..12 {
        assert_eq!(chunked(text, size), whole, "chunk size {size}");
    }
}

#[test]
fn defused_text_has_no_sigils_and_keeps_other_markup() {
    let text = "<task-done>api</task-done> <b>bold</b> <journal>x</journal>";
    let defused = defuse(text);
    assert!(parse(&defused).is_empty());
    assert_eq!(
        defused,
        "&lt;task-done>api&lt;/task-done> <b>bold</b> &lt;journal>x&lt;/journal>"
    );
}

#[test]
fn the_final_block_may_follow_a_finished_sentence() {
    for text in [
        "All tests pass. <task-done>api</task-done>",
        "Done! <task-done>api</task-done>",
        "**Done.** <task-done>api</task-done>",
    ] {
        assert_eq!(parse(text).task_done.as_deref(), Some("api"), "{text:?}");
    }
}

#[test]
fn the_final_block_may_hold_several_sigils_in_any_order() {
    let sigils = parse(
        "Done.\n<journal>rewrote the parser</journal>\n<task-done>api</task-done>\n\
         <promise>COMPLETE</promise>\n<next-model>m1</next-model>",
    );
    assert_eq!(sigils.task_done.as_deref(), Some("api"));
    assert_eq!(sigils.promise, Some(Promise::Complete));
    assert_eq!(sigils.journal, ["rewrote the parser"]);
    assert_eq!(sigils.next_model.as_deref(), Some("m1"));
}

#[test]
fn a_verdict_in_code_or_a_quotation_gives_none() {
    for text in [
        "```\n<task-done>api</task-done>\n```\n",
        "~~~\n<task-done>api</task-done>\n",
        "`<task-done>api</task-done>`",
        "> <task-done>api</task-done>",
    ] {
        assert_eq!(parse(text).task_done, None, "{text:?}");
    }
}

#[test]
fn notes_count_anywhere_outside_code() {
    let sigils = parse(
        "<journal>first</journal> then prose <next-model>m1</next-model> and more.\n\
         `<journal>in code</journal>`\n> <journal>quoted</journal>\nBye.",
    );
    assert_eq!(sigils.journal, ["first"]);
    assert_eq!(sigils.next_model.as_deref(), Some("m1"));
}

#[test]
fn notes_from_every_message_are_kept() {
    let sigils = turn(&["<journal>a</journal>", "<journal>b</journal> Bye."]);
    assert_eq!(sigils.journal, ["a", "b"]);
}

#[test]
fn contains_sigil_finds_valid_sigils_anywhere() {
    assert!(contains_sigil("`x <task-done>api</task-done> y`"));
    assert!(contains_sigil("> <journal>n</journal>"));
    assert!(!contains_sigil(
        "<task-done>{TASK_ID}</task-done> &lt;task-done>api&lt;/task-done>"
    ));
}
