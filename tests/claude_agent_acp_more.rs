//! More cases of `ralph runner` driving the real claude-agent-acp offline (see
//! tests/claude_agent_acp.rs for the first ones): the verdicts, a plain API 500, kill -9 of the
//! agent, an idle hang, and permission requests under `permissions.defaultMode: "default"`.
//! See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "support/real_agent.rs"]
mod real_agent;

use std::path::Path;

use fake_anthropic::{FakeAnthropic, Script, Turn, claude_agent_acp_bin};
use ralph::engine::attempt::{OutcomeClass, StopReason};
use real_agent::{AgentLaunch, Attempt, EXIT_CRASHED, EXIT_FINISHED, HANG_DEADLINE, kill_agent_of};

/// The fake Anthropic API scripted with `turns` for the attempt's task, and claude-agent-acp
/// configured against it, with `permissions.defaultMode: "default"` in its settings (it asks
/// the client before running tools).
fn claude(attempt: &Attempt, turns: Vec<Turn>) -> (FakeAnthropic, AgentLaunch) {
    let fake = FakeAnthropic::start(Script::new().task(attempt.task(), turns))
        .expect("start the fake Anthropic API");
    let home = attempt.home();
    write_settings(&home.join(".claude"));
    let launch = AgentLaunch {
        program: claude_agent_acp_bin().unwrap_or_else(|message| panic!("{message}")),
        args: Vec::new(),
        env: fake.agent_env(&home),
        env_removed_prefixes: vec!["ANTHROPIC_".to_owned(), "CLAUDE_".to_owned()],
    };
    (fake, launch)
}

fn write_settings(config_dir: &Path) {
    std::fs::create_dir_all(config_dir).expect("create the Claude config directory");
    std::fs::write(
        config_dir.join("settings.json"),
        r#"{"permissions":{"defaultMode":"default"}}"#,
    )
    .expect("write Claude settings");
}

#[test]
fn an_answer_without_a_sigil_finishes_with_no_verdict() {
    let attempt = Attempt::new("chatty");
    let (_fake, launch) = claude(
        &attempt,
        vec![Turn::text("I looked around and will continue later.")],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_stop_reason(Some(StopReason::EndTurn));
    ended.assert_sigils(None, None);
}

/// claude-agent-acp sends an informational chunk after some answers; the recorded reason is
/// the agent's own text next to the sigil, not that chunk.
#[test]
fn task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason() {
    let attempt = Attempt::new("impossible");
    let (_fake, launch) = claude(
        &attempt,
        vec![Turn::text(
            "The API the task needs does not exist.\n<task-failed>impossible</task-failed>",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_sigils(None, Some("impossible"));
    let reason = ended
        .result
        .sigils
        .task_failed_reason
        .clone()
        .unwrap_or_default();
    assert!(
        reason.contains("does not exist"),
        "failure reason: {reason:?}\n{}",
        ended.explain("")
    );
}

#[test]
fn the_model_claude_reports_and_its_tokens_are_recorded() {
    let attempt = Attempt::new("report-usage");
    let (fake, launch) = claude(
        &attempt,
        vec![Turn::text("Done.\n<task-done>report-usage</task-done>")],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_usage_reported();
    let asked = fake.main_requests("report-usage")[0]
        .model()
        .unwrap_or_default()
        .to_owned();
    let model = ended.result.model.clone().unwrap_or_default();
    assert!(
        !model.is_empty() && model != "default",
        "the model is the one the agent reports (it asked the API for {asked:?}), not {model:?}\n{}",
        ended.explain("")
    );
}

#[test]
fn http_500_from_the_model_api_is_a_crash() {
    let attempt = Attempt::new("unlucky");
    let (_fake, launch) = claude(
        &attempt,
        vec![Turn::error(500, "api_error", "Internal server error")],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(crash.contains("500"), "crash summary: {crash:?}");
}

#[test]
fn kill_9_of_the_agent_is_a_crash_with_the_signal() {
    let attempt = Attempt::new("killed");
    let (fake, launch) = claude(&attempt, vec![Turn::hang("Let me think about this")]);
    let child = attempt.spawn(&launch);

    let hanging = fake.wait_until_hanging(HANG_DEADLINE);
    let killed = kill_agent_of(&child);
    let ended = attempt.wait(child);

    assert!(
        hanging,
        "the model request never started\n{}",
        ended.explain("")
    );
    assert_eq!(killed, 1, "the runner has one agent process");
    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    assert_eq!(ended.result.signal, Some(9), "{}", ended.explain(""));
}

#[test]
fn a_model_that_hangs_past_the_idle_timeout_is_a_crash() {
    let attempt = Attempt::new("stuck").with_idle_timeout(real_agent::SHORT_IDLE_TIMEOUT, "2s");
    let (fake, launch) = claude(&attempt, vec![Turn::hang("Let me think about this")]);

    let ended = attempt.run(&launch);

    assert!(
        fake.wait_until_hanging(std::time::Duration::ZERO),
        "the model request never started\n{}",
        ended.explain("")
    );
    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(crash.contains("idle timeout"), "crash summary: {crash:?}");
}

#[test]
fn a_command_claude_asks_permission_for_under_default_mode_runs_when_allowed() {
    let attempt = Attempt::new("write-proof");
    let (fake, launch) = claude(
        &attempt,
        vec![
            Turn::bash("echo hi > proof.txt"),
            Turn::text("Wrote proof.txt.\n<task-done>write-proof</task-done>"),
        ],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-proof"), None);
    assert_eq!(
        ended.permission_decisions(),
        [true],
        "claude asked once and the runner allowed it\n{}",
        ended.explain("")
    );
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt: {error}\n{}", ended.explain("")));
    assert_eq!(proof, "hi\n");
    let results = fake.main_requests("write-proof")[1].tool_results();
    assert!(
        results.iter().all(|result| !result.is_error),
        "tool results: {results:?}"
    );
}

#[test]
fn a_write_outside_the_workspace_is_refused() {
    let attempt = Attempt::new("escape");
    let outside = tempfile::tempdir().expect("create a directory outside the workspace");
    let target = outside.path().join("escaped.txt");
    let (fake, launch) = claude(
        &attempt,
        vec![
            Turn::write_file(&target, "gotcha\n"),
            Turn::text("Could not write it.\n<task-failed>escape</task-failed>"),
        ],
    );

    let ended = attempt.run(&launch);

    assert!(
        !target.exists(),
        "claude wrote outside the workspace\n{}",
        ended.explain("")
    );
    assert_eq!(
        ended.permission_decisions(),
        [false],
        "the runner was asked and refused\n{}",
        ended.explain("")
    );
    let results = fake.main_requests("escape")[1].tool_results();
    assert!(
        results.iter().all(|result| result.is_error),
        "the refusal reached the model as an error: {results:?}"
    );
}
