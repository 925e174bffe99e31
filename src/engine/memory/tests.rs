//! The journal and knowledge a prompt recalls, and how they are kept.

use super::journal::{self, AttemptFacts};
use super::knowledge::{self, KnowledgeEntry};
use super::*;
use crate::engine::attempt::{Tokens, Usage};
use crate::engine::policy::AttemptOutcome;
use crate::engine::sigils::{Knowledge, Sigils};

fn entry(task: &str, attempt: u32, ended_at_ms: i64, note: &str) -> JournalEntry {
    JournalEntry {
        task: task.into(),
        attempt,
        outcome: AttemptOutcome::Failed,
        ended_at_ms,
        duration_ms: Some(1500),
        tokens: Some(1200),
        cost_usd: Some(0.25),
        detail: None,
        notes: vec![note.into()],
    }
}

fn lesson(title: &str, tags: &[&str], at: i64) -> KnowledgeEntry {
    let tags: Vec<String> = tags.iter().map(|t| (*t).to_owned()).collect();
    let knowledge = Knowledge {
        tags,
        title: title.into(),
        body: format!("body of {title}"),
    };
    KnowledgeEntry::learned(&knowledge, "t-a1", at)
}

fn recall_with(
    own: &[JournalEntry],
    blockers: &[JournalEntry],
    book: &[KnowledgeEntry],
    budgets: Budgets,
) -> Recall {
    recall(&RecallInput {
        task: "build-api",
        tags: &["rust".to_owned()],
        own,
        blockers,
        knowledge: book,
        budgets,
    })
}

fn budgets(journal_chars: usize, knowledge_chars: usize) -> Budgets {
    Budgets {
        journal_chars,
        knowledge_chars,
    }
}

#[test]
fn an_entry_keeps_what_the_attempt_reported() {
    let usage = Usage {
        tokens: Tokens::new(100, 20),
        cost_usd: Some(0.5),
    };
    let sigils = Sigils {
        journal: vec!["  added tests  ".into()],
        task_failed_reason: Some("the build is broken".into()),
        ..Sigils::default()
    };
    let made = journal::entry(&AttemptFacts {
        task: "t",
        attempt: 2,
        outcome: AttemptOutcome::Failed,
        started_at_ms: Some(1_000),
        ended_at_ms: 4_000,
        usage: &usage,
        sigils: &sigils,
        crash: None,
    });
    assert_eq!(made.duration_ms, Some(3_000));
    assert_eq!((made.tokens, made.cost_usd), (Some(120), Some(0.5)));
    assert_eq!(made.notes, ["added tests"]);
    assert_eq!(made.detail.as_deref(), Some("the build is broken"));
}

#[test]
fn usage_an_agent_did_not_report_stays_unknown() {
    let made = journal::entry(&AttemptFacts {
        task: "t",
        attempt: 1,
        outcome: AttemptOutcome::Crashed,
        started_at_ms: None,
        ended_at_ms: 4_000,
        usage: &Usage::default(),
        sigils: &Sigils::default(),
        crash: Some("exit code 1"),
    });
    assert_eq!(
        (made.tokens, made.cost_usd, made.duration_ms),
        (None, None, None)
    );
    assert!(
        made.render(true)
            .contains("duration unknown, tokens unknown, cost unknown")
    );
}

#[test]
fn an_entry_renders_outcome_figures_reason_and_notes() {
    let mut failed = entry("dep", 3, 10, "tried sqlx");
    failed.detail = Some("migrations fail".into());
    assert_eq!(
        failed.render(false),
        "- dep, attempt 3: failed; took 1.5s, 1200 tokens, $0.25\n  Why: migrations fail\n  Note: tried sqlx\n"
    );
    assert!(failed.render(true).starts_with("- Attempt 3: failed;"));
}

#[test]
fn own_entries_are_recalled_newest_first() {
    let own = [
        entry("build-api", 1, 10, "first"),
        entry("build-api", 2, 20, "second"),
    ];
    let recalled = recall_with(&own, &[], &[], Budgets::default());
    assert_eq!(recalled.own.len(), 2);
    assert!(recalled.own[0].contains("second") && recalled.own[1].contains("first"));
}

#[test]
fn a_tight_journal_budget_keeps_the_newest_entries() {
    let own: Vec<JournalEntry> = (1..=100)
        .map(|n| entry("build-api", n, i64::from(n), &format!("note {n}")))
        .collect();
    let one = own[0].render(true).chars().count();
    let recalled = recall_with(&own, &[], &[], budgets(one * 3 + 10, 0));
    assert_eq!(recalled.own.len(), 3);
    assert!(recalled.own[0].contains("note 100"));
    assert!(recalled.own[2].contains("note 98"));
}

#[test]
fn an_entry_too_long_for_what_is_left_is_shortened_with_a_marker() {
    let own = [entry("build-api", 1, 10, &"x".repeat(5_000))];
    let recalled = recall_with(&own, &[], &[], budgets(1_000, 0));
    assert_eq!(recalled.own.len(), 1);
    assert_eq!(recalled.own[0].chars().count(), 1_000);
    assert!(recalled.own[0].ends_with(SHORTENED_MARKER));
}

#[test]
fn the_task_own_entries_come_before_its_blockers() {
    let own = [entry("build-api", 1, 10, "own")];
    let blockers = [entry("schema", 1, 50, "blocker")];
    let one = own[0].render(true).chars().count();
    let recalled = recall_with(&own, &blockers, &[], budgets(one + 5, 0));
    assert_eq!(recalled.own.len(), 1);
    assert!(recalled.blockers.is_empty());
}

#[test]
fn each_blocker_latest_entry_comes_before_older_ones() {
    let blockers = [
        entry("schema", 1, 10, "schema old"),
        entry("schema", 2, 40, "schema latest"),
        entry("auth", 1, 30, "auth latest"),
    ];
    let recalled = recall_with(&[], &blockers, &[], Budgets::default());
    let order: Vec<&str> = recalled
        .blockers
        .iter()
        .map(|e| e.lines().last().unwrap_or_default())
        .collect();
    assert_eq!(
        order,
        [
            "  Note: schema latest",
            "  Note: auth latest",
            "  Note: schema old"
        ]
    );
}

#[test]
fn knowledge_matching_the_task_tags_or_name_is_recalled() {
    let book = [
        lesson("Use clippy", &["rust"], 1),
        lesson("API style", &["api"], 2),
        lesson("Deploying", &["helm"], 3),
    ];
    let recalled = recall_with(&[], &[], &book, Budgets::default());
    let titles: Vec<&str> = recalled
        .knowledge
        .iter()
        .filter_map(|k| k.lines().next())
        .collect();
    assert_eq!(titles, ["### API style (api)", "### Use clippy (rust)"]);
}

#[test]
fn knowledge_sharing_more_tags_comes_first_and_untagged_last() {
    let book = [
        lesson("General", &[], 9),
        lesson("One", &["api"], 8),
        lesson("Two", &["api", "rust"], 1),
    ];
    let ranked: Vec<&str> = knowledge::matching(&book, "build-api", &["rust".to_owned()])
        .iter()
        .map(|k| k.title.as_str())
        .collect();
    assert_eq!(ranked, ["Two", "One", "General"]);
}

#[test]
fn knowledge_tags_match_without_case() {
    let book = [lesson("Style", &["API"], 1)];
    assert_eq!(knowledge::matching(&book, "build-api", &[]).len(), 1);
}

#[test]
fn the_knowledge_budget_bounds_the_recalled_entries() {
    let book: Vec<KnowledgeEntry> = (0..500)
        .map(|n| lesson(&format!("lesson {n}"), &["rust"], n))
        .collect();
    let recalled = recall_with(&[], &[], &book, budgets(0, 1_000));
    let total: usize = recalled.knowledge.iter().map(|k| k.chars().count()).sum();
    assert!(total <= 1_000);
    assert!(recalled.knowledge[0].contains("lesson 499"));
}

#[test]
fn a_later_entry_with_the_same_title_replaces_the_earlier_one() {
    let mut book = vec![lesson("Use clippy", &["rust"], 1)];
    let mut newer = lesson("use  CLIPPY", &["lint"], 2);
    newer.body = "run clippy with -D warnings".into();
    assert!(knowledge::learn(&mut book, [newer]));
    assert_eq!(book.len(), 1);
    assert_eq!(book[0].body, "run clippy with -D warnings");
    assert_eq!(book[0].tags, ["lint"]);
}

#[test]
fn learning_the_same_lesson_again_changes_nothing() {
    let mut book = vec![lesson("Use clippy", &["rust"], 1)];
    assert!(!knowledge::learn(
        &mut book,
        [lesson("Use clippy", &["rust"], 5)]
    ));
}

#[test]
fn the_book_drops_its_oldest_entries_beyond_its_size() {
    let mut book: Vec<KnowledgeEntry> = (0..10).map(|n| lesson(&format!("l{n}"), &[], n)).collect();
    let one = book[0].size();
    assert!(knowledge::bound(&mut book, one * 4));
    let titles: Vec<&str> = book.iter().map(|k| k.title.as_str()).collect();
    assert_eq!(titles, ["l6", "l7", "l8", "l9"]);
}

#[test]
fn a_learned_entry_replaces_a_seeded_one_with_its_title() {
    let seeded = [
        KnowledgeEntry::seeded("Build", &["rust".into()], "cargo build"),
        KnowledgeEntry::seeded("Test", &[], "cargo test"),
    ];
    let learned = [lesson("build", &["rust"], 5)];
    let book = knowledge::merged(&seeded, &learned);
    let sources: Vec<Option<&str>> = book.iter().map(|k| k.source.as_deref()).collect();
    assert_eq!(sources, [Some("t-a1"), Some(knowledge::SEEDED)]);
}

#[test]
fn a_storage_key_keeps_the_value_knowledge_is_stored_under() {
    let key = knowledge::storage_key(&lesson("Use a/b paths!", &[], 1));
    assert_eq!(key, "use-a-b-paths.5468744d");
}

#[test]
fn storage_keys_are_configmap_keys_distinct_per_title() {
    let a = knowledge::storage_key(&lesson("Use a/b paths!", &[], 1));
    let b = knowledge::storage_key(&lesson("Use a-b paths", &[], 1));
    let same = knowledge::storage_key(&lesson("use A/B  paths!", &[], 9));
    assert!(a.starts_with("use-a-b-paths."), "{a}");
    assert!(
        a.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._".contains(&c))
    );
    assert_ne!(a, b);
    assert_eq!(a, same);
}
