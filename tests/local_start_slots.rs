//! Which ready tasks `ralph run` starts in one pass over the feature: a slot goes only to
//! an attempt that really starts. The real binary, the real runner and the scripted agent,
//! over a store an earlier run left in the state each test needs.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ralph::engine::dag::TaskPhase;

use crate::support::local_run::{Project, describe, exit_code, feature_yaml, independent};

const DONE: &str = "default:\n  - text: \"Did {task}. <task-done>{task}</task-done>\"\n";

/// Every attempt reports one token, then says its task is done.
const ONE_TOKEN: &str = "default:\n  - usage: {input_tokens: 1, output_tokens: 0}\n  \
                         - text: \"<task-done>{task}</task-done>\"\n";

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since_epoch.as_millis()).expect("time fits")
}

/// A project with independent tasks `names` under `spec_extra`, its store created by a
/// run that started nothing.
fn stored(spec_extra: &str, names: &[&str], script: &str) -> Project {
    let project = Project::new(
        &feature_yaml("slots", spec_extra, &independent(names)),
        script,
    );
    project.run(&["--limit", "0"]);
    assert!(
        project.attempts().is_empty(),
        "the first run started nothing"
    );
    project
}

#[test]
fn a_ready_task_claimed_by_someone_else_leaves_its_slot_to_the_next_ready_task() {
    let project = stored("  parallelism: 1\n", &["a", "b"], DONE);
    let rusqlite_path = project.state().join("ralph.db");
    let conn = rusqlite::Connection::open(rusqlite_path).expect("open the store");
    conn.execute(
        "INSERT INTO claims (task, holder, acquired_at_ms, expires_at_ms)
         VALUES ('a', 'someone-else', ?1, ?2)",
        [now_ms(), now_ms() + 4_000],
    )
    .expect("claim a");
    drop(conn);

    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        project.started_order(),
        ["b", "a"],
        "b starts at once; a once the claim on it expired"
    );
}

#[test]
fn a_budget_leased_out_by_one_start_keeps_the_next_ready_task_from_starting() {
    let project = Project::new(
        &feature_yaml(
            "slots",
            "  parallelism: 2\n  budget:\n    maxTokens: 1\n",
            &independent(&["a", "b"]),
        ),
        ONE_TOKEN,
    );

    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 5, "{}", describe(&output));
    assert_eq!(
        project.started_order(),
        ["a"],
        "a's share holds the one token; it spends it"
    );
}

#[test]
fn an_attempt_restarted_from_an_earlier_run_is_not_counted_as_another_iteration() {
    let project = stored("  parallelism: 2\n  maxIterations: 2\n", &["a", "b"], DONE);
    project
        .store()
        .start_attempt("a", now_ms(), 60_000)
        .expect("attempt a-a1 recorded, its runner never started");

    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let ids: Vec<String> = project.attempts().into_iter().map(|a| a.id).collect();
    assert_eq!(ids, ["a-a1", "b-a1"]);
    assert_eq!(project.task("a").phase, TaskPhase::Done);
    assert_eq!(project.task("b").phase, TaskPhase::Done);
}
