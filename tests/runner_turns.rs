//! `ralph runner` on the scripted agent: what the agent says in its prompt turn and how
//! the turn ends, each asserted on the result document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::scripted;

use ralph::engine::attempt::{OutcomeClass, RESULT_MAX_BYTES, StopReason};
use ralph::engine::sigils::Promise;
use scripted::Scenario;

/// The runner's run of the task `greet` on the scripted agent playing `steps`; it must
/// finish its turn (exit 0).
fn finished(steps: &str) -> scripted::Run {
    let run = Scenario::new("greet", &format!("default: {steps}\n")).run();
    run.assert_outcome(OutcomeClass::Finished);
    assert_eq!(run.status.code(), Some(0));
    run
}

#[test]
fn task_done_sigil_for_this_task_is_reported() {
    let run = finished(r#"[{text: "Done. <task-done>{task}</task-done>"}]"#);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
    assert_eq!(run.result.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(run.result.task, "greet");
    assert_eq!(run.result.attempt.as_deref(), Some("greet-a1"));
}

#[test]
fn task_failed_sigil_is_reported() {
    let run = finished(r#"[{text: "Cannot. <task-failed>{task}</task-failed>"}]"#);
    assert_eq!(run.result.sigils.task_failed.as_deref(), Some("greet"));
    assert_eq!(run.result.sigils.task_done, None);
}

#[test]
fn both_sigils_are_reported_for_the_policy_to_decide() {
    let run =
        finished(r#"[{text: "<task-failed>{task}</task-failed>\n<task-done>{task}</task-done>"}]"#);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
    assert_eq!(run.result.sigils.task_failed.as_deref(), Some("greet"));
}

#[test]
fn a_sigil_for_another_task_is_reported_with_its_id() {
    let run = finished(r#"[{text: "<task-done>other-task</task-done>"}]"#);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("other-task"));
}

#[test]
fn a_turn_without_sigils_reports_none() {
    let run = finished(r#"[{text: "I looked around."}]"#);
    assert!(run.result.sigils.is_empty(), "{}", run.result_json);
}

#[test]
fn promise_failure_carries_the_agents_reason() {
    let run = finished(r#"[{text: "The spec contradicts itself. <promise>FAILURE</promise>"}]"#);
    assert_eq!(run.result.sigils.promise, Some(Promise::Failure));
    assert!(
        run.result.sigils.promise_reason.is_some(),
        "{}",
        run.result_json
    );
}

#[test]
fn promise_complete_is_reported() {
    let run = finished(r#"[{text: "<task-done>{task}</task-done> <promise>COMPLETE</promise>"}]"#);
    assert_eq!(run.result.sigils.promise, Some(Promise::Complete));
}

#[test]
fn a_sigil_split_across_chunks_is_found() {
    let run = finished(r#"[{split: "ok. <task-done>{task}</task-done>"}]"#);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
}

#[test]
fn history_replayed_on_load_does_not_complete_the_task() {
    let run = finished(r#"[history, {text: "Starting over, nothing done yet."}]"#);
    assert_eq!(run.result.sigils.task_done, None, "{}", run.result_json);
}

#[test]
fn a_ten_megabyte_message_is_collected_and_the_result_stays_small() {
    let run = finished(r#"[{big: 10MB}, {text: "\n<task-done>{task}</task-done>"}]"#);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
    assert!(run.result_json.len() <= RESULT_MAX_BYTES);
    let longest = run.stdout.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 8 * 1024, "an event line of {longest} bytes");
}

#[test]
fn refusal_is_reported_as_the_stop_reason() {
    let run = finished(r#"[{text: "No."}, {stop: refusal}]"#);
    assert_eq!(run.result.stop_reason, Some(StopReason::Refusal));
}

#[test]
fn max_tokens_is_reported_as_the_stop_reason() {
    let run = finished(r#"[{text: "trying"}, {stop: max_tokens}]"#);
    assert_eq!(run.result.stop_reason, Some(StopReason::MaxTokens));
}

#[test]
fn a_max_output_tokens_error_is_mapped_to_max_tokens() {
    let run = finished(
        r#"[{text: "long answer"}, {error: {message: "response exceeded the output token maximum", error_kind: max_output_tokens}}]"#,
    );
    assert_eq!(run.result.stop_reason, Some(StopReason::MaxTokens));
}

#[test]
fn an_unknown_stop_reason_is_kept_and_its_text_still_scanned() {
    let run = finished(r#"[{text: "<task-done>{task}</task-done>"}, {stop: paused}]"#);
    assert_eq!(
        run.result.stop_reason,
        Some(StopReason::Other("paused".into()))
    );
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
}

#[test]
fn usage_is_reported_from_the_update_and_the_prompt_response() {
    let run = finished(
        r#"[{usage: {input_tokens: 1200, output_tokens: 300, cost_usd: 0.042}}, {text: "<task-done>{task}</task-done>"}]"#,
    );
    assert_eq!(run.result.usage.tokens.input, 1200);
    assert_eq!(run.result.usage.tokens.output, 300);
    assert_eq!(run.result.usage.cost_usd, Some(0.042));
}

#[test]
fn the_attempt_number_selects_the_scripted_attempt() {
    let script = "tasks:\n  greet:\n    - [{text: first}]\n    - [{text: \"Attempt {attempt} worked. <task-done>{task}</task-done>\"}]\n";
    let run = Scenario::new("greet", script).attempt("greet-a2").run();
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("greet"));
}

#[test]
fn the_agent_is_named_from_initialize() {
    let run = finished(r#"[{text: "hi"}]"#);
    assert!(
        run.result
            .ran_by
            .agent
            .as_deref()
            .is_some_and(|agent| agent.starts_with("ralph-script "))
    );
    assert!(run.result.timings.initialize_ms.is_some());
}

#[test]
fn every_session_update_is_logged_as_one_json_line() {
    let run = finished(r#"[{thought: "hmm"}, {text: "hi"}]"#);
    let events: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON event line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .filter(|event| event["event"] == "update")
        .filter_map(|event| event["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["agent_thought_chunk", "agent_message_chunk"]);
    for lifecycle in ["spawned", "initialized", "prompt_sent", "stop", "exited"] {
        assert!(
            events.iter().any(|event| event["event"] == lifecycle),
            "no {lifecycle} line"
        );
    }
}

#[test]
fn the_model_comes_from_the_sessions_model_selector() {
    let run = Scenario::new("greet", "model: scripted-large\ndefault: [{text: hi}]\n").run();
    assert_eq!(run.result.ran_by.model.as_deref(), Some("scripted-large"));
}
