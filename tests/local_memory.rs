//! The journal and knowledge in `ralph run`: the real binary, the real runner and the
//! scripted ACP agent; what one attempt writes down reaches the prompts of the next attempts
//! and of the tasks that build on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, TaskDef, assert_mentions, feature_yaml, one_task_feature, task};

fn with_tags<'a>(name: &'a str, depends_on: &'a [&'a str], extra: &'a str) -> TaskDef<'a> {
    TaskDef {
        extra,
        ..task(name, depends_on)
    }
}

/// A script line for an answer: `text` then a final sigil block.
fn answer(text: &str, verdict: &str) -> String {
    format!("[ {{text: \"{text}\\n\\n<task-{verdict}>{{task}}</task-{verdict}>\"}} ]")
}

#[test]
fn the_journal_of_a_failed_attempt_reaches_the_retry() {
    let manifest = one_task_feature("retry", "", "only");
    let script = format!(
        "tasks:\n  only:\n    - {}\n    - {}\n",
        answer(
            "<journal>tried sqlx; the migrations are broken</journal> The tests fail.",
            "failed"
        ),
        answer("Done.", "done")
    );
    let project = Project::run_ok(&manifest, &script);
    let prompt = project.prompt("only-a2");
    assert_mentions(
        &prompt,
        &[
            "## Journal",
            "- Attempt 1: failed; took",
            "Note: tried sqlx; the migrations are broken",
        ],
    );
}

/// The prompt of the first attempt of `second`, after its blocker `first` answered
/// `first_attempt` (an attempt of the script) and every other attempt was done.
fn dependent_prompt(feature: &str, first_attempt: &str) -> String {
    let manifest = feature_yaml(
        feature,
        "",
        &[task("first", &[]), task("second", &["first"])],
    );
    let script = format!("{DONE_DEFAULT}tasks:\n  first:\n    - {first_attempt}\n");
    Project::run_ok(&manifest, &script).prompt("second-a1")
}

#[test]
fn a_blockers_journal_reaches_its_dependent() {
    let first = answer("<journal>Created docs/api.md</journal> Did it.", "done");
    let prompt = dependent_prompt("blocked", &first);
    assert_mentions(
        &prompt,
        &["- first, attempt 1: done;", "Note: Created docs/api.md"],
    );
}

#[test]
fn a_dependent_prompt_says_what_its_done_blockers_wrote_in_their_journal() {
    let first = "text: \"<journal>Created docs/api.md</journal> <task-done>{task}</task-done>\"";
    let prompt = dependent_prompt("journaled", first);
    assert_mentions(&prompt, &["Created docs/api.md"]);
}

#[test]
fn the_journal_budget_keeps_the_newest_entries() {
    let manifest = one_task_feature("budget", "  memory:\n    journalPromptChars: 170\n", "only");
    let script = format!(
        "tasks:\n  only:\n    - {}\n    - {}\n    - {}\n",
        answer("<journal>first note</journal> No.", "failed"),
        answer("<journal>second note</journal> No.", "failed"),
        answer("Done.", "done")
    );
    let project = Project::run_ok(&manifest, &script);
    let prompt = project.prompt("only-a3");
    assert_mentions(&prompt, &["second note"]);
    assert!(!prompt.contains("first note"), "{prompt}");
}

const DONE_DEFAULT: &str = "default:\n  - text: \"Did it. <task-done>{task}</task-done>\"\n";

fn lesson(title: &str, tags: &str, body: &str) -> String {
    answer(
        &format!("<knowledge tags=\\\"{tags}\\\" title=\\\"{title}\\\">{body}</knowledge> Did it."),
        "done",
    )
}

#[test]
fn knowledge_reaches_the_tasks_whose_tags_match() {
    let manifest = feature_yaml(
        "tagged",
        "",
        &[
            task("a", &[]),
            with_tags("b", &["a"], "      tags: [db]\n"),
            with_tags("c", &["b"], "      tags: [ui]\n"),
        ],
    );
    let script = format!(
        "{DONE_DEFAULT}tasks:\n  a:\n    - {}\n",
        lesson("Migrations", "DB", "Run sqlx migrate before the tests.")
    );
    let project = Project::run_ok(&manifest, &script);
    let b = project.prompt("b-a1");
    assert_mentions(
        &b,
        &["### Migrations (db)", "Run sqlx migrate before the tests."],
    );
    let c = project.prompt("c-a1");
    assert!(!c.contains("sqlx migrate"), "{c}");
    let listed = project.ralph(&["knowledge"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_mentions(&listed, &["Migrations [db] (from a-a1)"]);
}

#[test]
fn a_later_knowledge_entry_with_the_same_title_replaces_the_earlier_one() {
    let manifest = feature_yaml(
        "replaced",
        "",
        &[
            with_tags("a", &[], "      tags: [db]\n"),
            with_tags("b", &["a"], "      tags: [db]\n"),
            with_tags("c", &["b"], "      tags: [db]\n"),
        ],
    );
    let script = format!(
        "{DONE_DEFAULT}tasks:\n  a:\n    - {}\n  b:\n    - {}\n",
        lesson("Database", "db", "use sqlite"),
        lesson("database", "db", "use postgres")
    );
    let project = Project::run_ok(&manifest, &script);
    let c = project.prompt("c-a1");
    assert!(
        c.contains("use postgres") && !c.contains("use sqlite"),
        "{c}"
    );
    assert_eq!(
        project.store().learned_knowledge().map(|k| k.len()).ok(),
        Some(1)
    );
}

#[test]
fn seeded_knowledge_reaches_the_tasks_whose_name_matches() {
    let manifest = feature_yaml(
        "seeded",
        "  memory:\n    knowledge:\n      - title: Framework\n        tags: [api]\n        \
         body: Use axum 0.8.\n      - title: Frontend\n        tags: [ui]\n        body: Use htmx.\n",
        &[task("build-api", &[])],
    );
    let project = Project::run_ok(&manifest, DONE_DEFAULT);
    let prompt = project.prompt("build-api-a1");
    assert_mentions(&prompt, &["Use axum 0.8."]);
    assert!(!prompt.contains("Use htmx."), "{prompt}");
}

#[test]
fn seeded_knowledge_from_a_configmap_is_refused_locally_naming_the_field() {
    let manifest = one_task_feature(
        "remote",
        "  memory:\n    knowledgeFrom:\n      name: lessons\n      key: lessons.yaml\n",
        "only",
    );
    let project = Project::new(&manifest, DONE_DEFAULT);
    let output = project.run_exiting(&[], 3);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_mentions(&stderr, &["spec.memory.knowledgeFrom"]);
}

#[test]
fn ralph_journal_finds_entries_by_the_words_of_their_notes() {
    let manifest = feature_yaml("searched", "", &[task("a", &[]), task("b", &[])]);
    let script = format!(
        "{DONE_DEFAULT}tasks:\n  a:\n    - {}\n",
        answer(
            "<journal>the migrations need created_at</journal> Did it.",
            "done"
        )
    );
    let project = Project::run_ok(&manifest, &script);
    let found = project.ralph(&["journal", "--search", "migrations"]);
    let found = String::from_utf8_lossy(&found.stdout);
    assert_mentions(
        &found,
        &["a-a1  done", "note: the migrations need created_at"],
    );
    assert!(!found.contains("b-a1"), "{found}");
}

#[test]
fn the_journal_writes_a_cost_as_status_does() {
    let script = "default:\n  - usage: {input_tokens: 10, output_tokens: 5, cost_usd: 0.001}\n  \
                  - text: \"Did it. <task-done>{task}</task-done>\"\n";
    let project = Project::run_ok(&feature_yaml("priced", "", &[task("a", &[])]), script);
    let journal = project.ralph_ok(&["journal"]);
    let journal = String::from_utf8_lossy(&journal.stdout);
    assert_mentions(&journal, &["15 tokens, $0.001"]);
    assert!(!journal.contains("$0.0010"), "{journal}");
}
