//! `ralph runner` answering `session/request_permission` on the tool call's merged state:
//! agents that ask with only a `toolCallId` are judged on what their `tool_call` update
//! said. The client file system is off in these scenarios, so the scripted agent writes
//! files itself and the permission answer is the only guard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::scripted;

use scripted::Scenario;

fn writing(path: &str, request: &str) -> Scenario {
    Scenario::new(
        "t",
        &format!(
            "default: [{{tool: {{path: {path}, write: \"x\", request: {request}}}}}, {{text: \"finished\"}}]\n"
        ),
    )
    .args(&["--client-fs", "never"])
}

/// The `permission` event lines the runner logged.
fn permissions(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "permission")
        .collect()
}

/// Runs `scenario`, asserts that `file` was not written in the workspace; the permission
/// events.
fn run_not_writing(scenario: &Scenario, file: &str) -> Vec<serde_json::Value> {
    let run = scenario.run();
    assert!(!scenario.workspace().join(file).exists(), "{file} written");
    permissions(&run.stdout)
}

/// Asserts that the permission `event` refused the request for a reason `explains` accepts.
fn assert_refused_because(event: &serde_json::Value, explains: impl Fn(&str) -> bool) {
    assert_eq!(event["allowed"], false, "{event}");
    assert!(event["reason"].as_str().is_some_and(explains), "{event}");
}

#[test]
fn an_id_only_request_to_write_outside_the_workspace_is_refused() {
    let scenario = writing("../escaped.txt", "id_only");
    let run = scenario.run();
    assert!(
        !scenario.path("escaped.txt").exists(),
        "the write went through"
    );
    let events = permissions(&run.stdout);
    assert_eq!(events.len(), 1, "{}", run.stdout);
    assert_refused_because(&events[0], |reason| {
        reason.contains("outside the workspace")
    });
}

#[test]
fn an_id_only_request_to_write_inside_the_workspace_is_allowed() {
    let scenario = writing("notes.txt", "id_only");
    let run = scenario.run();
    assert_eq!(permissions(&run.stdout)[0]["allowed"], true);
    assert_eq!(
        std::fs::read_to_string(scenario.workspace().join("notes.txt")).expect("written"),
        "x"
    );
}

#[test]
fn a_request_for_a_tool_call_never_described_is_refused() {
    let scenario = writing("notes.txt", "unannounced");
    let events = run_not_writing(&scenario, "notes.txt");
    assert_refused_because(&events[0], |reason| reason.starts_with("nothing is known"));
}

#[test]
fn a_deny_pattern_applies_to_an_id_only_request() {
    let scenario = writing("secrets.env", "id_only").args(&["--deny", "secrets.*"]);
    let events = run_not_writing(&scenario, "secrets.env");
    assert_refused_because(&events[0], |reason| reason.contains("`secrets.*`"));
}

#[test]
fn a_fully_described_request_to_write_outside_the_workspace_is_refused() {
    let scenario = writing("../escaped.txt", "full");
    let run = scenario.run();
    assert!(!scenario.path("escaped.txt").exists());
    assert_eq!(permissions(&run.stdout)[0]["allowed"], false);
}

#[test]
fn an_agent_that_cancels_its_turn_when_refused_is_a_crash_naming_the_refusal() {
    let scenario = Scenario::new(
        "t",
        "default: [{tool: {path: ../escaped.txt, write: \"x\", on_reject: cancel}}, {text: \"unreached\"}]\n",
    )
    .args(&["--client-fs", "never"]);
    let run = scenario.run();
    assert_eq!(
        run.result.outcome,
        ralph::engine::attempt::OutcomeClass::Crashed,
        "{}",
        run.result_json
    );
    let crash = run.result.crash.unwrap_or_default();
    assert!(
        crash.starts_with("the agent cancelled its own turn after the runner refused permission for `Write ../escaped.txt`")
            && crash.contains("outside the workspace"),
        "{crash}"
    );
}
