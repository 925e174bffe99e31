//! A planning attempt in the cluster (docs/planning.md), the real controller against the
//! fake API server, the test playing the kubelet and the claim-keeper: the planning Pod's
//! claim-keeper uploads the planner's answer (ConfigMap `<attempt>-answer`, made here by
//! the claim-keeper's own builder); a valid answer becomes the Feature's plan ConfigMap
//! with its hash and the planning Task is done; a refused one is planned again at once with
//! its problems in the next prompt, until more than `maxInvalidAnswers` were; a finished
//! attempt that uploaded nothing is a crash; and the controller waits for an answer while
//! the claim-keeper still runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use ralph::api::AttemptOutcome;
use ralph::controller::sidecar::{AnswerUpload, answer_config_map};
use ralph::engine::dag::TaskPhase;
use serde_json::json;

use crate::support::harness::{Harness, NS, feature_manifest, prompt_of};
use crate::support::mentions::assert_mentions;

/// A Feature `name` that plans at once from a spec, with no hand-written task;
/// `planning` adds to its `spec.planning`.
fn planning_feature(name: &str, planning: serde_json::Value) -> serde_json::Value {
    let mut spec_planning = json!({"approval": "Automatic"});
    if let (Some(base), Some(extra)) = (spec_planning.as_object_mut(), planning.as_object()) {
        base.extend(extra.clone());
    }
    feature_manifest(
        name,
        json!([]),
        json!({
            "context": {"spec": {"inline": "Build a word counter."}},
            "planning": spec_planning
        }),
    )
}

const VALID: &str = "tasks:
  - name: count
    title: Count words
    acceptance: [\"`echo a b | sh count.sh` prints 2\"]
";

/// A task that depends on one nobody wrote.
const INVALID: &str = "tasks:
  - name: count
    title: Count words
    dependsOn: [tokenize]
    acceptance: [counts]
";

/// What the claim-keeper of `pod` uploads when the planner left `files` (name, text) in
/// its answer directory.
async fn claim_keeper_uploads(h: &Harness, pod: &Pod, files: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("answer file");
    }
    let upload = AnswerUpload {
        dir: dir.path().to_path_buf(),
        config_map: format!("{}-answer", pod.name_any()),
        feature: pod.labels()["ralph.dev/feature"].clone(),
        pod_name: pod.name_any(),
        pod_uid: pod.uid().unwrap_or_default(),
    };
    h.config_maps()
        .create(&PostParams::default(), &answer_config_map(&upload, NS))
        .await
        .expect("upload the answer");
}

/// The planner of `pod` finished its turn (no verdict: the file is its answer).
async fn planner_finishes(h: &Harness, pod: &Pod) {
    h.finish_with_result(
        pod,
        json!({"usage": {"inputTokens": 100, "outputTokens": 20}}),
    )
    .await;
}

async fn planning_status(h: &Harness, feature: &str) -> ralph::api::TaskStatus {
    h.task_status(&format!("{feature}-planning")).await
}

/// The planning Task's status once its attempt `number` ended.
async fn ended(h: &Harness, feature: &str, number: u32) -> ralph::api::TaskStatus {
    h.eventually(&format!("planning attempt {number} ended"), || async {
        let task = h.tasks().get(&format!("{feature}-planning")).await.ok()?;
        let status = task.status?;
        let ended = status
            .attempts
            .iter()
            .any(|a| a.number == number && a.outcome.is_some());
        ended.then_some(status)
    })
    .await
}

#[tokio::test]
async fn a_valid_answer_becomes_the_features_plan_with_its_hash_and_the_planning_task_is_done() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("words", json!({}))).await;
    let planner = h.wait_for_pod("words-planning-a1").await;
    claim_keeper_uploads(
        &h,
        &planner,
        &[("tasks.yaml", VALID), ("plan.md", "# Count\n")],
    )
    .await;
    planner_finishes(&h, &planner).await;

    let status = ended(&h, "words", 1).await;
    assert_eq!(status.phase, TaskPhase::Done);
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Done));
    let plan = h.config_map("words-plan").await;
    let data = plan.data.clone().unwrap_or_default();
    assert!(data["tasks.yaml"].contains("name: count"), "{data:?}");
    assert_eq!(data.get("plan.md").map(String::as_str), Some("# Count\n"));
    let owner = &plan.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Feature", "words")
    );
    let dag_hash = h
        .eventually("the plan in status.planning", || async {
            h.features()
                .get("words")
                .await
                .ok()?
                .status?
                .planning?
                .dag_hash
        })
        .await;
    assert_eq!(
        data.get("hash"),
        Some(&dag_hash),
        "the status reads the hash kept"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_answer_config_map_is_deleted_once_read() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("gone", json!({}))).await;
    let planner = h.wait_for_pod("gone-planning-a1").await;
    claim_keeper_uploads(&h, &planner, &[("tasks.yaml", VALID)]).await;
    planner_finishes(&h, &planner).await;
    ended(&h, "gone", 1).await;
    h.eventually("the answer deleted", || async {
        let left = h
            .config_maps()
            .get_opt("gone-planning-a1-answer")
            .await
            .ok()?;
        left.is_none().then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_refused_answer_is_planned_again_at_once_with_its_problems_in_the_next_prompt() {
    let h = Harness::start().await;
    let mut manifest = planning_feature("again", json!({}));
    // A retry would wait ten minutes.
    manifest["spec"]["retry"] =
        json!({"maxRetries": 3, "backoffBaseSeconds": 600, "backoffMaxSeconds": 600});
    h.create_feature(manifest).await;
    let planner = h.wait_for_pod("again-planning-a1").await;
    claim_keeper_uploads(&h, &planner, &[("tasks.yaml", INVALID)]).await;
    planner_finishes(&h, &planner).await;

    let status = ended(&h, "again", 1).await;
    assert_eq!(status.retry_count, 0, "a refused answer is no retry");
    let refused = status.attempts[0].reason.clone().unwrap_or_default();
    assert!(refused.starts_with("answer refused: "), "{refused}");
    assert_mentions(&refused, &["tokenize"]);
    // Planned again at once (the harness's patience is far below the backoff).
    let next = h.wait_for_pod("again-planning-a2").await;
    let prompt = prompt_of(&next);
    assert_mentions(&prompt, &["Your previous answer was refused", "tokenize"]);
    h.stop().await;
}

#[tokio::test]
async fn more_refused_answers_in_a_row_than_allowed_fail_the_planning_task_naming_the_problems() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("strict", json!({"maxInvalidAnswers": 0})))
        .await;
    let planner = h.wait_for_pod("strict-planning-a1").await;
    claim_keeper_uploads(&h, &planner, &[("tasks.yaml", INVALID)]).await;
    planner_finishes(&h, &planner).await;

    let status = ended(&h, "strict", 1).await;
    assert_eq!(status.phase, TaskPhase::Failed);
    assert_mentions(
        &status.message.unwrap_or_default(),
        &["planning failed", "maxInvalidAnswers is 0", "tokenize"],
    );
    h.stop().await;
}

#[tokio::test]
async fn a_planner_that_wrote_no_task_list_is_told_so_in_the_next_prompt() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("blank", json!({}))).await;
    let planner = h.wait_for_pod("blank-planning-a1").await;
    claim_keeper_uploads(&h, &planner, &[]).await;
    planner_finishes(&h, &planner).await;

    let status = ended(&h, "blank", 1).await;
    assert_mentions(
        &status.attempts[0].reason.clone().unwrap_or_default(),
        &[
            "answer refused",
            "the task list was not written to",
            "tasks.yaml",
        ],
    );
    let next = h.wait_for_pod("blank-planning-a2").await;
    assert_mentions(&prompt_of(&next), &["the task list was not written to"]);
    h.stop().await;
}

#[tokio::test]
async fn a_finished_attempt_whose_claim_keeper_uploaded_nothing_is_a_crash() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("mute", json!({}))).await;
    let planner = h.wait_for_pod("mute-planning-a1").await;
    planner_finishes(&h, &planner).await;

    let status = ended(&h, "mute", 1).await;
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Crashed));
    assert_mentions(
        &status.attempts[0].crash.clone().unwrap_or_default(),
        &["claim-keeper uploaded no", "mute-planning-a1-answer"],
    );
    h.stop().await;
}

#[tokio::test]
async fn the_controller_waits_for_the_answer_while_the_claim_keeper_still_runs() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("slow", json!({}))).await;
    let planner = h.wait_for_pod("slow-planning-a1").await;
    agent_ended_claim_keeper_running(&h, &planner).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let status = planning_status(&h, "slow").await;
    assert!(
        status.attempts.iter().all(|a| a.outcome.is_none()),
        "concluded before the claim-keeper ended: {status:?}"
    );

    claim_keeper_uploads(&h, &planner, &[("tasks.yaml", VALID)]).await;
    planner_finishes(&h, &planner).await;
    assert_eq!(ended(&h, "slow", 1).await.phase, TaskPhase::Done);
    h.stop().await;
}

/// Kubelet stand-in: the agent container ended with the planner's result while the
/// claim-keeper (a native sidecar) still runs.
async fn agent_ended_claim_keeper_running(h: &Harness, pod: &Pod) {
    let name = pod.name_any();
    let result = json!({
        "version": 1,
        "task": "planning",
        "attempt": name,
        "outcome": "finished",
        "stopReason": "end_turn",
        "exitCode": 0,
        "timings": {"startedAtMs": 0, "endedAtMs": jiff::Timestamp::now().as_millisecond()}
    });
    let status = json!({"status": {
        "phase": "Running",
        "initContainerStatuses": [{
            "name": "claim-keeper", "image": "ralph", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        }],
        "containerStatuses": [{
            "name": "agent", "image": "agent:test", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": result.to_string()}}
        }]
    }});
    h.pods()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("report the agent ended");
}

#[tokio::test]
async fn the_planning_pod_uploads_its_answer_and_runs_no_finishing_step() {
    let h = Harness::start().await;
    h.create_feature(planning_feature("shape", json!({}))).await;
    let planner = h.wait_for_pod("shape-planning-a1").await;
    let spec = planner.spec.clone().expect("spec");
    let keeper = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == "claim-keeper")
        .expect("a claim-keeper");
    let args = keeper.args.clone().unwrap_or_default().join(" ");
    assert_mentions(&args, &["--answer-config-map shape-planning-a1-answer"]);
    assert!(!spec.containers.iter().any(|c| c.name == "git-finish"));
    assert_mentions(
        &prompt_of(&planner),
        &[
            "# Plan the feature shape",
            "/workspace/.ralph-planning/tasks.yaml",
            "ralph plan check",
        ],
    );
    h.stop().await;
}

/// The planner writes two tasks; every other task writes its file and is done.
const PLANNER_SCRIPT: &str = r##"
tasks:
  planning:
    - - tool: {path: .ralph-planning/plan.md, write: "# Words\nFirst the counter, then its docs.\n"}
      - tool: {path: .ralph-planning/tasks.yaml, write: "tasks:\n  - {name: count, title: Count words, acceptance: [counts]}\n  - {name: docs, title: Document it, dependsOn: [count], acceptance: [documented]}\n"}
      - text: "The plan is written."
  count:
    - [ {tool: {path: count.txt, write: "count\n"}}, {text: "Wrote it. <task-done>count</task-done>"} ]
  docs:
    - [ {tool: {path: docs.txt, write: "docs\n"}}, {text: "Wrote it. <task-done>docs</task-done>"} ]
"##;

/// The whole path on a node: the planning Pod runs the real runner, the scripted planner and
/// the claim-keeper (under the agent ServiceAccount's RBAC), which uploads the answer; the
/// controller keeps it as the plan, creates its Tasks, and they run to Complete on the
/// feature branch, which holds no answer file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_node_the_planning_pods_answer_becomes_the_plan_that_runs_to_complete() {
    let world = crate::support::git_cluster::World::with_credentials().await;
    let h = &world.harness;
    let feature = world.feature_with(
        "counter",
        PLANNER_SCRIPT,
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
    assert_eq!(planning.tasks, 2);
    let plan = h.config_map("counter-plan").await;
    let data = plan.data.clone().unwrap_or_default();
    assert_eq!(data.get("hash"), planning.dag_hash.as_ref());
    assert!(data["plan.md"].contains("First the counter"), "{data:?}");
    assert!(
        h.config_maps()
            .get_opt("counter-planning-a1-answer")
            .await
            .expect("get")
            .is_none(),
        "the answer is deleted once read"
    );
    let subjects = world.subjects("counter").join("\n");
    assert_mentions(&subjects, &["count", "docs"]);
    assert!(!subjects.contains("planning"), "{subjects}");
    let files = world.git.files("app", &world.feature_branch("counter"));
    assert!(
        !files.iter().any(|f| f.starts_with(".ralph-planning")),
        "the answer was committed: {files:?}"
    );
    assert!(files.iter().any(|f| f == "docs.txt"), "{files:?}");
}
