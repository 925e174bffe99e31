use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::AttemptRecord;
use crate::api::Task;
use crate::controller::plan::cached::CachedTask;
use crate::controller::testing::{assert_problem, object};

fn feature(git: serde_json::Value) -> Feature {
    let metadata = serde_json::json!({"name": "login", "namespace": "team", "generation": 2});
    let spec = serde_json::json!({
        "agent": {"command": ["agent"], "image": "agent:1"},
        "tasks": [],
        "workspace": {"git": git}
    });
    object("Feature", metadata, spec)
}

fn https_feature() -> Feature {
    feature(serde_json::json!({
        "url": "https://git.example.com/team/app.git",
        "baseRef": "main",
        "credentialsSecretRef": {"name": "repo-creds"}
    }))
}

fn secret(keys: &[&str]) -> Secret {
    Secret {
        data: Some(
            keys.iter()
                .map(|k| ((*k).to_owned(), ByteString(b"x".to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    }
}

fn problem(feature: &Feature, secret: Option<&Secret>) -> Option<Problem> {
    let git = feature.spec.git().expect("git workspace");
    secret_problem(feature, git, secret)
}

#[test]
fn a_missing_credentials_secret_is_named_with_its_namespace_and_the_fix() {
    assert_problem(
        problem(&https_feature(), None),
        conditions::REASON_GIT_CREDENTIALS_MISSING,
        &["team/repo-creds", "does not exist"],
    );
}

#[test]
fn a_secret_without_the_token_key_names_the_key() {
    let found = problem(&https_feature(), Some(&secret(&["username"]))).expect("a problem");
    assert!(found.message.contains("`password`"), "{}", found.message);
    assert!(!found.message.contains("`username`"), "{}", found.message);
}

#[test]
fn a_secret_with_username_and_password_is_fine() {
    assert_eq!(
        problem(&https_feature(), Some(&secret(&["username", "password"]))),
        None
    );
}

#[test]
fn an_ssh_url_needs_the_key_and_known_hosts() {
    let f = feature(serde_json::json!({
        "url": "git@git.example.com:team/app.git",
        "baseRef": "main",
        "credentialsSecretRef": {"name": "deploy-key"}
    }));
    let found = problem(&f, Some(&secret(&["ssh-privatekey"]))).expect("a problem");
    assert!(found.message.contains("`known_hosts`"), "{}", found.message);
}

#[test]
fn a_url_with_a_password_in_it_is_a_configuration_problem() {
    let f = feature(serde_json::json!({
        "url": "https://bob:hunter2@git.example.com/app.git",
        "baseRef": "main"
    }));
    let git = f.spec.git().expect("git");
    let found = settings_problem(&f, git).expect("a problem");
    assert_eq!(found.reason, conditions::REASON_GIT_WORKSPACE_INVALID);
    assert!(!found.message.contains("hunter2"), "{}", found.message);
}

fn task_with(attempts: Vec<AttemptRecord>) -> Arc<CachedTask> {
    let metadata = serde_json::json!({"name": "login-a", "namespace": "team"});
    let mut task: Task = object("Task", metadata, serde_json::json!({"featureRef": "login"}));
    task.status = Some(TaskStatus {
        attempts,
        ..TaskStatus::default()
    });
    Arc::new(task.into())
}

fn integrated(number: u32, head: &str, ended_ms: i64) -> AttemptRecord {
    AttemptRecord {
        number,
        ended_at: Some(Time(
            jiff::Timestamp::from_millisecond(ended_ms).expect("time"),
        )),
        workspace: Some(Box::new(WorkspaceReport {
            feature_head: Some(head.to_owned()),
            ..WorkspaceReport::new(WorkspaceOutcome::Integrated)
        })),
        ..AttemptRecord::default()
    }
}

#[test]
fn the_feature_branch_head_is_the_newest_integration() {
    let tasks = vec![
        task_with(vec![integrated(1, "aaa", 1_000)]),
        task_with(vec![
            AttemptRecord {
                number: 1,
                workspace: Some(Box::new(WorkspaceReport::new(WorkspaceOutcome::Conflict))),
                ..AttemptRecord::default()
            },
            integrated(2, "bbb", 2_000),
        ]),
    ];
    let status = branch_status(&https_feature(), &tasks).expect("branch status");
    assert_eq!(status.branch, "ralph/login");
    assert_eq!(status.head.as_deref(), Some("bbb"));
    assert_eq!(status.integrated, 2);
}

/// An integration of `head` put on top of `onto`, ended at `ended_ms`.
fn integrated_onto(head: &str, onto: &str, ended_ms: i64) -> AttemptRecord {
    let mut record = integrated(1, head, ended_ms);
    if let Some(report) = record.workspace.as_mut() {
        report.integrated_onto = Some(onto.to_owned());
    }
    record
}

#[test]
fn the_feature_branch_head_is_the_integration_nothing_was_put_on_top_of() {
    // "ccc" was pushed last, on top of "bbb", though its agent ended first.
    let tasks = vec![
        task_with(vec![integrated_onto("bbb", "aaa", 2_000)]),
        task_with(vec![integrated_onto("ccc", "bbb", 1_000)]),
        task_with(vec![integrated_onto("aaa", "base", 1_000)]),
    ];
    let status = branch_status(&https_feature(), &tasks).expect("branch status");
    assert_eq!(status.head.as_deref(), Some("ccc"));
    assert_eq!(status.integrated, 3);
}

#[test]
fn a_feature_without_git_has_no_branch_status() {
    let f: Feature = object(
        "Feature",
        serde_json::json!({"name": "login", "namespace": "team"}),
        serde_json::json!({"agent": {"command": ["agent"]}, "tasks": []}),
    );
    assert_eq!(branch_status(&f, &[]), None);
}
