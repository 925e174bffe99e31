//! The loop's memory, in figures: the prompt of a task with 100 journal entries and 500
//! knowledge entries (its size and how long recalling and rendering take, with the default
//! budgets and with the largest ones), and the size of the local store after 10,000
//! journal entries (and how long reading and searching it take).
//! Run: `cargo bench --bench memory`.
// Bench code: a fixture that cannot be built should stop with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use ralph::engine::attempt::{AttemptResult, OutcomeClass, RanBy, Tokens, Usage};
use ralph::engine::memory::{self, Budgets, JournalEntry, KnowledgeEntry, RecallInput};
use ralph::engine::policy::AttemptOutcome;
use ralph::engine::prompt::{self, FeatureText, PromptInput, TaskText};
use ralph::engine::sigils::{Knowledge, Sigils};
use ralph::local::store::{AttemptClose, EndDetails, Store, Transition};

const JOURNAL_ENTRIES: usize = 100;
const KNOWLEDGE_ENTRIES: usize = 500;
const STORE_ENTRIES: usize = 10_000;
const STORE_TASKS: usize = 100;
const ROUNDS: u32 = 200;

fn note(n: usize) -> String {
    format!(
        "Attempt {n}: changed src/api/handlers.rs and tests/api.rs; the greeting endpoint \
         answers 200 but the migration test still fails on a missing column `created_at`."
    )
}

fn journal(task: &str, count: usize) -> Vec<JournalEntry> {
    (0..count)
        .map(|n| JournalEntry {
            task: task.to_owned(),
            attempt: u32::try_from(n + 1).unwrap(),
            outcome: AttemptOutcome::Failed,
            ended_at_ms: i64::try_from(n).unwrap() * 60_000,
            duration_ms: Some(95_000),
            tokens: Some(48_000),
            cost_usd: None,
            detail: Some("cargo test: 2 tests failed".to_owned()),
            notes: vec![note(n)],
        })
        .collect()
}

fn book() -> Vec<KnowledgeEntry> {
    let tags = ["api", "db", "ui", "ci", "auth"];
    (0..KNOWLEDGE_ENTRIES)
        .map(|n| {
            let knowledge = Knowledge {
                tags: vec![tags[n % tags.len()].to_owned(), format!("area{}", n % 7)],
                title: format!("Lesson {n}"),
                body: format!("When touching part {n}, run `cargo test --test part{n}` first; it needs the fixtures in tests/data/{n}."),
            };
            KnowledgeEntry::learned(&knowledge, "t-a1", i64::try_from(n).unwrap())
        })
        .collect()
}

fn prompt_figures(label: &str, budgets: Budgets) {
    let own = journal("build-api", JOURNAL_ENTRIES / 2);
    let blockers = journal("schema", JOURNAL_ENTRIES / 2);
    let book = book();
    let tags = vec!["db".to_owned()];
    let build = || {
        let recalled = memory::recall(&RecallInput {
            task: "build-api",
            tags: &tags,
            own: &own,
            blockers: &blockers,
            knowledge: &book,
            budgets,
        });
        prompt::render(&PromptInput {
            task: TaskText {
                id: "build-api".into(),
                title: "Build the API".into(),
                description: "Serve GET /greeting with axum.".into(),
            },
            feature: FeatureText {
                name: "hello".into(),
                spec: Some("A greeting service.".into()),
                plan: None,
            },
            retry_count: 2,
            max_retries: 3,
            memory: recalled,
            ..PromptInput::default()
        })
    };
    let without = prompt::render(&PromptInput::default()).len();
    let text = build();
    let started = Instant::now();
    for _ in 0..ROUNDS {
        std::hint::black_box(build());
    }
    let each = started.elapsed() / ROUNDS;
    println!(
        "prompt, {JOURNAL_ENTRIES} journal + {KNOWLEDGE_ENTRIES} knowledge entries, {label}: \
         {} bytes ({} bytes of memory sections), recall + render {each:?}",
        text.len(),
        text.len().saturating_sub(without)
    );
}

fn result_json(task: &str, n: usize) -> String {
    let result = AttemptResult {
        exit_code: Some(0),
        sigils: Sigils {
            task_failed: Some(task.to_owned()),
            task_failed_reason: Some("cargo test: 2 tests failed".into()),
            journal: vec![note(n)],
            ..Sigils::default()
        },
        ran_by: RanBy {
            agent: Some("claude-agent-acp 0.5".into()),
            ..RanBy::default()
        },
        ..AttemptResult::new(task, None, OutcomeClass::Finished)
    };
    serde_json::to_string(&result).unwrap()
}

fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn store_figures() {
    let dir = tempfile::tempdir().unwrap();
    let tasks: Vec<_> = (0..STORE_TASKS)
        .map(|n| ralph::local::testing::task(&format!("t{n:03}"), &[]))
        .collect();
    let feature = ralph::local::testing::feature(tasks);
    let started = Instant::now();
    {
        let mut store = Store::open(dir.path()).unwrap();
        store.sync(&feature, 0).unwrap();
        for n in 0..STORE_ENTRIES {
            let task = format!("t{:03}", n % STORE_TASKS);
            let at = i64::try_from(n).unwrap() * 1_000;
            let row = store.start_attempt(&task, at, 60_000).unwrap();
            let close = AttemptClose {
                id: row.id,
                ended_at_ms: at + 500,
                outcome: "failed".into(),
                details: EndDetails {
                    stop_reason: Some("end_turn".into()),
                    usage: Usage {
                        tokens: Tokens::new(40_000, 8_000),
                        ..Usage::default()
                    },
                    result: Some(result_json(&task, n)),
                    ..EndDetails::default()
                },
            };
            let transition = Transition {
                close: Some(close),
                release: vec![task],
                ..Transition::default()
            };
            store.apply(&transition, at + 500).unwrap();
        }
    }
    let written = started.elapsed();
    let store = Store::open_existing(dir.path()).unwrap();
    let db = dir.path().join("ralph.db");
    let size = file_size(&db) + file_size(&db.with_extension("db-wal"));
    let started = Instant::now();
    let own = store.journal(Some("t042")).unwrap();
    let read = started.elapsed();
    let started = Instant::now();
    let found = store
        .search_journal("created_at migration", Some("t042"))
        .unwrap();
    let searched = started.elapsed();
    println!(
        "local store after {STORE_ENTRIES} attempts with journal entries ({STORE_TASKS} tasks): \
         {:.1} MiB (attempts, results, events, journal and its FTS5 index), written in {written:?} \
         ({:?} per attempt)",
        size as f64 / (1024.0 * 1024.0),
        written / u32::try_from(STORE_ENTRIES).unwrap()
    );
    println!(
        "  one task's journal ({} entries) read in {read:?}; full-text search ({} hits) in {searched:?}",
        own.len(),
        found.len()
    );
}

fn main() {
    prompt_figures("default budgets", Budgets::default());
    prompt_figures(
        "largest budgets (65536 + 65536 chars)",
        Budgets {
            journal_chars: 65_536,
            knowledge_chars: 65_536,
        },
    );
    store_figures();
}
