//! `ralph runner` on agents that cannot run as configured: each is reported once as
//! `misconfigured` (exit status 6) with the problem and its fix, never as a crash.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{mentions, scripted};

use mentions::assert_mentions;
use ralph::engine::attempt::{Misconfiguration, OutcomeClass};
use scripted::Scenario;

/// The misconfiguration `run` reported, once: exit status 6 and no crash.
fn misconfigured(run: &scripted::Run) -> Misconfiguration {
    assert_eq!(run.status.code(), Some(6));
    assert_eq!(run.result.crash, None);
    run.misconfiguration()
}

/// Asserts that `run` was [`misconfigured`] with a problem and a fix that mention these.
fn assert_misconfigured(run: &scripted::Run, problem: &[&str], fix: &[&str]) {
    let reported = misconfigured(run);
    assert_mentions(&reported.problem, problem);
    assert_mentions(&reported.fix, fix);
}

/// A scenario whose agent is the shell command `command`.
fn shell_agent(command: &str) -> Scenario {
    Scenario::new("t", "").agent(&["sh", "-c", command])
}

#[test]
fn a_program_printing_plain_text_is_not_an_acp_agent_and_is_stopped_at_once() {
    let run = shell_agent("echo 'Hello! How can I help you today?'; sleep 600")
        .args(&["--idle-timeout", "1h"])
        .run();
    assert_misconfigured(
        &run,
        &["is not an ACP agent", "Hello! How can I help you today?"],
        &["ACP mode"],
    );
}

#[test]
fn a_program_that_prints_usage_and_exits_is_not_an_acp_agent() {
    let run = shell_agent("echo 'usage: tool [options]'").run();
    assert_mentions(&misconfigured(&run).problem, &["usage: tool [options]"]);
}

#[test]
fn an_agent_that_exits_for_a_missing_api_key_needs_authentication() {
    let run = shell_agent(
        "echo 'Loaded settings.' >&2; echo 'Gemini API key is missing or not configured.' >&2",
    )
    .run();
    assert_misconfigured(
        &run,
        &["needs authentication", "Gemini API key is missing"],
        &["credentials"],
    );
}

#[test]
fn an_auth_required_error_answering_the_prompt_needs_authentication() {
    let run = Scenario::new(
        "t",
        "default: [{error: {code: -32000, message: \"Authentication required\"}}]\n",
    )
    .run();
    assert_mentions(&misconfigured(&run).problem, &["Authentication required"]);
}

#[test]
fn a_wrapper_that_cannot_find_the_agent_is_misconfigured() {
    let run = shell_agent("exec ralph-no-such-agent-cli --acp").run();
    let problem = misconfigured(&run);
    assert_mentions(&problem.problem, &["was not found (exit code 127"]);
}

#[test]
fn an_unwritable_workspace_is_refused_before_the_agent_starts() {
    let run = Scenario::new("t", "default: [{text: hi}]\n")
        .workspace_dir("/sys/kernel")
        .run();
    let problem = misconfigured(&run);
    assert!(
        problem
            .problem
            .starts_with("the workspace /sys/kernel is not writable"),
        "{problem:?}"
    );
    assert!(!run.stdout.contains("\"spawned\""), "the agent was started");
}

#[test]
fn a_crash_is_not_misconfiguration() {
    let run = Scenario::new("t", "default: [{stderr: \"Error: boom\"}, {exit: 1}]\n").run();
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.misconfiguration, None);
}

#[test]
fn cat_echoing_ralphs_requests_is_not_an_acp_agent() {
    let run = shell_agent("exec cat")
        .args(&["--idle-timeout", "1h"])
        .run();
    assert_misconfigured(&run, &["is not an ACP agent", "initialize"], &["ACP mode"]);
}

#[test]
fn a_program_printing_json_log_lines_is_not_an_acp_agent() {
    let run = shell_agent(r#"echo '{"level":"info","msg":"server starting"}'; sleep 600"#)
        .args(&["--idle-timeout", "1h"])
        .run();
    assert_misconfigured(
        &run,
        &["is not an ACP agent", "server starting"],
        &["ACP mode"],
    );
}

#[test]
fn an_agent_exiting_on_a_configuration_error_before_initialize_is_misconfigured() {
    let run = shell_agent(
        "echo 'Error: the setting `model_reasoning_summary_format` is no longer supported' >&2; \
         exit 1",
    )
    .run();
    assert_misconfigured(
        &run,
        &[
            "exited with code 1 before answering initialize",
            "no longer supported",
        ],
        &["run the agent command by hand"],
    );
}

#[test]
fn an_agent_that_fails_session_new_and_exits_shows_its_error() {
    let run = Scenario::new("t", "default: [{text: hi}]\n")
        .agent(&["sh", "-c", SESSION_NEW_FAILS])
        .run();
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash_mentions("session/new was error -32603");
    run.assert_crash_mentions("Claude Code process exited with code 1");
}

/// An agent that answers `initialize`, answers `session/new` with an internal error and
/// exits 0 (claude-agent-acp without credentials).
const SESSION_NEW_FAILS: &str = r#"rid() { echo "$1" | grep -o '"id":"[^"]*"' | head -n 1 | cut -d: -f2; }
read -r init
echo '{"jsonrpc":"2.0","id":'"$(rid "$init")"',"result":{"protocolVersion":1,"agentCapabilities":{}}}'
read -r new
echo '{"jsonrpc":"2.0","id":'"$(rid "$new")"',"error":{"code":-32603,"message":"Internal error","data":{"details":"Claude Code process exited with code 1"}}}'
exit 0"#;
