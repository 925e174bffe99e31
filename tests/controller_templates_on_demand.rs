//! The Feature cache keeps no prompt texts: a templated Task's text is read with the
//! Feature's whole spec when it must be applied and when an attempt starts, one read per
//! Feature generation for all of them, and a changed text reaches the Task and the next
//! attempt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use fake_apiserver::{RequestRecord, Verb};
use harness::{Harness, poll_until, prompt_of};
use serde_json::json;

/// A live read of the Feature `name` (the controller's; the test reads none).
fn reads_feature(name: &'static str) -> impl Fn(&RequestRecord) -> bool {
    move |r| {
        r.verb == Verb::Get
            && r.resource == "features"
            && r.name.as_deref() == Some(name)
            && r.subresource.is_none()
    }
}

/// `count` independent tasks, each with its own prompt text.
fn independent(count: usize) -> serde_json::Value {
    (0..count)
        .map(|i| json!({"name": format!("t{i}"), "description": format!("Write step {i}.")}))
        .collect()
}

/// `a`, then `b` after it, with the given texts.
fn a_then_b_saying(a: &str, b: &str) -> serde_json::Value {
    json!([
        {"name": "a", "description": a},
        {"name": "b", "dependsOn": ["a"], "description": b}
    ])
}

#[tokio::test]
async fn every_attempt_gets_its_template_text_from_one_read_of_the_feature() {
    let h = Harness::with_feature("many", independent(8), json!({"parallelism": 8})).await;
    for i in 0..8 {
        let pod = h.wait_for_pod(&format!("many-t{i}-a1")).await;
        assert!(
            prompt_of(&pod).contains(&format!("Write step {i}.")),
            "{}",
            prompt_of(&pod)
        );
    }
    assert_eq!(h.server.count_requests(reads_feature("many")), 1);
    h.stop().await;
}

#[tokio::test]
async fn tasks_are_applied_with_their_template_text() {
    let h = Harness::with_feature("texts", independent(3), json!({"parallelism": 1})).await;
    h.wait_for_pod("texts-t0-a1").await;
    for i in 0..3 {
        let task = h.tasks().get(&format!("texts-t{i}")).await.expect("task");
        assert_eq!(task.spec.fields.description, format!("Write step {i}."));
    }
    h.stop().await;
}

#[tokio::test]
async fn a_changed_text_is_applied_to_its_task_and_reaches_its_next_attempt() {
    let h = Harness::with_feature("edit", a_then_b_saying("Write a.", "Write b."), json!({})).await;
    let first = h.wait_for_pod("edit-a-a1").await;
    h.patch_feature_spec(
        "edit",
        json!({"tasks": a_then_b_saying("Write a.", "Write b twice.")}),
    )
    .await;
    let tasks = h.tasks();
    poll_until(
        "Task edit-b applied with the new text",
        || async {
            let task = tasks.get("edit-b").await.ok()?;
            (task.spec.fields.description == "Write b twice.").then_some(())
        },
        || {},
    )
    .await;
    h.finish_done(&first).await;
    let text = prompt_of(&h.wait_for_pod("edit-b-a1").await);
    assert!(text.contains("Write b twice."), "{text}");
    h.stop().await;
}

#[tokio::test]
async fn a_feature_is_read_at_most_once_per_generation() {
    let h = Harness::with_feature("gens", a_then_b_saying("Write a.", "Write b."), json!({})).await;
    let first = h.wait_for_pod("gens-a-a1").await;
    h.patch_feature_spec(
        "gens",
        json!({"tasks": a_then_b_saying("Write a.", "Write b twice.")}),
    )
    .await;
    let tasks = h.tasks();
    poll_until(
        "Task gens-b applied with the new text",
        || async {
            let task = tasks.get("gens-b").await.ok()?;
            (task.spec.fields.description == "Write b twice.").then_some(())
        },
        || {},
    )
    .await;
    h.finish_done(&first).await;
    h.wait_for_pod("gens-b-a1").await;
    assert!(h.server.count_requests(reads_feature("gens")) <= 2);
    h.stop().await;
}

#[tokio::test]
async fn a_feature_without_prompt_texts_is_never_read() {
    let h = Harness::with_feature(
        "bare",
        json!([{"name": "a", "title": "Write a"}, {"name": "b", "title": "Write b"}]),
        json!({"parallelism": 2}),
    )
    .await;
    h.wait_for_pod("bare-a-a1").await;
    h.wait_for_pod("bare-b-a1").await;
    assert_eq!(h.server.count_requests(reads_feature("bare")), 0);
    h.stop().await;
}

#[tokio::test]
async fn a_slow_read_of_one_feature_holds_up_no_other_feature() {
    // Under the controller's API timeout (5 s), far over a reconcile's own time.
    let slow_read = std::time::Duration::from_millis(4_500);
    let h =
        Harness::start_after(|server| server.add_latency(reads_feature("slow"), slow_read)).await;
    h.create("slow", independent(1), json!({})).await;
    // Let Feature slow's first reconcile start its read.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    h.create("quick", independent(1), json!({})).await;

    let pod = h.wait_for_pod("quick-t0-a1").await;
    assert!(prompt_of(&pod).contains("Write step 0."));
    let slow_task = h.tasks().get_opt("slow-t0").await.expect("get Task");
    assert!(slow_task.is_none(), "Feature slow is still being read");
    h.stop().await;
}
