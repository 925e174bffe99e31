//! `ralph plan show|approve|reject feature/NAME`: the real `ralph` binary against the fake
//! API server, reading a Feature whose `status.planning`, plan ConfigMap and planned Tasks
//! the tests write as the controller would, and answering with annotations on the Feature.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use ralph::api::labels::{
    APPROVE_PLAN_ANNOTATION, FEATURE_LABEL, PLAN_ANSWERED_BY_ANNOTATION, PLAN_LABEL,
    REJECT_COMMENT_ANNOTATION, REJECT_PLAN_ANNOTATION, TASK_LABEL,
};
use ralph::api::planning::plan_config_map_name;
use ralph::api::{Feature, Task};
use serde_json::{Value, json};

use crate::support::fake_apiserver::{FakeApiServer, server};
use crate::support::mentions::assert_mentions;

const NS: &str = "team";
const FEATURE: &str = "counter";
/// The current plan's hash, as the controller would have computed it.
const HASH: &str = "0123456789abcdef";

/// The plan's tasks in the canonical form the controller keeps.
const TASKS: &str = "tasks:
- name: write-greeting
  title: Write the greeting
  acceptance:
  - greeting.txt holds the greeting
- name: review-greeting
  title: Review the greeting
  dependsOn:
  - write-greeting
  acceptance:
  - the greeting is right
";

const DOCUMENT: &str = "# Greeting\n\nWrite it, then review it.\n";

/// A fake cluster with a kubeconfig pointing `ralph` at it (default namespace `default`,
/// so the tests' `-n` is what finds the Feature).
struct Cluster {
    server: FakeApiServer,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn new() -> Self {
        let server = server().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kubeconfig"),
            server.kubeconfig_yaml("default"),
        )
        .unwrap();
        Self { server, dir }
    }

    /// The Feature `counter` planning with `approval` (`None`: no `spec.planning`).
    async fn feature(&self, approval: Option<&str>) -> &Self {
        let mut spec = json!({
            "agent": {"image": "agent:1", "command": ["agent"]},
            "context": {"spec": {"inline": "Write a greeting, then review it."}},
        });
        if let Some(approval) = approval {
            spec["planning"] = json!({"approval": approval});
        }
        let feature: Feature = serde_json::from_value(json!({
            "apiVersion": "ralph.dev/v1alpha1",
            "kind": "Feature",
            "metadata": {"name": FEATURE, "namespace": NS},
            "spec": spec,
        }))
        .unwrap();
        self.features()
            .create(&PostParams::default(), &feature)
            .await
            .unwrap();
        self
    }

    /// `status.planning` as the controller writes it for the plan [`HASH`], approval
    /// `approval` (`null`: none recorded yet).
    async fn planning_status(&self, approval: Value) -> &Self {
        let status = json!({"status": {"planning": {
            "attempts": 1, "dagHash": HASH, "tasks": 2, "approval": approval,
        }}});
        self.features()
            .patch_status(FEATURE, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        self
    }

    /// The plan ConfigMap of [`HASH`], as the controller keeps it.
    async fn plan_config_map(&self) -> &Self {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": plan_config_map_name(FEATURE), "namespace": NS},
            "data": {"hash": HASH, "tasks.yaml": TASKS, "plan.md": DOCUMENT},
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(self.server.client_in(NS), NS)
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();
        self
    }

    /// The planned Task of `task`, in `phase`.
    async fn planned_task(&self, task: &str, phase: &str) -> &Self {
        let name = format!("{FEATURE}-{task}");
        let object: Task = serde_json::from_value(json!({
            "apiVersion": "ralph.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": name, "namespace": NS, "labels": {
                FEATURE_LABEL: FEATURE, TASK_LABEL: task, PLAN_LABEL: HASH,
            }},
            "spec": {"featureRef": FEATURE, "title": task},
        }))
        .unwrap();
        let tasks = Api::<Task>::namespaced(self.server.client_in(NS), NS);
        tasks.create(&PostParams::default(), &object).await.unwrap();
        let status = json!({"status": {"phase": phase}});
        tasks
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        self
    }

    fn features(&self) -> Api<Feature> {
        Api::namespaced(self.server.client_in(NS), NS)
    }

    /// The Feature's annotations now.
    async fn annotations(&self) -> BTreeMap<String, String> {
        let feature = self.features().get(FEATURE).await.unwrap();
        feature.metadata.annotations.unwrap_or_default()
    }

    /// Runs `ralph plan ARGS feature/counter -n team` as user `alice`, without a terminal.
    async fn plan(&self, args: &[&str]) -> Output {
        let target = format!("feature/{FEATURE}");
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
            .arg("plan")
            .args(args)
            .args([target.as_str(), "-n", NS])
            .current_dir(self.dir.path())
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("USER", "alice")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap()
    }
}

impl Cluster {
    /// Runs `ralph plan approve feature/counter -n team` on a terminal (util-linux `script`
    /// gives it one), typing `typed`; returns what the terminal showed and the exit code.
    async fn approve_on_a_terminal(&self, typed: &str) -> (String, i32) {
        use tokio::io::AsyncWriteExt as _;
        let command = format!(
            "{} plan approve feature/{FEATURE} -n {NS}",
            env!("CARGO_BIN_EXE_ralph")
        );
        let mut child = tokio::process::Command::new("script")
            .args(["--quiet", "--return", "--command", &command, "/dev/null"])
            .current_dir(self.dir.path())
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("USER", "alice")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("util-linux script runs");
        // Kept open until ralph is over: at its end, `script` would hang up the terminal.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(typed.as_bytes()).await.unwrap();
        let output = child.wait_with_output().await.unwrap();
        drop(stdin);
        (stdout(&output), code(&output))
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// A Manual Feature whose plan [`HASH`] waits for approval.
async fn waiting_plan() -> Cluster {
    let cluster = Cluster::new().await;
    cluster
        .feature(Some("Manual"))
        .await
        .planning_status(json!({"state": "Pending", "hash": HASH}))
        .await
        .plan_config_map()
        .await;
    cluster
}

#[tokio::test]
async fn show_prints_the_document_and_the_tasks_level_by_level_with_the_hash() {
    let cluster = waiting_plan().await;

    let shown = cluster.plan(&["show"]).await;

    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert_mentions(
        &text,
        &[
            "Feature counter (namespace team)",
            &format!("plan {HASH} (2 tasks)"),
            "Write it, then review it.",
            "level 1:\n  write-greeting — Write the greeting",
            "level 2:\n  review-greeting — Review the greeting  (after write-greeting)",
            "waiting for approval",
            &format!("--hash {HASH}"),
        ],
    );
}

#[tokio::test]
async fn show_prints_each_planned_tasks_phase_once_the_plan_is_approved() {
    let cluster = Cluster::new().await;
    cluster
        .feature(Some("Manual"))
        .await
        .planning_status(json!({"state": "Approved", "hash": HASH, "by": "bob"}))
        .await
        .plan_config_map()
        .await
        .planned_task("write-greeting", "Done")
        .await
        .planned_task("review-greeting", "Running")
        .await;

    let text = stdout(&cluster.plan(&["show"]).await);

    assert_mentions(
        &text,
        &[
            "Write the greeting  [Done]",
            "(after write-greeting)  [Running]",
            "approved by bob",
        ],
    );
}

#[tokio::test]
async fn show_json_holds_the_status_the_plan_and_the_tasks_phases() {
    let cluster = Cluster::new().await;
    cluster
        .feature(Some("Manual"))
        .await
        .planning_status(json!({"state": "Approved", "hash": HASH}))
        .await
        .plan_config_map()
        .await
        .planned_task("write-greeting", "Done")
        .await;

    let shown: Value = serde_json::from_slice(&cluster.plan(&["show", "--json"]).await.stdout)
        .expect("JSON on stdout");

    assert_eq!(shown["status"]["dagHash"], HASH);
    assert_eq!(shown["hash"], HASH);
    assert_eq!(shown["plan"]["tasks"][1]["name"], "review-greeting");
    assert_eq!(shown["document"], DOCUMENT);
    assert_eq!(
        shown["tasks"],
        json!([{"name": "write-greeting", "object": "counter-write-greeting", "phase": "Done"}])
    );
}

#[tokio::test]
async fn approve_without_a_hash_names_the_current_plan_and_who_approved() {
    let cluster = waiting_plan().await;

    let approved = cluster.plan(&["approve"]).await;

    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    assert_mentions(&stdout(&approved), &[&format!("approved plan {HASH}")]);
    let annotations = cluster.annotations().await;
    assert_eq!(annotations[APPROVE_PLAN_ANNOTATION], HASH);
    assert_eq!(annotations[PLAN_ANSWERED_BY_ANNOTATION], "alice");
}

#[tokio::test]
async fn approve_with_a_short_hash_of_the_current_plan_writes_the_full_hash() {
    let cluster = waiting_plan().await;

    let approved = cluster.plan(&["approve", "--hash", &HASH[..8]]).await;

    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    assert_eq!(cluster.annotations().await[APPROVE_PLAN_ANNOTATION], HASH);
}

#[tokio::test]
async fn a_stale_hash_changes_nothing_says_which_plan_is_current_and_exits_1() {
    let cluster = waiting_plan().await;

    let refused = cluster
        .plan(&["approve", "--hash", "fedcba9876543210"])
        .await;

    assert_eq!(code(&refused), 1, "{}", stdout(&refused));
    assert_mentions(
        &stderr(&refused),
        &["fedcba9876543210 is not the current plan", HASH],
    );
    assert!(cluster.annotations().await.is_empty());
}

#[tokio::test]
async fn reject_writes_the_hash_the_comment_and_who_rejected() {
    let cluster = waiting_plan().await;

    let rejected = cluster
        .plan(&["reject", "--comment", "Split the review in two"])
        .await;

    assert_eq!(code(&rejected), 0, "{}", stderr(&rejected));
    let annotations = cluster.annotations().await;
    assert_eq!(annotations[REJECT_PLAN_ANNOTATION], HASH);
    assert_eq!(
        annotations[REJECT_COMMENT_ANNOTATION],
        "Split the review in two"
    );
    assert_eq!(annotations[PLAN_ANSWERED_BY_ANNOTATION], "alice");
    assert!(!annotations.contains_key(APPROVE_PLAN_ANNOTATION));
}

#[tokio::test]
async fn rejecting_an_approved_plan_changes_nothing_and_exits_1() {
    let cluster = Cluster::new().await;
    cluster
        .feature(Some("Manual"))
        .await
        .planning_status(json!({"state": "Approved", "hash": HASH}))
        .await;

    let refused = cluster.plan(&["reject", "--comment", "too late"]).await;

    assert_eq!(code(&refused), 1);
    assert_mentions(&stderr(&refused), &["approved already", "nothing rejected"]);
    assert!(cluster.annotations().await.is_empty());
}

#[tokio::test]
async fn a_missing_feature_is_an_error_naming_it_and_its_namespace() {
    let cluster = Cluster::new().await;

    let refused = cluster.plan(&["approve"]).await;

    assert_eq!(code(&refused), 3);
    assert_mentions(
        &stderr(&refused),
        &["Feature counter (namespace team) not found", "-n"],
    );
}

#[tokio::test]
async fn approving_before_there_is_a_plan_is_an_error_saying_planning_runs_first() {
    let cluster = Cluster::new().await;
    cluster.feature(Some("Manual")).await;

    let refused = cluster.plan(&["approve"]).await;

    assert_eq!(code(&refused), 1);
    assert_mentions(
        &stderr(&refused),
        &[
            "Feature counter (namespace team) has no plan yet",
            "planning Task",
        ],
    );
    assert!(cluster.annotations().await.is_empty());
}

#[tokio::test]
async fn a_feature_without_spec_planning_has_no_plan_to_answer() {
    let cluster = Cluster::new().await;
    cluster.feature(None).await;

    let refused = cluster.plan(&["reject", "--comment", "no"]).await;

    assert_eq!(code(&refused), 3);
    assert_mentions(&stderr(&refused), &["has no spec.planning"]);
}

#[tokio::test]
async fn a_plan_approved_automatically_waits_for_nobody() {
    let cluster = Cluster::new().await;
    cluster
        .feature(Some("Automatic"))
        .await
        .planning_status(Value::Null)
        .await;

    let refused = cluster.plan(&["approve"]).await;

    assert_eq!(code(&refused), 1);
    assert_mentions(
        &stderr(&refused),
        &["approval: Automatic", "waits for nobody"],
    );
    assert!(cluster.annotations().await.is_empty());
}

#[tokio::test]
async fn approve_on_a_terminal_shows_the_plan_and_approves_when_answered_yes() {
    let cluster = waiting_plan().await;

    let (terminal, code) = cluster.approve_on_a_terminal("y\n").await;

    assert_eq!(code, 0, "{terminal}");
    assert_mentions(
        &terminal,
        &[
            "level 2:",
            &format!("Approve plan {HASH} of Feature counter (namespace team)? [y/N]"),
        ],
    );
    assert_eq!(cluster.annotations().await[APPROVE_PLAN_ANNOTATION], HASH);
}

#[tokio::test]
async fn approve_on_a_terminal_answered_no_changes_nothing() {
    let cluster = waiting_plan().await;

    let (terminal, code) = cluster.approve_on_a_terminal("n\n").await;

    assert_eq!(code, 1, "{terminal}");
    assert_mentions(&terminal, &["[y/N]", "nothing approved"]);
    assert!(cluster.annotations().await.is_empty());
}
