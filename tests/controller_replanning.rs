//! Re-planning in the cluster (`replan: OnFailure`, docs/planning.md): a planned Task that
//! fails for good sends the plan back to the planner instead of failing the Feature; the
//! revised plan keeps the done Tasks, drops, changes or adds the others, and runs. The
//! kubelet is the manual stand-in: the test plays the planner and the workers.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use ralph::api::Feature;
use ralph::api::planning::PlanningStatus;
use serde_json::json;

use crate::support::harness::{Harness, feature_manifest, prompt_of};
use crate::support::mentions::assert_mentions;

/// A Feature `demo` that plans (approval Automatic), re-plans at most `max_replans` times
/// after a failure, retries no failed attempt, and has one hand-written task `setup`.
fn replanning_feature(max_replans: u32) -> serde_json::Value {
    feature_manifest(
        "demo",
        json!([{"name": "setup", "title": "Set the project up"}]),
        json!({
            "context": {"spec": {"inline": "Build a word counter."}},
            "planning": {"approval": "Automatic", "replan": "OnFailure", "maxReplans": max_replans},
            "retry": {"maxRetries": 0}
        }),
    )
}

/// The first plan: `count` after `setup`, `docs` after `count`.
const PLAN: &str = "tasks:
  - name: count
    title: Count words
    dependsOn: [setup]
    acceptance: [\"`echo a b | sh count.sh` prints 2\"]
  - name: docs
    title: Document it
    dependsOn: [count]
    acceptance: [README names the command]
";

/// A revision that replaces `count` by `count-awk` and keeps `docs` after it.
const REVISED: &str = "tasks:
  - name: count-awk
    title: Count words with awk
    dependsOn: [setup]
    acceptance: [\"`echo a b | sh count.sh` prints 2\"]
  - name: docs
    title: Document it
    dependsOn: [count-awk]
    acceptance: [README names the command]
";

/// The planner of `pod` answers `tasks` for Feature `demo`.
async fn planner_answers(h: &Harness, pod: &Pod, tasks: &str) {
    crate::controller_planning::planner_answers(h, pod, "demo", tasks).await;
}

/// Plans [`PLAN`], runs `setup` done and fails `count` for good: the Pod of the planning
/// attempt that revises the plan.
async fn fail_count(h: &Harness) -> Pod {
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(h, &planner, PLAN).await;
    let setup = h.wait_for_pod("demo-setup-a1").await;
    h.finish_done(&setup).await;
    let count = h.wait_for_pod("demo-count-a1").await;
    h.finish_attempt(&count, json!({"taskFailed": "count"}))
        .await;
    h.wait_for_pod("demo-planning-a2").await
}

/// Feature `demo` re-planning at most `max_replans` times, its `count` failed and the
/// plan revised to [`REVISED`].
async fn revised(max_replans: u32) -> Harness {
    let h = Harness::start().await;
    h.create_feature(replanning_feature(max_replans)).await;
    let reviser = fail_count(&h).await;
    planner_answers(&h, &reviser, REVISED).await;
    h
}

fn planning_of(feature: &Feature) -> PlanningStatus {
    feature
        .status
        .as_ref()
        .and_then(|s| s.planning.clone())
        .expect("status.planning")
}

#[tokio::test]
async fn a_planned_task_that_fails_for_good_is_re_planned_instead_of_failing_the_feature() {
    let h = Harness::start().await;
    let phases = h.record_feature_phases("demo");
    h.create_feature(replanning_feature(2)).await;
    let reviser = fail_count(&h).await;
    let prompt = prompt_of(&reviser);
    assert_mentions(&prompt, &["Revise the plan", "`count` failed", "setup"]);
    assert!(
        prompt.contains("name: docs"),
        "the revision prompt lists the pending tasks:\n{prompt}"
    );
    let feature = h.features().get("demo").await.expect("feature");
    let planning = planning_of(&feature);
    assert_eq!(planning.replans, 1);
    assert_eq!(planning.revising.as_deref(), Some("count"));
    assert!(
        !phases.lock().expect("phases").iter().any(|p| p == "Failed"),
        "the Feature failed before its plan was revised"
    );
    assert_eq!(h.events_with_reason("Replanning").await.len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn the_revised_plan_drops_and_adds_tasks_keeps_the_done_ones_and_runs_to_complete() {
    let h = revised(2).await;
    let first = h.wait_for_pod("demo-count-awk-a1").await;
    h.finish_done(&first).await;
    let docs = h.wait_for_pod("demo-docs-a1").await;
    h.finish_done(&docs).await;
    let feature = h.wait_for_feature_phase("demo", "Complete").await;
    let planning = planning_of(&feature);
    assert_eq!((planning.replans, planning.tasks), (1, 2));
    assert_eq!((planning.running, planning.revising), (None, None));
    let names: Vec<String> = h
        .tasks()
        .list(&Default::default())
        .await
        .expect("tasks")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        !names.contains(&"demo-count".to_owned()),
        "the failed task the revision dropped is still there: {names:?}"
    );
    let docs = h.tasks().get("demo-docs").await.expect("docs");
    assert_eq!(docs.spec.fields.depends_on, vec!["demo-count-awk"]);
    assert_eq!(
        docs.labels().get("ralph.dev/plan"),
        planning.dag_hash.as_ref(),
        "the kept Task is labelled with the revised plan"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failed_task_the_revision_keeps_gets_its_retries_back() {
    let h = Harness::start().await;
    h.create_feature(replanning_feature(2)).await;
    let reviser = fail_count(&h).await;
    let keeps_count = PLAN.replace("Count words", "Count words, splitting on any blank");
    planner_answers(&h, &reviser, &keeps_count).await;
    let again = h.wait_for_pod("demo-count-a2").await;
    let count = h.tasks().get("demo-count").await.expect("count");
    assert_eq!(
        count.spec.fields.title,
        "Count words, splitting on any blank"
    );
    h.finish_done(&again).await;
    let docs = h.wait_for_pod("demo-docs-a1").await;
    h.finish_done_to_complete(&docs, "demo").await;
    h.stop().await;
}

#[tokio::test]
async fn a_failure_after_the_last_re_plan_fails_the_feature() {
    let h = revised(1).await;
    let first = h.wait_for_pod("demo-count-awk-a1").await;
    h.finish_attempt(&first, json!({"taskFailed": "count-awk"}))
        .await;
    let feature = h.wait_for_feature_phase("demo", "Failed").await;
    assert_eq!(planning_of(&feature).replans, 1);
    assert!(
        !h.has_pod("demo-planning-a3").await,
        "a re-plan ran past maxReplans"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_hand_written_task_that_fails_is_never_re_planned() {
    let h = Harness::start().await;
    h.create_feature(replanning_feature(2)).await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(&h, &planner, PLAN).await;
    let setup = h.wait_for_pod("demo-setup-a1").await;
    h.finish_attempt(&setup, json!({"taskFailed": "setup"}))
        .await;
    let feature = h.wait_for_feature_phase("demo", "Failed").await;
    assert_eq!(planning_of(&feature).replans, 0);
    assert!(!h.has_pod("demo-planning-a2").await);
    h.stop().await;
}

#[tokio::test]
async fn a_failure_is_re_planned_once_while_the_feature_and_task_watches_lag() {
    let h =
        Harness::start_with_features_and_tasks_lagging(std::time::Duration::from_millis(400)).await;
    h.create_feature(replanning_feature(2)).await;
    let reviser = fail_count(&h).await;
    planner_answers(&h, &reviser, REVISED).await;
    let first = h.wait_for_pod("demo-count-awk-a1").await;
    h.finish_done(&first).await;
    let docs = h.wait_for_pod("demo-docs-a1").await;
    let feature = h.finish_done_to_complete(&docs, "demo").await;
    assert_eq!(planning_of(&feature).replans, 1);
    let replanned: i32 = h
        .events_with_reason("Replanning")
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    assert_eq!(replanned, 1, "one failure, one re-plan");
    h.stop().await;
}
