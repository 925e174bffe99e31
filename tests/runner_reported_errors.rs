//! `ralph runner` on agents that report failures inside a normal-looking turn (codex-acp's
//! `systemError` thread status, errors on stderr), on what counts as exhaustion, and on
//! what agents report beside their answer (informational chunks, tokens, model).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::scripted;

use ralph::engine::attempt::OutcomeClass;
use scripted::Scenario;

fn run(steps: &str) -> scripted::Run {
    Scenario::new("t", &format!("default: {steps}\n")).run()
}

#[test]
fn a_system_error_then_end_turn_without_an_answer_is_a_crash_naming_the_error() {
    let run = run(
        r#"[{thought: "calling the model"}, {system_error: "stream error: unexpected status 500 Internal Server Error"}]"#,
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash("the agent reported an error and ended its turn without an answer: stream error: unexpected status 500 Internal Server Error");
    assert_eq!(run.status.code(), Some(3));
}

#[test]
fn a_system_error_after_partial_text_is_still_a_crash() {
    let run =
        run(r#"[{text: "Let me look at the code."}, {system_error: "HTTP 502 Bad Gateway"}]"#);
    run.assert_outcome(OutcomeClass::Crashed);
}

#[test]
fn a_429_without_a_quota_type_is_a_crash_not_exhaustion() {
    let run =
        run(r#"[{system_error: "exceeded retry limit, last status: 429 Too Many Requests"}]"#);
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.exhaustion, None);
}

#[test]
fn a_system_error_naming_a_usage_limit_type_is_exhaustion_with_its_reset() {
    let run =
        run(r#"[{system_error: "{\"type\":\"usage_limit_reached\",\"resets_in_seconds\":3600}"}]"#);
    run.assert_outcome(OutcomeClass::Exhausted);
    assert!(run.result.exhaustion.and_then(|e| e.reset_at).is_some());
    assert_eq!(run.status.code(), Some(4));
}

#[test]
fn a_turn_that_recovers_after_a_system_error_finishes() {
    let run = run(
        r#"[{system_error: "HTTP 500"}, {thread_status: active}, {text: "Retried and finished the work."}]"#,
    );
    run.assert_outcome(OutcomeClass::Finished);
}

#[test]
fn an_error_on_stderr_and_a_turn_without_an_answer_is_a_crash_quoting_it() {
    let run = run(
        r#"[{stderr: "(node:9) DeprecationWarning: punycode is deprecated"}, {stderr: "Error: request failed with status 503"}, {thought: "retrying"}]"#,
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash("the agent ended its turn without an answer after an error on stderr: Error: request failed with status 503");
}

#[test]
fn a_crash_summary_quotes_the_error_line_not_the_first_stderr_line() {
    let run = run(
        r#"[{stderr: "Loaded cached credentials."}, {stderr: "Warning: telemetry disabled"}, {stderr: "FatalError: model API returned 500"}, {exit: 1}]"#,
    );
    run.assert_crash(
        "agent exited with code 1 before answering the prompt: FatalError: model API returned 500",
    );
}

#[test]
fn an_informational_chunk_after_the_answer_is_not_part_of_it() {
    let run = run(
        r#"[{text: "The spec is contradictory. <task-failed>{task}</task-failed>"}, {informational: "**Warning:** Stop hook prevented continuation"}]"#,
    );
    assert_eq!(
        run.result.sigils.task_failed.as_deref(),
        Some("t"),
        "{}",
        run.result_json
    );
    assert!(
        !run.result
            .sigils
            .task_failed_reason
            .unwrap_or_default()
            .contains("Stop hook"),
        "{}",
        run.result_json
    );
}

#[test]
fn tokens_reported_only_in_the_quota_meta_are_recorded_with_the_model() {
    let run = Scenario::new(
        "t",
        "model: gemini-2.5-pro\ndefault: [{text: hi}, {quota_tokens: {input_tokens: 1200, output_tokens: 80}}]\n",
    )
    .run();
    assert_eq!(run.result.usage.tokens.input, 1200);
    assert_eq!(run.result.usage.tokens.output, 80);
    assert_eq!(run.result.ran_by.model.as_deref(), Some("gemini-2.5-pro"));
}

#[test]
fn tokens_without_a_cost_leave_the_cost_unknown() {
    let run = run(r#"[{usage: {input_tokens: 500, output_tokens: 20}}, {text: hi}]"#);
    assert_eq!(run.result.usage.tokens.input, 500);
    assert_eq!(run.result.usage.cost_usd, None, "{}", run.result_json);
    assert!(!run.result_json.contains("costUsd"), "{}", run.result_json);
}

#[test]
fn codexs_incomplete_response_for_max_output_tokens_is_a_max_tokens_stop() {
    let run = run(
        r#"[{text: "Here is a long answer"}, {system_error: "Incomplete response returned, reason: max_output_tokens"}]"#,
    );
    run.assert_outcome(OutcomeClass::Finished);
    assert_eq!(
        run.result.stop_reason,
        Some(ralph::engine::attempt::StopReason::MaxTokens)
    );
    assert_eq!(run.result.crash, None);
}

#[test]
fn a_refusal_whose_text_reports_a_server_error_is_a_crash() {
    let run = run(
        r#"[{text: "I hit an internal error while calling the model: Internal Server Error (status=500)"}, {stop: refusal}]"#,
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash_mentions("status=500");
}

#[test]
fn a_refusal_in_plain_words_stays_a_refusal() {
    let run = run(r#"[{text: "I can't help with that request."}, {stop: refusal}]"#);
    run.assert_outcome(OutcomeClass::Finished);
    assert_eq!(run.result.crash, None);
}

#[test]
fn an_idle_timeout_names_the_last_error_on_stderr() {
    let run = Scenario::new(
        "t",
        "default: [{stderr: \"Attempt 1 failed with status 500. Retrying with backoff...\"}, hang]\n",
    )
    .args(&["--idle-timeout", "1s", "--grace", "1s"])
    .run();
    run.assert_crash_starts_with("idle timeout: no ACP traffic for 1s");
    run.assert_crash_mentions("Attempt 1 failed with status 500");
}

#[test]
fn a_trace_line_on_stderr_is_left_out_of_a_kill_summary() {
    let run = run(
        r#"[{stderr: "[session/create] sessionId=s1 phase=validate-cwd"}, {delay: 100ms}, kill]"#,
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash_starts_with("agent was killed by signal 9 (SIGKILL)");
    assert!(!run.crash().contains("phase="), "{}", run.crash());
}
