//! The journal and knowledge in a cluster, the controller against the fake API server and
//! the test standing in for the kubelet (the runner's result as the termination message):
//! what one attempt writes down reaches the prompts of the next attempts and dependents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;

use harness::{Harness, a_then_b, assert_mentions, one_task, prompt_of};

fn failed(task: &str, note: &str) -> serde_json::Value {
    json!({"taskFailed": task, "taskFailedReason": "the tests fail", "journal": [note]})
}

fn done_with(task: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut sigils = json!({"taskDone": task});
    if let (Some(sigils), Some(extra)) = (sigils.as_object_mut(), extra.as_object()) {
        sigils.extend(extra.clone());
    }
    sigils
}

fn lesson(title: &str, tags: &[&str], body: &str) -> serde_json::Value {
    json!({"knowledge": [{"tags": tags, "title": title, "body": body}]})
}

/// Kubelet stand-in: `pod`'s runner reported `sigils`; the Pod `next` that follows, and
/// its prompt.
async fn prompt_after(
    h: &Harness,
    pod: &Pod,
    sigils: serde_json::Value,
    next: &str,
) -> (Pod, String) {
    h.finish_attempt(pod, sigils).await;
    let next = h.wait_for_pod(next).await;
    let prompt = prompt_of(&next);
    (next, prompt)
}

#[tokio::test]
async fn the_journal_of_a_failed_attempt_reaches_the_retry() {
    let h = Harness::with_feature("jr", one_task(), json!({})).await;
    let first = h.wait_for_pod("jr-a-a1").await;
    let journal = failed("a", "tried sqlx; the migrations are broken");
    let (second, text) = prompt_after(&h, &first, journal, "jr-a-a2").await;
    assert_mentions(
        &text,
        &[
            "## Journal",
            "- Attempt 1: failed; took",
            "120 tokens, cost unknown",
            "Note: tried sqlx; the migrations are broken",
        ],
    );
    h.finish_done_to_complete(&second, "jr").await;
    h.stop().await;
}

#[tokio::test]
async fn a_blockers_journal_reaches_its_dependent() {
    let h = Harness::with_feature("jb", a_then_b(), json!({})).await;
    let a = h.wait_for_pod("jb-a-a1").await;
    let journal = done_with("a", json!({"journal": ["Created docs/api.md"]}));
    let (_, text) = prompt_after(&h, &a, journal, "jb-b-a1").await;
    assert_mentions(
        &text,
        &["- a, attempt 1: done;", "Note: Created docs/api.md"],
    );
    h.stop().await;
}

#[tokio::test]
async fn the_journal_budget_keeps_the_newest_entries() {
    let h = Harness::start().await;
    let memory = json!({"memory": {"journalPromptChars": 170}});
    h.create("jt", one_task(), memory).await;
    let first = h.wait_for_pod("jt-a-a1").await;
    h.finish_attempt(&first, failed("a", "first note")).await;
    let second = h.wait_for_pod("jt-a-a2").await;
    let (_, text) = prompt_after(&h, &second, failed("a", "second note"), "jt-a-a3").await;
    assert_mentions(&text, &["second note"]);
    assert!(!text.contains("first note"), "{text}");
    h.stop().await;
}

#[tokio::test]
async fn knowledge_reaches_the_tasks_whose_tags_match_and_lives_in_a_configmap() {
    let h = Harness::start().await;
    let tasks = json!([
        {"name": "a"},
        {"name": "b", "dependsOn": ["a"], "tags": ["db"]},
        {"name": "c", "dependsOn": ["b"], "tags": ["ui"]}
    ]);
    let feature = h.create("kt", tasks, json!({})).await;
    let a = h.wait_for_pod("kt-a-a1").await;
    let learned = lesson("Migrations", &["DB"], "Run sqlx migrate before the tests.");
    let (b, text) = prompt_after(&h, &a, done_with("a", learned), "kt-b-a1").await;
    assert_mentions(
        &text,
        &[
            "## Knowledge",
            "### Migrations (db)",
            "Run sqlx migrate before the tests.",
        ],
    );
    h.finish_done(&b).await;
    let c = h.wait_for_pod("kt-c-a1").await;
    assert!(!prompt_of(&c).contains("sqlx migrate"), "{}", prompt_of(&c));

    let stored = h.config_map("kt-knowledge").await;
    let owner = stored.owner_references().first().cloned().expect("owner");
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid)),
        ("Feature", feature.metadata.uid)
    );
    let data = stored.data.unwrap_or_default();
    assert_eq!(data.len(), 1);
    assert!(
        data.values().all(|v| v.contains("source: kt-a-a1")),
        "{data:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_later_entry_with_the_same_title_replaces_the_earlier_one() {
    let tasks = json!([
        {"name": "a", "tags": ["db"]},
        {"name": "b", "dependsOn": ["a"], "tags": ["db"]},
        {"name": "c", "dependsOn": ["b"], "tags": ["db"]}
    ]);
    let h = Harness::with_feature("kr", tasks, json!({})).await;
    let a = h.wait_for_pod("kr-a-a1").await;
    h.finish_attempt(
        &a,
        done_with("a", lesson("Database", &["db"], "use sqlite")),
    )
    .await;
    let b = h.wait_for_pod("kr-b-a1").await;
    assert!(prompt_of(&b).contains("use sqlite"));
    h.finish_attempt(
        &b,
        done_with("b", lesson("database", &["db"], "use postgres")),
    )
    .await;
    let c = h.wait_for_pod("kr-c-a1").await;
    let text = prompt_of(&c);
    assert!(
        text.contains("use postgres") && !text.contains("use sqlite"),
        "{text}"
    );
    let stored = h.config_map("kr-knowledge").await;
    assert_eq!(stored.data.map(|d| d.len()), Some(1));
    h.stop().await;
}

#[tokio::test]
async fn seeded_knowledge_inline_and_from_a_configmap_reaches_matching_prompts() {
    let h = Harness::start().await;
    let config_maps = h.config_maps();
    let seeds: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "team-lessons"},
        "data": {"lessons.yaml": "- title: Errors\n  tags: [api]\n  body: Return RFC 7807 problems.\n"}
    }))
    .expect("configmap");
    config_maps
        .create(&PostParams::default(), &seeds)
        .await
        .expect("create seeds");
    let memory = json!({"memory": {
        "knowledge": [
            {"title": "Framework", "tags": ["api"], "body": "Use axum 0.8."},
            {"title": "Frontend", "tags": ["ui"], "body": "Use htmx."}
        ],
        "knowledgeFrom": {"name": "team-lessons", "key": "lessons.yaml"}
    }});
    h.create("ks", json!([{"name": "build-api"}]), memory).await;
    let pod = h.wait_for_pod("ks-build-api-a1").await;
    let text = prompt_of(&pod);
    assert_mentions(&text, &["Use axum 0.8.", "Return RFC 7807 problems."]);
    assert!(!text.contains("Use htmx."), "{text}");
    h.stop().await;
}

fn is_config_map_create(request: &fake_apiserver::RequestRecord) -> bool {
    request.resource == "configmaps" && request.verb == fake_apiserver::Verb::Create
}

/// A harness whose API server answers the first ConfigMap create with `error`.
async fn failing_a_config_map_create(error: fake_apiserver::ApiError) -> Harness {
    Harness::start_after(|server| server.fail_next(1, is_config_map_create, error)).await
}

#[tokio::test]
async fn knowledge_the_controller_may_not_write_is_a_warning_and_the_task_still_ends() {
    let forbidden = fake_apiserver::ApiError::new(403, "Forbidden", "configmaps is forbidden");
    let h = failing_a_config_map_create(forbidden).await;
    h.create("kf", one_task(), json!({})).await;
    let a = h.wait_for_pod("kf-a-a1").await;
    h.finish_attempt(&a, done_with("a", lesson("Style", &[], "use rustfmt")))
        .await;
    h.wait_for_feature_phase("kf", "Complete").await;
    let warnings = h.events_with_reason("KnowledgeNotKept").await;
    assert_eq!(warnings.len(), 1);
    let note = warnings[0].note.clone().unwrap_or_default();
    assert_mentions(&note, &["kf-a-a1", "ConfigMaps"]);
    h.stop().await;
}

#[tokio::test]
async fn knowledge_whose_write_meets_a_conflict_is_not_lost() {
    let exists = fake_apiserver::ApiError::already_exists("configmaps", "kc-knowledge");
    let h = failing_a_config_map_create(exists).await;
    h.create("kc", a_then_b(), json!({})).await;
    let a = h.wait_for_pod("kc-a-a1").await;
    h.finish_attempt(&a, done_with("a", lesson("Style", &[], "use rustfmt")))
        .await;
    let b = h.wait_for_pod("kc-b-a1").await;
    assert!(prompt_of(&b).contains("use rustfmt"), "{}", prompt_of(&b));
    h.stop().await;
}
