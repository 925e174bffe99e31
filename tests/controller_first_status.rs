//! A new Feature shows a status at once: Pending, counting its templates' tasks, while its
//! Tasks are created (10,000 of them take minutes within the client's QPS). That first
//! status judges nothing; the judged status follows once every Task exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use futures::StreamExt;
use kube::runtime::watcher;
use ralph::api::conditions::{PROGRESSING, VALID, find};
use ralph::api::{FeaturePhase, FeatureStatus};
use serde_json::json;

use fake_apiserver::{RequestRecord, Verb};
use harness::{Harness, a_then_b, feature_manifest};

/// Creates the Feature `name` of `tasks` and returns the first status a watch sees on it.
async fn first_status_of(h: &Harness, name: &str, tasks: serde_json::Value) -> FeatureStatus {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(h.features(), config).boxed();
    // The watch starts from its first list's resourceVersion: every change after the list,
    // the Feature's creation first, reaches it.
    loop {
        match events.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            None => panic!("the watch of Feature {name} ended"),
            _ => {}
        }
    }
    h.create_feature(feature_manifest(name, tasks, json!({})))
        .await;
    let first = async {
        loop {
            if let Some(Ok(watcher::Event::Apply(feature))) = events.next().await
                && let Some(status) = feature.status
            {
                return status;
            }
        }
    };
    tokio::time::timeout(harness::PATIENCE, first)
        .await
        .expect("a status within the test's patience")
}

fn is_feature_status_write(r: &RequestRecord) -> bool {
    r.resource == "features" && r.subresource.as_deref() == Some("status") && r.status < 400
}

/// A Task applied (server-side apply creates it).
fn is_task_apply(r: &RequestRecord) -> bool {
    r.resource == "tasks" && r.subresource.is_none() && r.verb == Verb::Patch
}

#[tokio::test]
async fn a_new_features_first_status_is_pending_and_counts_every_task_of_its_templates() {
    let h = Harness::start().await;

    let first = first_status_of(&h, "fresh", a_then_b()).await;

    assert_eq!(first.phase, FeaturePhase::Pending);
    assert_eq!(first.counts.total, 2);
    assert_eq!(first.counts.pending, 2);
    let progressing = find(&first.conditions, PROGRESSING).expect("Progressing");
    assert_eq!(progressing.reason, "CreatingTasks");
    assert!(
        progressing.message.contains("creating its 2 Tasks"),
        "{progressing:?}"
    );
}

#[tokio::test]
async fn a_new_features_first_status_judges_nothing() {
    let h = Harness::start().await;

    let first = first_status_of(&h, "fresh", a_then_b()).await;

    assert_eq!(first.observed_generation, None, "{first:?}");
    assert!(find(&first.conditions, VALID).is_none(), "{first:?}");
}

#[tokio::test]
async fn a_new_features_status_is_written_before_its_tasks_are_applied() {
    let h = Harness::start().await;

    h.create_feature(feature_manifest("fresh", a_then_b(), json!({})))
        .await;
    h.wait_for_feature_phase("fresh", "Running").await;

    let requests = h.server.requests();
    let status_write = requests.iter().position(is_feature_status_write);
    let task_apply = requests.iter().position(is_task_apply);
    assert!(
        status_write.is_some() && task_apply.is_some() && status_write < task_apply,
        "first status write at {status_write:?}, first Task apply at {task_apply:?}"
    );
}

#[tokio::test]
async fn the_judged_status_follows_once_every_task_exists() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest("fresh", a_then_b(), json!({})))
        .await;

    let judged = h
        .eventually("a judged status", || async {
            let feature = h.features().get("fresh").await.ok()?;
            let status = feature.status?;
            (status.observed_generation == feature.metadata.generation).then_some(status)
        })
        .await;

    let valid = find(&judged.conditions, VALID).expect("Valid");
    assert_eq!(valid.status, "True");
    let progressing = find(&judged.conditions, PROGRESSING).expect("Progressing");
    assert_ne!(progressing.reason, "CreatingTasks");
}

#[tokio::test]
async fn a_feature_without_tasks_gets_no_creating_status() {
    let h = Harness::start().await;

    let first = first_status_of(&h, "empty", json!([])).await;

    assert_eq!(first.phase, FeaturePhase::NoPlan, "{first:?}");
}
