//! Follow-up tasks workers propose in a cluster (docs/planning.md, "Proposed follow-up
//! tasks"): a done worker attempt's proposal, uploaded by its claim-keeper as ConfigMap
//! `<attempt>-proposal`, extends the running plan into a new plan, approved as any plan.
//! The kubelet stand-in plays the runner and the claim-keeper; the last test runs the real
//! ones with the scripted agent on a node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::PostParams;
use ralph::api::Feature;
use ralph::api::planning::{ApprovalState, PlanningStatus};
use serde_json::json;

use crate::controller_planning::{PLAN, annotate, plan_hash, planner_answers, planning_feature};
use crate::support::harness::{Harness, NS, feature_manifest};
use crate::support::mentions::assert_mentions;

/// `polish`, after `count`.
const POLISH: &str = "tasks:\n  - {name: polish, title: Polish the output, dependsOn: [count], acceptance: [no trailing space]}\n";

/// The claim-keeper of worker `pod` of Feature `demo` uploaded `tasks` as its proposal,
/// and its runner reported the task done with `proposed: true`.
async fn proposes_and_is_done(h: &Harness, pod: &Pod, tasks: &str) {
    upload_proposal(h, pod, tasks).await;
    let task_id = task_id_of(pod);
    h.finish_with_result(
        pod,
        json!({"sigils": {"taskDone": task_id}, "proposed": true}),
    )
    .await;
}

/// What the claim-keeper of `pod` uploads when its runner wrote `tasks` to the proposal
/// file.
async fn upload_proposal(h: &Harness, pod: &Pod, tasks: &str) {
    let proposal = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-proposal", pod.name_any())),
            namespace: Some(NS.to_owned()),
            labels: Some(BTreeMap::from([
                ("ralph.dev/feature".to_owned(), "demo".to_owned()),
                ("ralph.dev/task".to_owned(), task_id_of(pod)),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "tasks.yaml".to_owned(),
            tasks.to_owned(),
        )])),
        ..Default::default()
    };
    h.config_maps()
        .create(&PostParams::default(), &proposal)
        .await
        .expect("upload the proposal");
}

fn task_id_of(pod: &Pod) -> String {
    pod.labels()
        .get("ralph.dev/task")
        .cloned()
        .expect("a task label")
}

/// Feature `demo` (approval `approval`) planned with [`PLAN`] and running: its plan's hash,
/// once `setup` is done and `count`'s first attempt runs.
async fn plan_running(h: &Harness, manifest: serde_json::Value, approval: &str) -> (String, Pod) {
    h.create_feature(manifest).await;
    let planner = h.wait_for_pod("demo-planning-a1").await;
    planner_answers(h, &planner, "demo", PLAN).await;
    if approval == "Manual" {
        h.wait_for_feature_phase("demo", "AwaitingApproval").await;
        let hash = plan_hash(h, "demo").await;
        annotate(h, "demo", json!({"ralph.dev/approve-plan": hash})).await;
    }
    let hash = plan_hash(h, "demo").await;
    let setup = h.wait_for_pod("demo-setup-a1").await;
    h.finish_done(&setup).await;
    let count = h.wait_for_pod("demo-count-a1").await;
    (hash, count)
}

/// `status.planning` once it names another plan than `hash`.
async fn plan_after(h: &Harness, hash: &str) -> PlanningStatus {
    h.eventually("a new plan in status.planning", || async {
        let planning = h.features().get("demo").await.ok()?.status?.planning?;
        (planning.dag_hash.as_deref() != Some(hash)).then_some(planning)
    })
    .await
}

/// How often Events of `reason` happened.
async fn occurrences(h: &Harness, reason: &str) -> i32 {
    h.events_with_reason(reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

async fn run_done(h: &Harness, tasks: &[&str]) -> Feature {
    for task in tasks {
        let pod = h.wait_for_pod(&format!("demo-{task}-a1")).await;
        h.finish_done(&pod).await;
    }
    h.wait_for_feature_phase("demo", "Complete").await
}

#[tokio::test]
async fn a_done_workers_proposal_extends_the_plan_and_its_task_runs() {
    let h = Harness::start().await;
    let (hash, count) = plan_running(&h, planning_feature("demo", "Automatic"), "Automatic").await;
    proposes_and_is_done(&h, &count, POLISH).await;

    let planning = plan_after(&h, &hash).await;
    assert_eq!(planning.tasks, 3);
    assert_eq!(planning.proposed, ["polish"]);
    let approval = planning.approval.expect("approval");
    assert_eq!(approval.state, ApprovalState::Approved);
    assert_eq!(Some(approval.hash), planning.dag_hash);
    let polish = h
        .eventually("the proposed Task", || async {
            h.tasks().get_opt("demo-polish").await.ok().flatten()
        })
        .await;
    assert_eq!(polish.spec.fields.depends_on, ["demo-count"]);
    let events = h.events_with_reason("TasksProposed").await;
    assert_mentions(
        &events[0].note.clone().unwrap_or_default(),
        &["count", "polish"],
    );

    let done = run_done(&h, &["docs", "polish"]).await;
    let planning = done.status.and_then(|s| s.planning).expect("planning");
    assert_eq!(
        planning.running, None,
        "the extended plan is the only one: {planning:?}"
    );
    let plan = h.config_map("demo-plan").await;
    assert_mentions(
        &plan.data.unwrap_or_default()["tasks.yaml"],
        &["polish", "docs"],
    );
    let proposal = h.config_maps().get_opt("demo-count-a1-proposal").await;
    assert!(
        proposal.expect("get").is_none(),
        "a read proposal is deleted"
    );
    let task = h.tasks().get("demo-count").await.expect("Task demo-count");
    assert!(!task.annotations().contains_key("proposal.ralph.dev/a1"));
    h.stop().await;
}

#[tokio::test]
async fn a_proposal_waits_for_manual_approval_while_the_running_plan_goes_on() {
    let h = Harness::start().await;
    let (hash, count) = plan_running(&h, planning_feature("demo", "Manual"), "Manual").await;
    proposes_and_is_done(&h, &count, POLISH).await;

    let planning = plan_after(&h, &hash).await;
    assert_eq!(planning.running.as_deref(), Some(hash.as_str()));
    let approval = planning.approval.expect("approval");
    assert_eq!(approval.state, ApprovalState::Pending);
    // The running plan's next task starts and ends; the Feature waits for the new plan.
    let docs = h.wait_for_pod("demo-docs-a1").await;
    h.finish_done(&docs).await;
    h.wait_for_feature_phase("demo", "AwaitingApproval").await;
    let polish = h.tasks().get_opt("demo-polish").await.expect("get");
    assert!(polish.is_none(), "a proposed task ran before its approval");

    annotate(&h, "demo", json!({"ralph.dev/approve-plan": approval.hash})).await;
    let done = run_done(&h, &["polish"]).await;
    let planning = done.status.and_then(|s| s.planning).expect("planning");
    assert_eq!(planning.tasks, 3);
    h.stop().await;
}

#[tokio::test]
async fn rejecting_proposed_tasks_keeps_the_running_plan() {
    let h = Harness::start().await;
    let (hash, count) = plan_running(&h, planning_feature("demo", "Manual"), "Manual").await;
    proposes_and_is_done(&h, &count, POLISH).await;
    let waiting = plan_after(&h, &hash).await;
    let proposed = waiting.approval.expect("approval").hash;
    annotate(
        &h,
        "demo",
        json!({"ralph.dev/reject-plan": proposed, "ralph.dev/reject-comment": "not now"}),
    )
    .await;
    let docs = h.wait_for_pod("demo-docs-a1").await;
    h.finish_done(&docs).await;
    let done = h.wait_for_feature_phase("demo", "Complete").await;
    let planning = done.status.and_then(|s| s.planning).expect("planning");
    assert_eq!(planning.dag_hash.as_deref(), Some(hash.as_str()));
    assert_eq!((planning.tasks, planning.running), (2, None));
    assert!(planning.proposed.is_empty(), "{:?}", planning.proposed);
    let approval = planning.approval.expect("approval");
    assert_eq!(approval.state, ApprovalState::Approved);
    assert_mentions(
        approval.comment.as_deref().unwrap_or_default(),
        &["polish", "not now"],
    );
    assert!(
        h.tasks()
            .get_opt("demo-polish")
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(h.events_with_reason("PlanRejected").await.len(), 1);
    h.stop().await;
}

/// Feature `demo` (Automatic) that plans at most `max_tasks` tasks.
fn limited_feature(max_tasks: u32) -> serde_json::Value {
    feature_manifest(
        "demo",
        json!([{"name": "setup", "title": "Set the project up"}]),
        json!({
            "context": {"spec": {"inline": "Build a word counter."}},
            "planning": {"approval": "Automatic", "maxTasks": max_tasks}
        }),
    )
}

#[tokio::test]
async fn a_refused_proposal_is_a_warning_and_changes_nothing() {
    let cases = [
        (
            100,
            "tasks:\n  - {name: a, dependsOn: [b], acceptance: [x]}\n  - {name: b, dependsOn: [a], acceptance: [x]}\n",
            "cycle",
        ),
        (
            100,
            "tasks:\n  - {name: a, dependsOn: [ghost], acceptance: [x]}\n",
            "ghost",
        ),
        (2, POLISH, "maxTasks (0)"),
    ];
    for (max_tasks, proposal, problem) in cases {
        let h = Harness::start().await;
        let (hash, count) = plan_running(&h, limited_feature(max_tasks), "Automatic").await;
        proposes_and_is_done(&h, &count, proposal).await;
        let refused = h
            .eventually("a ProposalRefused Event", || async {
                h.events_with_reason("ProposalRefused").await.pop()
            })
            .await;
        assert_mentions(&refused.note.unwrap_or_default(), &["count", problem]);
        let done = run_done(&h, &["docs"]).await;
        let planning = done.status.and_then(|s| s.planning).expect("planning");
        assert_eq!(
            planning.dag_hash.as_deref(),
            Some(hash.as_str()),
            "{problem}"
        );
        assert!(planning.proposed.is_empty());
        assert_eq!(occurrences(&h, "TasksProposed").await, 0);
        h.stop().await;
    }
}

#[tokio::test]
async fn a_proposal_of_an_attempt_that_did_not_end_done_is_ignored() {
    let h = Harness::start().await;
    let (hash, count) = plan_running(&h, planning_feature("demo", "Automatic"), "Automatic").await;
    upload_proposal(&h, &count, POLISH).await;
    h.finish_with_result(
        &count,
        json!({"sigils": {"taskFailed": "count"}, "proposed": true}),
    )
    .await;
    let retry = h.wait_for_pod("demo-count-a2").await;
    h.finish_done(&retry).await;
    let done = run_done(&h, &["docs"]).await;
    let planning = done.status.and_then(|s| s.planning).expect("planning");
    assert_eq!(planning.dag_hash.as_deref(), Some(hash.as_str()));
    assert!(planning.proposed.is_empty());
    assert_eq!(occurrences(&h, "TasksProposed").await, 0);
    let polish = h.tasks().get_opt("demo-polish").await.expect("get");
    assert!(polish.is_none());
    h.stop().await;
}

#[tokio::test]
async fn a_proposal_is_read_once_while_the_feature_and_task_watches_lag() {
    let h =
        Harness::start_with_features_and_tasks_lagging(std::time::Duration::from_millis(400)).await;
    let (hash, count) = plan_running(&h, planning_feature("demo", "Automatic"), "Automatic").await;
    proposes_and_is_done(&h, &count, POLISH).await;
    let planning = plan_after(&h, &hash).await;
    assert_eq!(planning.proposed, ["polish"]);
    let done = run_done(&h, &["docs", "polish"]).await;
    let planning = done.status.and_then(|s| s.planning).expect("planning");
    assert_eq!(
        (planning.tasks, planning.proposed),
        (3, vec!["polish".to_owned()])
    );
    assert_eq!(occurrences(&h, "TasksProposed").await, 1);
    assert_eq!(occurrences(&h, "ProposalRefused").await, 0);
    h.stop().await;
}

/// The planner writes `count` and `docs`; `count`'s worker proposes `polish` after its work.
const PROPOSING_SCRIPT: &str = r##"
tasks:
  planning:
    - - tool: {path: .ralph-planning/tasks.yaml, write: "tasks:\n  - {name: count, title: Count words, acceptance: [counts]}\n  - {name: docs, title: Document it, dependsOn: [count], acceptance: [documented]}\n"}
      - text: "The plan is written."
  count:
    - [ {tool: {path: count.txt, write: "count\n"}}, {text: "Wrote it; the output needs polish.\n<ralph:propose-tasks>\ntasks:\n  - {name: polish, title: Polish the output, dependsOn: [count], acceptance: [no trailing space]}\n</ralph:propose-tasks>\n<task-done>count</task-done>"} ]
  docs:
    - [ {tool: {path: docs.txt, write: "docs\n"}}, {text: "Wrote it. <task-done>docs</task-done>"} ]
  polish:
    - [ {tool: {path: polish.txt, write: "polish\n"}}, {text: "Polished. <task-done>polish</task-done>"} ]
"##;

/// The whole path on a node: the worker Pod runs the real runner, which writes the scripted
/// agent's proposal to its proposal file, and the real claim-keeper, which uploads it; the
/// proposed task joins the plan and runs to Complete, and no proposal file is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_node_a_workers_proposed_task_joins_the_plan_and_runs_to_complete() {
    let world = crate::support::git_cluster::World::with_credentials().await;
    let h = &world.harness;
    let feature = world.feature_with(
        "counter",
        PROPOSING_SCRIPT,
        json!([]),
        json!({
            "context": {"spec": {"inline": "Count words."}},
            "planning": {"approval": "Automatic"}
        }),
    );
    h.create_feature(feature).await;
    let done = h.wait_for_feature_phase("counter", "Complete").await;

    let planning = done
        .status
        .and_then(|s| s.planning)
        .expect("status.planning");
    assert_eq!(
        (planning.tasks, planning.proposed),
        (3, vec!["polish".to_owned()])
    );
    let files = world.git.files("app", &world.feature_branch("counter"));
    assert!(files.iter().any(|f| f == "polish.txt"), "{files:?}");
    assert!(
        !files.iter().any(|f| f.contains("proposal")),
        "the proposal was committed: {files:?}"
    );
    assert!(
        h.config_maps()
            .get_opt("counter-count-a1-proposal")
            .await
            .expect("get")
            .is_none(),
        "the proposal is deleted once read"
    );
}
