//! The adversarial corpus: texts agents really write around sigils (negations, quotations,
//! code, restated options, escaped tags, placeholders, echoes of the prompt, ...). None of them
//! may give a verdict, and a final answer must give exactly its own; however the text is cut
//! into chunks, the result is the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::sigil_scan;

use ralph::engine::prompt::{self, FeatureText, PromptInput, TaskText};
use ralph::engine::sigils::{Promise, Sigils, Verdict};
use sigil_scan::scan;

const TASK: &str = "build-api";

/// The verdict sigils of a turn (notes left out).
#[derive(Debug, Default, PartialEq, Eq)]
struct Verdicts {
    done: Option<String>,
    failed: Option<String>,
    promise: Option<Promise>,
    verify: Option<Verdict>,
}

impl Verdicts {
    fn of(sigils: &Sigils) -> Self {
        Self {
            done: sigils.task_done.clone(),
            failed: sigils.task_failed.clone(),
            promise: sigils.promise,
            verify: sigils.verdict.clone(),
        }
    }

    fn done() -> Self {
        Self {
            done: Some(TASK.into()),
            ..Self::default()
        }
    }

    fn failed() -> Self {
        Self {
            failed: Some(TASK.into()),
            ..Self::default()
        }
    }

    fn promise(promise: Promise) -> Self {
        Self {
            promise: Some(promise),
            ..Self::default()
        }
    }
}

fn whole(messages: &[&str]) -> Sigils {
    let messages: Vec<Vec<&str>> = messages.iter().map(|m| vec![*m]).collect();
    scan(&messages)
}

/// Every way of cutting the turn that the chunking test tries: each message cut in two at
/// every character boundary (the others whole), and every message cut into single characters.
fn chunkings<'a>(messages: &[&'a str]) -> Vec<Vec<Vec<&'a str>>> {
    let whole: Vec<Vec<&str>> = messages.iter().map(|m| vec![*m]).collect();
    let mut cuts = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        for (at, _) in message.char_indices().skip(1) {
            let mut cut = whole.clone();
            cut[index] = vec![&message[..at], &message[at..]];
            cuts.push(cut);
        }
    }
    cuts.push(
        messages
            .iter()
            .map(|m| {
                m.char_indices()
                    .map(|(at, c)| &m[at..at + c.len_utf8()])
                    .collect()
            })
            .collect(),
    );
    cuts
}

/// The prompt an agent gets for the task, as it would echo it.
fn echoed_prompt() -> String {
    prompt::render(&PromptInput {
        task: TaskText {
            id: TASK.into(),
            title: "Build the API".into(),
            description: "When done, print <task-done>build-api</task-done>.".into(),
        },
        feature: FeatureText {
            name: "hello".into(),
            spec: Some("Say <promise>COMPLETE</promise> at the end.".into()),
            plan: None,
        },
        max_retries: 3,
        ..PromptInput::default()
    })
}

/// Texts that must give no verdict, each a turn of one or more messages.
fn adversarial() -> Vec<(&'static str, Vec<String>)> {
    let one = |name, text: &str| (name, vec![text.to_owned()]);
    let prompt = echoed_prompt();
    vec![
        // negation and intent
        one(
            "negation",
            "I will not write <task-done>build-api</task-done> yet.",
        ),
        one(
            "negation ending the message",
            "I am not going to write <task-done>build-api</task-done>",
        ),
        one(
            "negation in inline code",
            "I will not write `<task-done>build-api</task-done>` yet",
        ),
        one(
            "future",
            "Once the tests pass I will reply with <task-done>build-api</task-done>",
        ),
        one(
            "conditional",
            "If it had worked I would say <task-done>build-api</task-done>, but it did not.",
        ),
        one(
            "not yet, on its own line",
            "Not yet:\n<task-done>build-api</task-done> is for when the tests pass.",
        ),
        one(
            "paraphrased instruction",
            "I must end my reply with <task-done>build-api</task-done> on its own line once the work is complete.",
        ),
        one(
            "labelled",
            "The sigil for success is: <task-done>build-api</task-done>",
        ),
        // quotation
        one(
            "quotation line",
            "The task says:\n> End with <task-done>build-api</task-done>\n",
        ),
        one("quotation line alone", "> <task-done>build-api</task-done>"),
        one(
            "indented quotation",
            "As asked:\n   > <task-done>build-api</task-done>",
        ),
        one(
            "double quotes",
            "The rule is \"<task-done>build-api</task-done>\"",
        ),
        one(
            "open double quote",
            "He wrote \"<task-done>build-api</task-done>",
        ),
        one("single quotes", "'<task-done>build-api</task-done>'"),
        one(
            "typographic quotes",
            "The rule is “<task-done>build-api</task-done>”",
        ),
        // code
        one(
            "code fence",
            "Example:\n```\n<task-done>build-api</task-done>\n```",
        ),
        one(
            "code fence with info string",
            "```xml\n<task-done>build-api</task-done>\n```\n",
        ),
        one(
            "code fence left open",
            "```\n<task-done>build-api</task-done>",
        ),
        one("tilde fence", "~~~\n<task-done>build-api</task-done>\n~~~"),
        one(
            "tilde fence holding backticks",
            "~~~md\n```\n~~~\n<task-done>build-api</task-done>\n~~~\n",
        ),
        one(
            "indented fence in a list",
            "1. Write:\n   ```\n   <task-done>build-api</task-done>\n   ```",
        ),
        one(
            "longer fence holding a shorter one",
            "````\n```\n<task-done>build-api</task-done>\n````",
        ),
        one(
            "fence closed by a longer run",
            "```\n<task-done>build-api</task-done>\n`````\n",
        ),
        one(
            "fence line that is inline code",
            "```<task-done>build-api</task-done>```",
        ),
        one(
            "inline code",
            "Reply `<task-done>build-api</task-done>` when done.",
        ),
        one(
            "inline code ending the message",
            "The sigil is `<task-done>build-api</task-done>`",
        ),
        one(
            "double-backtick code",
            "``<task-done>build-api</task-done>``",
        ),
        one(
            "inline code left open",
            "Use `<task-done>build-api</task-done>",
        ),
        one(
            "inline code across lines",
            "Use `the tag\n<task-done>build-api</task-done>`",
        ),
        one(
            "closing backticks after the tag",
            "`x`\n<task-done>build-api</task-done>`",
        ),
        // restated options and rules
        one(
            "restated options in code",
            "Options are `<task-done>build-api</task-done>` if complete or `<task-failed>build-api</task-failed>` if not. I could not finish",
        ),
        one(
            "restated options",
            "Options are <task-done>build-api</task-done> if complete or <task-failed>build-api</task-failed> if not. I could not finish.",
        ),
        one(
            "options as a list",
            "I can answer:\n- <task-done>build-api</task-done> if complete\n- <task-failed>build-api</task-failed> if not\n\nI am still working.",
        ),
        one(
            "rule in code",
            "I should write `<promise>FAILURE</promise>` only when the whole feature cannot succeed.",
        ),
        one(
            "rule in prose",
            "Write <promise>FAILURE</promise> only when nothing can succeed.",
        ),
        one(
            "rule ending the message",
            "Nothing here calls for <promise>FAILURE</promise>",
        ),
        one(
            "complete promise in a sentence",
            "I cannot yet say <promise>COMPLETE</promise>",
        ),
        // escaped and malformed tags
        one(
            "HTML entities",
            "Done.\n&lt;task-done&gt;build-api&lt;/task-done&gt;",
        ),
        one(
            "entity for the opener",
            "Done.\n&lt;task-done>build-api</task-done>",
        ),
        one(
            "backslash escapes",
            "Done.\n\\<task-done>build-api\\</task-done>",
        ),
        one(
            "backslash before the opener",
            "Done.\n\\<task-done>build-api</task-done>",
        ),
        one(
            "escaped closer",
            "Done.\n<task-done>build-api&lt;/task-done>",
        ),
        one("unclosed", "Done.\n<task-done>build-api"),
        one(
            "mismatched closer",
            "Done.\n<task-done>build-api</task-failed>",
        ),
        one("upper case", "Done.\n<TASK-DONE>build-api</TASK-DONE>"),
        one(
            "longer tag name",
            "Done.\n<task-done-now>build-api</task-done-now>",
        ),
        one(
            "attribute",
            "Done.\n<task-done id=\"build-api\">build-api</task-done>",
        ),
        one("HTML comment", "<!-- <task-done>build-api</task-done> -->"),
        // placeholders
        one(
            "braced placeholder",
            "Done.\n<task-done>{TASK_ID}</task-done>",
        ),
        one("bare placeholder", "Done.\n<task-done>TASK_ID</task-done>"),
        one("short placeholder", "Done.\n<task-done>ID</task-done>"),
        one("angle placeholder", "Done.\n<task-done><id></task-done>"),
        one(
            "promise placeholder",
            "Done.\n<promise>{COMPLETE}</promise>",
        ),
        one(
            "promise alternatives",
            "Done.\n<promise>COMPLETE|FAILURE</promise>",
        ),
        one("lower-case promise", "Done.\n<promise>complete</promise>"),
        // echoes of the prompt
        ("echoed prompt", vec![prompt.clone()]),
        (
            "echoed prompt, then prose",
            vec![format!("{prompt}\nI will start with the schema.")],
        ),
        (
            "echoed prompt as a quotation",
            vec![prompt.lines().map(|l| format!("> {l}\n")).collect()],
        ),
        (
            "echoed prompt in a fence",
            vec![format!("```\n{prompt}\n```")],
        ),
        // more prose after the sigil
        one(
            "prose after",
            "<task-done>build-api</task-done>\nNext I will refactor.",
        ),
        one(
            "punctuation after",
            "Done.\n<task-done>build-api</task-done>.",
        ),
        one("parentheses", "Done.\n(<task-done>build-api</task-done>)"),
        one("bold", "Done.\n**<task-done>build-api</task-done>**"),
        one("heading", "## <task-done>build-api</task-done>"),
        one("list item", "- <task-done>build-api</task-done>"),
        one(
            "table cell",
            "| status | <task-done>build-api</task-done> |",
        ),
        one("JSON", "{\"status\": \"<task-done>build-api</task-done>\"}"),
        one(
            "markup after",
            "Done.\n<task-done>build-api</task-done><br>",
        ),
        one(
            "placeholder after",
            "Done.\n<task-done>build-api</task-done>\n<journal>{NOTE}</journal>",
        ),
        one(
            "unclosed tag after",
            "Done.\n<task-done>build-api</task-done>\n<journal>and then",
        ),
        one(
            "inside a journal",
            "<journal>I wrote <task-done>build-api</task-done> too early</journal>",
        ),
        // messages
        (
            "a later message with prose",
            vec![
                "Done.\n<task-done>build-api</task-done>".into(),
                "Wait, the tests fail. Let me fix them.".into(),
            ],
        ),
        (
            "a later message in code",
            vec![
                "Done.\n<task-done>build-api</task-done>".into(),
                "```\nlog\n```".into(),
            ],
        ),
        // done and failed together are reported as both (the policy gives no verdict)
    ]
}

/// Final answers and the verdict each must give.
fn final_answers() -> Vec<(&'static str, Vec<String>, Verdicts)> {
    let one = |name, text: &str, verdicts| (name, vec![text.to_owned()], verdicts);
    vec![
        one("alone", "<task-done>build-api</task-done>", Verdicts::done()),
        one("own line after prose", "All done.\n\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after a sentence", "Tests pass. <task-done>build-api</task-done>", Verdicts::done()),
        one("after an exclamation", "Finished! <task-done>build-api</task-done>", Verdicts::done()),
        one("trailing whitespace", "Done.\n<task-done>build-api</task-done>\n\n  \t\n", Verdicts::done()),
        one("whitespace inside the tag", "Done.\n<task-done>  build-api \n</task-done>", Verdicts::done()),
        one("CRLF", "Done.\r\n<task-done>build-api</task-done>\r\n", Verdicts::done()),
        one("indented", "Done.\n    <task-done>build-api</task-done>", Verdicts::done()),
        one("after closed code", "Output:\n```\n$ cargo test\nok\n```\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after inline code", "Ran `cargo test`.\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after a quotation", "> the spec\n\nMet.\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after an unmatched backtick's paragraph", "Use ` with care.\n\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after an example in code", "The format is `<task-done>ID</task-done>`.\n<task-done>build-api</task-done>", Verdicts::done()),
        one("after a placeholder on its line", "<task-done>{TASK_ID}</task-done>\n<task-done>build-api</task-done>", Verdicts::done()),
        one("failed with its reason", "The schema is missing.\n<task-failed>build-api</task-failed>", Verdicts::failed()),
        one("failure promise", "The repository is archived.\n<promise>FAILURE</promise>", Verdicts::promise(Promise::Failure)),
        (
            "block of several",
            vec!["Done.\n<journal>wrote the API</journal>\n<task-done>build-api</task-done>\n<promise>COMPLETE</promise>\n".into()],
            Verdicts { promise: Some(Promise::Complete), ..Verdicts::done() },
        ),
        (
            "block on one line",
            vec!["Done. <task-done>build-api</task-done> <promise>COMPLETE</promise>".into()],
            Verdicts { promise: Some(Promise::Complete), ..Verdicts::done() },
        ),
        (
            "done and failed together",
            vec!["Hmm.\n<task-done>build-api</task-done>\n<task-failed>build-api</task-failed>".into()],
            Verdicts { failed: Some(TASK.into()), ..Verdicts::done() },
        ),
        one("verifier pass", "Checked.\n<verify-pass>build-api</verify-pass>", Verdicts { verify: Some(Verdict::Pass(TASK.into())), ..Verdicts::default() }),
        (
            "last of several messages",
            vec![
                "Let me run the tests.".into(),
                "I will not write <task-done>build-api</task-done> yet.".into(),
                "All green.\n<task-done>build-api</task-done>".into(),
            ],
            Verdicts::done(),
        ),
        (
            "answer alone in the last message",
            vec!["The build works.".into(), "<task-done>build-api</task-done>".into()],
            Verdicts::done(),
        ),
        (
            "echoed prompt, then the answer",
            vec![format!("{}\nDone.\n<task-done>build-api</task-done>", echoed_prompt())],
            Verdicts::done(),
        ),
    ]
}

fn refs(messages: &[String]) -> Vec<&str> {
    messages.iter().map(String::as_str).collect()
}

#[test]
fn adversarial_texts_give_no_verdict() {
    let false_verdicts: Vec<String> = adversarial()
        .into_iter()
        .filter_map(|(name, messages)| {
            let verdicts = Verdicts::of(&whole(&refs(&messages)));
            (verdicts != Verdicts::default()).then(|| format!("{name}: {verdicts:?}"))
        })
        .collect();
    assert!(
        false_verdicts.is_empty(),
        "false verdicts: {false_verdicts:#?}"
    );
}

#[test]
fn final_answers_give_their_verdict() {
    let wrong: Vec<String> = final_answers()
        .into_iter()
        .filter_map(|(name, messages, expected)| {
            let verdicts = Verdicts::of(&whole(&refs(&messages)));
            (verdicts != expected).then(|| format!("{name}: {verdicts:?}, expected {expected:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "wrong verdicts: {wrong:#?}");
}

#[test]
fn chunking_never_changes_the_result() {
    let turns = adversarial().into_iter().chain(
        final_answers()
            .into_iter()
            .map(|(name, messages, _)| (name, messages)),
    );
    for (name, messages) in turns {
        let messages = refs(&messages);
        let expected = whole(&messages);
        for chunks in chunkings(&messages) {
            assert_eq!(scan(&chunks), expected, "{name}: cut as {chunks:?}");
        }
    }
}

#[test]
fn a_failed_verdict_carries_the_reason_before_the_block() {
    let sigils =
        whole(&["I tried twice.\n\nThe schema is missing.\n<task-failed>build-api</task-failed>"]);
    assert_eq!(
        sigils.task_failed_reason.as_deref(),
        Some("The schema is missing.")
    );
}
