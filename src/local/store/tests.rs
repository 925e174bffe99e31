use super::*;
use crate::local::feature::{LocalFeature, LocalTask};
use crate::local::testing::{self, task as spec};

fn feature(tasks: Vec<LocalTask>) -> LocalFeature {
    LocalFeature {
        max_retries: 3,
        ..testing::feature(tasks)
    }
}

fn store_with(tasks: Vec<LocalTask>) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::open(dir.path()).expect("open");
    store.sync(&feature(tasks), 0).expect("sync");
    (dir, store)
}

/// Changes the row of task `name` with `change` and saves it at 1 ms.
fn update(store: &mut Store, name: &str, change: impl FnOnce(&mut TaskRow)) {
    let mut task = store.task(name).expect("task");
    change(&mut task);
    let saved = Transition {
        tasks: vec![task],
        ..Default::default()
    };
    store.apply(&saved, 1).expect("apply");
}

#[test]
fn new_tasks_join_pending_at_generation_one_in_manifest_order() {
    let (_dir, store) = store_with(vec![spec("b", &[]), spec("a", &["b"])]);
    let tasks = store.tasks().expect("tasks");
    let names: Vec<_> = tasks
        .iter()
        .map(|t| (t.name(), t.phase, t.generation))
        .collect();
    assert_eq!(
        names,
        vec![("b", TaskPhase::Pending, 1), ("a", TaskPhase::Pending, 1)]
    );
}

#[test]
fn an_edited_task_bumps_its_generation_and_keeps_its_state() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    update(&mut store, "a", |task| task.phase = TaskPhase::Done);
    let mut edited = spec("a", &[]);
    edited.fields.description = "Do it differently".to_string();
    let report = store.sync(&feature(vec![edited]), 2).expect("sync");
    assert_eq!(report.edited, vec!["a".to_string()]);
    let task = store.task("a").expect("a");
    assert_eq!((task.generation, task.phase), (2, TaskPhase::Done));
}

#[test]
fn an_unchanged_manifest_changes_nothing() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    let report = store.sync(&feature(vec![spec("a", &[])]), 1).expect("sync");
    assert_eq!(report, SyncReport::default());
    assert_eq!(store.task("a").expect("a").generation, 1);
}

#[test]
fn a_removed_task_is_dropped_unless_it_is_claimed() {
    let (_dir, mut store) = store_with(vec![spec("a", &[]), spec("b", &[])]);
    store.start_attempt("b", 0, 1000).expect("start");
    let report = store.sync(&feature(vec![]), 1).expect("sync");
    assert_eq!(report.removed, vec!["a".to_string()]);
    assert_eq!(report.removed_later, vec!["b".to_string()]);
    assert!(store.task("b").expect("b").removed);
    store
        .apply(
            &Transition {
                release: vec!["b".to_string()],
                ..Default::default()
            },
            2,
        )
        .expect("apply");
    assert!(matches!(store.task("b"), Err(StoreError::UnknownTask(_))));
}

#[test]
fn starting_an_attempt_claims_the_task_and_marks_it_running() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    let attempt = store.start_attempt("a", 100, 1000).expect("start");
    assert_eq!((attempt.id.as_str(), attempt.number), ("a-a1", 1));
    assert_eq!(store.task("a").expect("a").phase, TaskPhase::Running);
    let claims = store.claims().expect("claims");
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (claims[0].holder.as_str(), claims[0].expires_at_ms),
        ("a-a1", 1100)
    );
}

#[test]
fn a_live_claim_refuses_a_second_attempt() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    let error = store
        .start_attempt("a", 999, 1000)
        .expect_err("double claim");
    assert!(matches!(error, StoreError::AlreadyClaimed { holder, .. } if holder == "a-a1"));
}

#[test]
fn an_expired_claim_is_taken_over_by_the_next_attempt() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    let attempt = store.start_attempt("a", 1000, 1000).expect("reclaim");
    assert_eq!(attempt.id, "a-a2");
    let kinds: Vec<_> = store
        .events(0)
        .expect("events")
        .into_iter()
        .map(|e| e.event.kind)
        .collect();
    assert!(kinds.contains(&"reclaimed".to_string()), "{kinds:?}");
}

#[test]
fn renewing_extends_only_claims_still_held_by_the_attempt() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    let held = [
        ("a".to_string(), "a-a1".to_string()),
        ("a".to_string(), "a-a9".to_string()),
    ];
    assert_eq!(store.renew_claims(&held, 5000).expect("renew"), 1);
    assert_eq!(store.claims().expect("claims")[0].expires_at_ms, 5000);
}

#[test]
fn reset_clears_the_claim_and_the_retry_count() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    update(&mut store, "a", |task| {
        task.retry_count = 2;
        task.phase = TaskPhase::Failed;
    });
    let task = store.reset_task("a", 2).expect("reset");
    assert_eq!((task.phase, task.retry_count), (TaskPhase::Pending, 0));
    assert!(store.claims().expect("claims").is_empty());
}

#[test]
fn retry_sets_a_failed_task_back_to_pending() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    update(&mut store, "a", |task| task.phase = TaskPhase::Failed);
    assert_eq!(
        store.retry_task("a", 2).expect("retry").phase,
        TaskPhase::Pending
    );
}

#[test]
fn retry_refuses_a_task_that_has_not_failed() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    let error = store.retry_task("a", 1).expect_err("pending task");
    assert!(error.to_string().contains("\"a\" is Pending"), "{error}");
}

#[test]
fn an_unknown_task_is_named_in_the_error() {
    let (_dir, store) = store_with(vec![spec("a", &[])]);
    let error = store.task("zzz").expect_err("unknown");
    assert!(error.to_string().contains("\"zzz\""), "{error}");
}

#[test]
fn state_survives_reopening_the_database() {
    let (dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    drop(store);
    let store = Store::open_existing(dir.path()).expect("reopen");
    assert_eq!(store.attempts(Some("a")).expect("attempts").len(), 1);
    assert_eq!(
        store.feature().expect("feature").map(|f| f.name),
        Some("demo".into())
    );
}

#[test]
fn opening_a_directory_without_state_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = Store::open_existing(dir.path()).expect_err("no state");
    assert!(error.to_string().contains("no local run state"), "{error}");
}

#[test]
fn a_live_run_owner_keeps_a_second_run_out() {
    let (_dir, mut store) = store_with(vec![]);
    store.take_run_ownership("1:1", |_| true).expect("first");
    let error = store
        .take_run_ownership("2:2", |owner| owner == "1:1")
        .expect_err("busy");
    assert!(error.to_string().contains("process 1:1"), "{error}");
}

#[test]
fn a_dead_run_owner_is_replaced() {
    let (_dir, mut store) = store_with(vec![]);
    store.take_run_ownership("1:1", |_| true).expect("first");
    store.take_run_ownership("2:2", |_| false).expect("second");
    assert_eq!(
        store.meta(keys::RUN_OWNER).expect("meta").as_deref(),
        Some("2:2")
    );
}

#[test]
fn a_task_spec_stored_by_an_earlier_version_reads_as_the_same_task() {
    let stored = r#"{"name":"a","title":"Title of a","description":"Do a","dependsOn":["b"],
        "parent":null,"priority":0,"maxRetries":null}"#;
    let task: LocalTask = serde_json::from_str(stored).expect("reads");
    assert_eq!(task, spec("a", &["b"]));
}

#[test]
fn a_corrupt_task_usage_is_an_error_naming_the_task_and_field() {
    let (_dir, store) = store_with(vec![spec("a", &[])]);
    store
        .conn
        .execute("UPDATE tasks SET usage = 'not json' WHERE name = 'a'", [])
        .expect("corrupt the row");
    let error = store.task("a").expect_err("corrupt");
    assert!(
        matches!(&error, StoreError::Corrupt { what, .. } if what == "task \"a\" field usage"),
        "{error}"
    );
}

#[test]
fn a_corrupt_attempt_usage_is_an_error_naming_the_attempt() {
    let (_dir, mut store) = store_with(vec![spec("a", &[])]);
    store.start_attempt("a", 0, 1000).expect("start");
    store
        .conn
        .execute("UPDATE attempts SET usage = 'not json'", [])
        .expect("corrupt the row");
    let error = store.attempts(None).expect_err("corrupt");
    assert!(
        matches!(&error, StoreError::Corrupt { what, .. } if what == "attempt a-a1 usage"),
        "{error}"
    );
}
