//! The local journal and knowledge, as closing attempts records them.

use super::*;
use crate::engine::attempt::{OutcomeClass, Tokens, Usage};
use crate::engine::sigils::Knowledge;
use crate::local::store::{EndDetails, Transition};
use crate::local::testing::{self, task as spec};

fn store_with(names: &[&str]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::open(dir.path()).expect("open");
    let tasks = names.iter().map(|n| spec(n, &[])).collect();
    store.sync(&testing::feature(tasks), 0).expect("sync");
    (dir, store)
}

fn result(task: &str, sigils: Sigils) -> String {
    let result = AttemptResult {
        exit_code: Some(0),
        sigils,
        ..AttemptResult::new(task, None, OutcomeClass::Finished)
    };
    serde_json::to_string(&result).expect("json")
}

/// Starts and ends an attempt of `task` at `at` with `outcome`, the agent having written `sigils`.
fn attempt(store: &mut Store, task: &str, at: i64, outcome: &str, sigils: Sigils) -> String {
    let row = store.start_attempt(task, at, 60_000).expect("start");
    let close = AttemptClose {
        id: row.id.clone(),
        ended_at_ms: at + 2_000,
        outcome: outcome.into(),
        details: EndDetails {
            stop_reason: Some("end_turn".into()),
            usage: Usage {
                tokens: Tokens::new(10, 5),
                ..Usage::default()
            },
            result: Some(result(task, sigils)),
            ..EndDetails::default()
        },
    };
    store
        .apply(
            &Transition {
                close: Some(close),
                release: vec![task.into()],
                ..Transition::default()
            },
            at + 2_000,
        )
        .expect("apply");
    row.id
}

/// Attempt 1 of task `a` failed at 1 000 ms, noting that sqlx migrations fail on CI.
fn a_failed_noting_migrations(store: &mut Store) {
    attempt(
        store,
        "a",
        1_000,
        "failed",
        notes("sqlx migrations fail on CI"),
    );
}

fn notes(text: &str) -> Sigils {
    Sigils {
        journal: vec![text.into()],
        ..Sigils::default()
    }
}

fn lesson(title: &str, body: &str) -> Sigils {
    Sigils {
        knowledge: vec![Knowledge {
            tags: vec!["db".into()],
            title: title.into(),
            body: body.into(),
        }],
        ..Sigils::default()
    }
}

#[test]
fn closing_an_attempt_records_its_journal_entry() {
    let (_dir, mut store) = store_with(&["a"]);
    a_failed_noting_migrations(&mut store);
    let journal = store.journal(Some("a")).expect("journal");
    assert_eq!(journal.len(), 1);
    let entry = &journal[0];
    assert_eq!((entry.attempt, entry.outcome), (1, AttemptOutcome::Failed));
    assert_eq!(
        (entry.duration_ms, entry.tokens, entry.cost_usd),
        (Some(2_000), Some(15), None)
    );
    assert_eq!(entry.notes, ["sqlx migrations fail on CI"]);
}

#[test]
fn the_journal_is_searchable_by_the_words_of_its_notes() {
    let (_dir, mut store) = store_with(&["a", "b"]);
    a_failed_noting_migrations(&mut store);
    attempt(
        &mut store,
        "b",
        5_000,
        "done",
        notes("wrote the HTTP handlers"),
    );
    let found = store.search_journal("migrations", None).expect("search");
    let tasks: Vec<&str> = found.iter().map(|e| e.task.as_str()).collect();
    assert_eq!(tasks, ["a"]);
    assert!(
        store
            .search_journal("handlers", Some("a"))
            .expect("search")
            .is_empty()
    );
}

#[test]
fn a_search_with_operator_characters_is_read_as_words() {
    let (_dir, mut store) = store_with(&["a"]);
    attempt(
        &mut store,
        "a",
        1_000,
        "done",
        notes("fixed \"quoted\" AND-or: NEAR(x)"),
    );
    assert_eq!(
        store
            .search_journal("NEAR(x) \"quoted", None)
            .expect("search")
            .len(),
        1
    );
}

#[test]
fn knowledge_an_attempt_wrote_is_kept_and_replaced_by_title() {
    let (_dir, mut store) = store_with(&["a", "b"]);
    attempt(
        &mut store,
        "a",
        1_000,
        "done",
        lesson("Database", "use sqlite"),
    );
    let id = attempt(
        &mut store,
        "b",
        5_000,
        "done",
        lesson("database", "use postgres"),
    );
    let book = store.learned_knowledge().expect("knowledge");
    assert_eq!(book.len(), 1);
    assert_eq!(book[0].body, "use postgres");
    assert_eq!(book[0].source.as_deref(), Some(id.as_str()));
}
