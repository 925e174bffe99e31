//! Planning in the cluster (docs/planning.md): a Feature with `spec.planning` runs its
//! planning Task first; the plan it writes is approved (at once, or by a person through the
//! Feature's annotations), its Tasks are created all together, and only then do the
//! Feature's tasks run. The kubelet is the manual stand-in: the test plays the planner.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use ralph::api::Feature;
use serde_json::json;

use crate::support::harness::{Harness, NS, feature_manifest};
use crate::support::mentions::assert_mentions;

/// A Feature `name` that plans (approval `approval`) from a spec, with one hand-written
/// task `setup`.
pub(crate) fn planning_feature(name: &str, approval: &str) -> serde_json::Value {
    feature_manifest(
        name,
        json!([{"name": "setup", "title": "Set the project up"}]),
        json!({
            "context": {"spec": {"inline": "Build a word counter."}},
            "planning": {"approval": approval}
        }),
    )
}

/// Two tasks after `setup`, each naming its check.
pub(crate) const PLAN: &str = "tasks:
  - name: count
    title: Count words
    dependsOn: [setup]
    acceptance: [\"`echo a b | sh count.sh` prints 2\"]
  - name: docs
    title: Document it
    dependsOn: [count]
    acceptance: [README names the command]
";

/// The planner of `pod` answers `tasks` (what its claim-keeper uploads: the answer
/// ConfigMap `<attempt>-answer`), and its attempt finishes.
pub(crate) async fn planner_answers(h: &Harness, pod: &Pod, feature: &str, tasks: &str) {
    let answer = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-answer", pod.name_any())),
            namespace: Some(NS.to_owned()),
            labels: Some(BTreeMap::from([(
                "ralph.dev/feature".to_owned(),
                feature.to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "tasks.yaml".to_owned(),
            tasks.to_owned(),
        )])),
        ..Default::default()
    };
    h.config_maps()
        .create(&PostParams::default(), &answer)
        .await
        .expect("upload the answer");
    h.finish_done(pod).await;
}

/// Feature `demo` (approval Manual) planned with [`PLAN`] and waiting for a person: the
/// plan's hash.
async fn plan_awaiting_approval(h: &Harness) -> String {
    h.create_feature(planning_feature("demo", "Manual")).await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(h, &planner, "demo", PLAN).await;
    h.wait_for_feature_phase("demo", "AwaitingApproval").await;
    plan_hash(h, "demo").await
}

/// The approval `status.planning` records.
pub(crate) fn approval_of(feature: &Feature) -> Option<ralph::api::planning::ApprovalStatus> {
    feature.status.as_ref()?.planning.as_ref()?.approval.clone()
}

/// The current plan's hash, once the Feature's status holds one.
pub(crate) async fn plan_hash(h: &Harness, feature: &str) -> String {
    h.eventually("the plan in status.planning", || async {
        let feature = h.features().get(feature).await.ok()?;
        feature.status?.planning?.dag_hash
    })
    .await
}

pub(crate) async fn annotate(h: &Harness, feature: &str, annotations: serde_json::Value) {
    let patch = json!({"metadata": {"annotations": annotations}});
    h.features()
        .patch(feature, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the Feature");
}

/// Finishes each of `tasks` (`<feature>-<task>-a1`) done, in order.
async fn run_done(h: &Harness, feature: &str, tasks: &[&str]) -> Feature {
    for task in tasks {
        let pod = h.wait_for_pod(&format!("{feature}-{task}-a1")).await;
        h.finish_done(&pod).await;
    }
    h.wait_for_feature_phase(feature, "Complete").await
}

#[tokio::test]
async fn a_planning_feature_plans_first_then_runs_the_plan_to_complete() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("demo", "Automatic"))
        .await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    assert!(
        !h.has_pod("demo-setup-a1").await,
        "a hand-written task started before the plan"
    );
    let message = h
        .eventually("the Feature says it plans", || async {
            let status = h.features().get("demo").await.ok()?.status?;
            status.message.filter(|m| m.starts_with("planning"))
        })
        .await;
    assert_mentions(&message, &["demo-planning"]);
    planner_answers(&h, &planner, "demo", PLAN).await;
    let feature = run_done(&h, "demo", &["setup", "count", "docs"]).await;
    let planning = feature
        .status
        .and_then(|s| s.planning)
        .expect("status.planning");
    assert_eq!(planning.tasks, 2);
    assert_eq!(planning.attempts, 1);
    let approval = planning.approval.expect("approval");
    assert_eq!(approval.by.as_deref(), Some("automatic"));
    assert_eq!(Some(approval.hash), planning.dag_hash);
    h.stop().await;
}

#[tokio::test]
async fn planned_tasks_are_owned_by_the_feature_and_labelled_with_their_plan() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("demo", "Automatic"))
        .await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(&h, &planner, "demo", PLAN).await;
    let hash = plan_hash(&h, "demo").await;
    h.wait_for_pod("demo-setup-a1").await;
    let task = h
        .tasks()
        .get("demo-count")
        .await
        .expect("planned Task demo-count");
    assert_eq!(task.labels().get("ralph.dev/plan"), Some(&hash));
    assert_eq!(task.spec.fields.depends_on, vec!["demo-setup".to_owned()]);
    assert_mentions(&task.spec.fields.description, &["Done when", "count.sh"]);
    let owner = &task.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Feature", "demo")
    );
    h.stop().await;
}

#[tokio::test]
async fn a_manual_plan_waits_for_a_person_and_nothing_else_runs() {
    let h = Harness::start().await;
    let hash = plan_awaiting_approval(&h).await;
    let feature = h.features().get("demo").await.expect("feature");
    let message = feature.status.and_then(|s| s.message).unwrap_or_default();
    assert_mentions(&message, &[&hash, "ralph plan approve feature/demo"]);
    let events = h.events_with_reason("PlanProposed").await;
    assert!(!events.is_empty(), "no PlanProposed Event");
    assert!(!h.has_pod("demo-setup-a1").await);
    assert!(
        h.tasks()
            .get_opt("demo-count")
            .await
            .expect("get")
            .is_none()
    );
    h.stop().await;
}

#[tokio::test]
async fn approving_the_current_plan_by_its_first_digits_runs_it() {
    let h = Harness::start().await;
    let hash = plan_awaiting_approval(&h).await;
    annotate(
        &h,
        "demo",
        json!({"ralph.dev/approve-plan": &hash[..8], "ralph.dev/plan-answered-by": "ana"}),
    )
    .await;
    let feature = run_done(&h, "demo", &["setup", "count", "docs"]).await;
    let approval = approval_of(&feature).expect("approval");
    assert_eq!(approval.by.as_deref(), Some("ana"));
    assert_eq!(approval.hash, hash);
    assert!(
        !feature.annotations().contains_key("ralph.dev/approve-plan"),
        "the answer is recorded in the status and its annotation removed"
    );
    h.stop().await;
}

#[tokio::test]
async fn approving_a_stale_plan_changes_nothing_and_says_which_plan_is_current() {
    let h = Harness::start().await;
    let hash = plan_awaiting_approval(&h).await;
    annotate(
        &h,
        "demo",
        json!({"ralph.dev/approve-plan": "0000000000000000"}),
    )
    .await;
    let events = h
        .eventually("a StalePlanAnswer Event", || async {
            let events = h.events_with_reason("StalePlanAnswer").await;
            (!events.is_empty()).then_some(events)
        })
        .await;
    let note = events[0].note.clone().unwrap_or_default();
    assert_mentions(&note, &["0000000000000000", &hash]);
    let feature = h.wait_for_feature_phase("demo", "AwaitingApproval").await;
    let approval = approval_of(&feature);
    assert_eq!(
        approval.map(|a| a.state),
        Some(ralph::api::planning::ApprovalState::Pending)
    );
    assert!(!h.has_pod("demo-setup-a1").await);
    h.stop().await;
}

#[tokio::test]
async fn rejecting_a_plan_plans_again_and_records_the_comment() {
    let h = Harness::start().await;
    let hash = plan_awaiting_approval(&h).await;
    annotate(
        &h,
        "demo",
        json!({"ralph.dev/reject-plan": hash, "ralph.dev/reject-comment": "one task per file"}),
    )
    .await;
    h.wait_for_pod("demo-planning-a2").await;
    let feature = h.features().get("demo").await.expect("feature");
    let approval = approval_of(&feature).expect("approval");
    assert_eq!(
        approval.state,
        ralph::api::planning::ApprovalState::Rejected
    );
    assert_eq!(approval.comment.as_deref(), Some("one task per file"));
    assert!(!h.has_pod("demo-setup-a1").await);
    h.stop().await;
}

#[tokio::test]
async fn a_gitops_re_apply_of_the_feature_leaves_its_planned_tasks_and_approval_alone() {
    let h = Harness::start().await;
    // Applied the way Argo CD applies it (server-side apply, its field manager, its
    // tracking label and annotation).
    let mut manifest = planning_feature("demo", "Manual");
    manifest["metadata"]["labels"] = json!({"app.kubernetes.io/instance": "ralph-app"});
    manifest["metadata"]["annotations"] =
        json!({"argocd.argoproj.io/tracking-id": "ralph-app:ralph.dev/Feature:ralph-test/demo"});
    let gitops = PatchParams::apply("argocd-controller").force();
    h.features()
        .patch("demo", &gitops, &Patch::Apply(&manifest))
        .await
        .expect("apply as Argo CD");
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(&h, &planner, "demo", PLAN).await;
    h.wait_for_feature_phase("demo", "AwaitingApproval").await;
    let hash = plan_hash(&h, "demo").await;
    annotate(&h, "demo", json!({"ralph.dev/approve-plan": hash})).await;
    h.wait_for_pod("demo-setup-a1").await;
    // The sync applies the Feature from git again.
    h.features()
        .patch("demo", &gitops, &Patch::Apply(&manifest))
        .await
        .expect("re-apply as Argo CD");
    h.wait_for_pod("demo-setup-a1").await;
    for name in ["demo-count", "demo-docs", "demo-planning"] {
        let task = h
            .tasks()
            .get(name)
            .await
            .expect("a planned Task survives the sync");
        // Argo CD prunes what carries its tracking label or annotation and is not in git;
        // Flux what its inventory lists. The controller's Tasks carry neither, and an owner
        // reference that makes them the Feature's children.
        assert!(
            !task.labels().contains_key("app.kubernetes.io/instance"),
            "{name}"
        );
        assert!(
            !task
                .annotations()
                .contains_key("argocd.argoproj.io/tracking-id"),
            "{name}"
        );
        assert!(
            !task
                .labels()
                .keys()
                .any(|k| k.starts_with("kustomize.toolkit.fluxcd.io/")),
            "{name}"
        );
        assert_eq!(task.owner_references()[0].name, "demo", "{name}");
    }
    let feature = h.features().get("demo").await.expect("feature");
    let approval = approval_of(&feature);
    assert_eq!(
        approval.map(|a| a.state),
        Some(ralph::api::planning::ApprovalState::Approved),
        "the approval survives the sync"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_manual_plan_runs_once_approved_while_the_feature_and_task_watches_lag() {
    let h =
        Harness::start_with_features_and_tasks_lagging(std::time::Duration::from_millis(400)).await;
    let hash = plan_awaiting_approval(&h).await;
    annotate(&h, "demo", json!({"ralph.dev/approve-plan": hash})).await;
    let feature = run_done(&h, "demo", &["setup", "count", "docs"]).await;
    let approval = approval_of(&feature).expect("approval");
    assert_eq!(
        (approval.state, approval.hash),
        (ralph::api::planning::ApprovalState::Approved, hash)
    );
    // The plan was read once and each planned Task created once, whatever the lag.
    for reason in ["PlanProposed", "PlannedTasksCreated"] {
        let events = h.events_with_reason(reason).await;
        let occurrences: i32 = events
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        assert_eq!(occurrences, 1, "{reason}: {events:?}");
    }
    let created_again = h
        .server
        .count_requests(|r| r.method == "POST" && r.resource == "tasks" && r.status == 409);
    assert_eq!(created_again, 0, "planned Tasks were created twice");
    h.stop().await;
}

#[tokio::test]
async fn a_planned_task_deleted_while_its_plan_runs_is_created_again() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("demo", "Automatic"))
        .await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(&h, &planner, "demo", PLAN).await;
    let setup = h.wait_for_pod("demo-setup-a1").await;
    let first = h.tasks().get("demo-docs").await.expect("planned Task docs");
    h.tasks()
        .delete("demo-docs", &Default::default())
        .await
        .expect("delete Task docs");
    h.eventually("Task docs created again", || async {
        let again = h.tasks().get("demo-docs").await.ok()?;
        (again.metadata.uid != first.metadata.uid).then_some(())
    })
    .await;
    h.finish_done(&setup).await;
    run_done(&h, "demo", &["count", "docs"]).await;
    h.stop().await;
}
