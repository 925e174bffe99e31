//! What a done Task's status records outlives the attempt: a status the controller writes
//! for the Task again (its phase derived anew) keeps every attempt record whole, and later
//! prompts recall the done Tasks' journal notes, also after a controller restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::harness;

use ralph::engine::dag::TaskPhase;
use serde_json::json;

use harness::{Harness, a_then_b, assert_mentions, one_task, prompt_of};

/// A runner's result for `task` done, with everything an attempt record can hold.
fn done_with_everything(task: &str, note: &str) -> serde_json::Value {
    json!({
        "sigils": {"taskDone": task, "promise": "COMPLETE", "journal": [note],
            "knowledge": [{"title": "Parser", "body": "The parser is in src/parse.rs."}]},
        "usage": {"inputTokens": 100, "outputTokens": 20, "costUsd": 0.01},
        "agent": "claude-agent-acp 0.5.1", "model": "sonnet",
    })
}

#[tokio::test]
async fn a_done_task_whose_phase_is_derived_again_keeps_every_attempt_record_whole() {
    let h = Harness::with_feature("whole", one_task(), json!({})).await;
    let pod = h.wait_for_pod("whole-a-a1").await;
    h.finish_with_result(&pod, done_with_everything("a", "Added the parser."))
        .await;
    h.wait_for_feature_phase("whole", "Complete").await;
    let done = h.task_status("whole-a").await;
    assert_eq!(done.phase, TaskPhase::Done);
    assert_eq!(done.attempts[0].stop_reason.as_deref(), Some("end_turn"));
    assert!(!done.attempts[0].sigils.knowledge.is_empty());

    // A subtask under the done task: its phase is derived again (Pending) and its status
    // written from the cached Task.
    h.patch_feature_spec(
        "whole",
        json!({"tasks": [{"name": "a"}, {"name": "b", "parent": "a"}]}),
    )
    .await;
    let reopened = h
        .eventually("whole-a derived again", || async {
            let status = h.tasks().get("whole-a").await.ok()?.status?;
            (status.phase != TaskPhase::Done).then_some(status)
        })
        .await;
    assert_eq!(reopened.attempts, done.attempts);
    assert_eq!(reopened.usage, done.usage);
    h.stop().await;
}

#[tokio::test]
async fn a_done_tasks_journal_notes_reach_its_dependents_prompt() {
    let h = Harness::with_feature("notes", a_then_b(), json!({})).await;
    let a = h.wait_for_pod("notes-a-a1").await;
    h.finish_with_result(&a, done_with_everything("a", "Created docs/api.md"))
        .await;
    let b = h.wait_for_pod("notes-b-a1").await;
    assert_mentions(
        &prompt_of(&b),
        &["- a, attempt 1: done;", "Note: Created docs/api.md"],
    );
    h.stop().await;
}

#[tokio::test]
async fn a_done_tasks_journal_notes_reach_its_dependents_prompt_after_a_restart() {
    let mut h = Harness::with_feature("later", a_then_b(), json!({})).await;
    let a = h.wait_for_pod("later-a-a1").await;
    h.finish_with_result(&a, done_with_everything("a", "Created docs/api.md"))
        .await;
    let b = h.wait_for_pod("later-b-a1").await;
    h.restart_controller().await;
    h.finish_with_result(&b, json!({"sigils": {"taskFailed": "b"}}))
        .await;
    let retry = h.wait_for_pod("later-b-a2").await;
    assert_mentions(
        &prompt_of(&retry),
        &["- a, attempt 1: done;", "Note: Created docs/api.md"],
    );
    h.stop().await;
}
