//! The Argo CD health checks (config/argocd/*.lua), run in a real Lua 5.4 interpreter
//! the way Argo CD runs them: the resource as global `obj`, the chunk returns
//! `{status, message}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use mlua::{Lua, LuaSerdeExt, Table};
use serde_json::{Value, json};

fn config(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/argocd")
        .join(file)
}

fn script(file: &str) -> String {
    std::fs::read_to_string(config(file)).unwrap_or_else(|e| panic!("reading {file}: {e}"))
}

/// (status, message) the script gives for `object`.
fn health(file: &str, object: Value) -> (String, String) {
    let lua = Lua::new();
    let obj = lua.to_value(&object).expect("object converts to Lua");
    lua.globals().set("obj", obj).expect("set obj");
    let result: Table = lua
        .load(script(file))
        .set_name(file)
        .eval()
        .unwrap_or_else(|e| panic!("{file} failed: {e}"));
    let status: String = result.get("status").expect("status");
    let message: String = result.get("message").unwrap_or_default();
    (status, message)
}

fn feature(status: Value) -> Value {
    json!({ "metadata": { "name": "f", "generation": 2 }, "status": status })
}

fn feature_health(phase: &str) -> String {
    let object = feature(
        json!({ "phase": phase, "observedGeneration": 2, "counts": { "total": 3, "done": 1 } }),
    );
    health("feature-health.lua", object).0
}

fn task_health(phase: &str) -> String {
    health(
        "task-health.lua",
        json!({ "metadata": { "name": "t" }, "status": { "phase": phase } }),
    )
    .0
}

/// Asserts that `health` calls an object in each of `phases` `expected`.
fn assert_health_of_each(health: fn(&str) -> String, phases: &[&str], expected: &str) {
    for phase in phases {
        assert_eq!(health(phase), expected, "{phase}");
    }
}

/// One `#[test]` per row: the health script calls an object in each of the phases (of a
/// Feature for `feature_health`, of a Task for `task_health`) the status after `=>`.
macro_rules! health_tests {
    ($($test:ident: $health:ident($($phase:literal),+) => $status:literal;)*) => {
        $(
            #[test]
            fn $test() {
                assert_health_of_each($health, &[$($phase),+], $status);
            }
        )*
    };
}

health_tests! {
    complete_feature_is_healthy: feature_health("Complete") => "Healthy";
    feature_without_tasks_is_healthy: feature_health("NoPlan") => "Healthy";
    failed_blocked_invalid_limited_or_halted_feature_is_degraded:
        feature_health("Failed", "Blocked", "Invalid", "LimitReached", "Halted") => "Degraded";
    suspended_feature_is_suspended: feature_health("Suspended") => "Suspended";
    pending_or_running_feature_is_progressing:
        feature_health("Pending", "Running") => "Progressing";
    done_task_is_healthy: task_health("Done") => "Healthy";
    failed_or_blocked_task_is_degraded: task_health("Failed", "Blocked") => "Degraded";
    pending_or_running_task_is_progressing: task_health("Pending", "Running") => "Progressing";
}

#[test]
fn feature_without_status_is_progressing() {
    let (status, message) = health("feature-health.lua", json!({ "metadata": { "name": "f" } }));
    assert_eq!(status, "Progressing");
    assert!(message.contains("Waiting"), "{message}");
}

#[test]
fn feature_whose_spec_is_not_yet_observed_is_progressing() {
    let object = feature(json!({ "phase": "Complete", "observedGeneration": 1 }));
    assert_eq!(health("feature-health.lua", object).0, "Progressing");
}

#[test]
fn feature_message_counts_done_tasks_and_carries_the_status_message() {
    let object = feature(json!({
        "phase": "Failed", "observedGeneration": 2,
        "counts": { "total": 3, "done": 2 }, "message": "agent promised FAILURE",
    }));
    let (_, message) = health("feature-health.lua", object);
    assert_eq!(message, "Failed: 2/3 tasks done (agent promised FAILURE)");
}

#[test]
fn task_message_names_attempts_and_last_failure() {
    let object =
        json!({ "status": { "phase": "Failed", "attemptCount": 3, "lastFailure": "exit 1" } });
    assert_eq!(
        health("task-health.lua", object).1,
        "Failed after 3 attempt(s): exit 1"
    );
}

#[test]
fn argocd_cm_embeds_the_scripts_unchanged() {
    let text =
        std::fs::read_to_string(config("argocd-cm-health.yaml")).expect("argocd-cm-health.yaml");
    let cm: Value = serde_yaml_ng::from_str(&text).expect("valid YAML");
    let data = &cm["data"];
    assert_eq!(
        data["resource.customizations.health.ralph.dev_Feature"],
        script("feature-health.lua")
    );
    assert_eq!(
        data["resource.customizations.health.ralph.dev_Task"],
        script("task-health.lua")
    );
}

fn misconfigured(phase: &str) -> Value {
    json!({ "phase": phase, "observedGeneration": 2, "conditions": [
        { "type": "Configured", "status": "False", "reason": "MissingAgentImage",
          "message": "Feature team/f: spec.agent.image is required" }
    ] })
}

#[test]
fn feature_with_a_configuration_problem_is_degraded_and_says_why() {
    let (status, message) = health("feature-health.lua", feature(misconfigured("Pending")));
    assert_eq!(status, "Degraded");
    assert!(message.contains("MissingAgentImage"), "{message}");
}

#[test]
fn task_with_a_configuration_problem_is_degraded() {
    let object = json!({ "metadata": { "name": "t" }, "status": misconfigured("Pending") });
    assert_eq!(health("task-health.lua", object).0, "Degraded");
}
