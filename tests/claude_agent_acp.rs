//! `ralph runner` driving the real third-party agent claude-agent-acp (Claude Code over ACP),
//! offline: the agent talks to a scripted fake of the Anthropic API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use ralph::engine::attempt::{OutcomeClass, StopReason};
use real_agents::fake_anthropic::{self, FakeAnthropic, claude};
use real_agents::fake_model::Turn;
use real_agents::real_agent::{
    Attempt, EXIT_CANCELLED, EXIT_FINISHED, EXIT_MISCONFIGURED, Ended, HANG_DEADLINE,
};
use real_agents::scenario::{self, scenario_tests};

scenario_tests! {
    claude;
    the_prompt_file_reaches_the_model_as_the_user_message(fake_anthropic::prompt_text);
    max_tokens_stop_is_reported_as_max_tokens =
        a_cut_off_answer_finishes_with_stop_reason(StopReason::MaxTokens);
    overloaded_api_is_a_crash = an_api_error_is_a_crash_naming(FakeAnthropic::overloaded(), &["529"]);
    /// A rate limit without quota wording or a reset time is transient: a crash (retried
    /// with backoff), as through codex-acp and gemini-cli, not a quota rest.
    rate_limited_api_is_a_crash = an_api_error_is_a_crash_naming(
        FakeAnthropic::rate_limited("Too many requests, please slow down"),
        &["429"],
    );
    quota_exhausted_api_is_exhaustion = an_api_error_is_exhaustion_naming(
        FakeAnthropic::rate_limited("You have exceeded your quota for this billing period."),
        "exceeded your quota",
    );
}

#[test]
fn task_done_sigil_in_the_models_answer_finishes_the_attempt() {
    let (ended, _fake) = scenario::the_task_done_sigil_in_the_answer_finishes_the_attempt(
        claude,
        "The greeting is written. <task-done>write-greeting</task-done>",
    );

    assert_eq!(ended.result.task, "write-greeting");
}

#[test]
fn the_agent_reports_its_name_and_usage() {
    let (ended, _fake) = scenario::the_agent_reports_its_usage(claude);

    let agent = ended.result.ran_by.agent.clone().unwrap_or_default();
    assert!(agent.contains("claude-agent-acp"), "agent was {agent:?}");
}

/// Runs `attempt` on claude: the model calls Bash with `command`, then answers `answer`.
fn run_bash(attempt: &Attempt, command: &str, answer: &str) -> (Ended, FakeAnthropic) {
    let turns = vec![FakeAnthropic::bash(command), Turn::text(answer)];
    scenario::run(claude, attempt, turns)
}

#[test]
fn bash_tool_call_is_permitted_and_runs_in_the_workspace() {
    let attempt = Attempt::new("write-proof");
    let (ended, fake) = run_bash(
        &attempt,
        "echo hi > proof.txt",
        "Wrote proof.txt. <task-done>write-proof</task-done>",
    );

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-proof"), None);
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt in the workspace: {error}\n{}", ended.logs));
    assert_eq!(proof, "hi\n");
    let results = answered_tool_results(&fake, "write-proof");
    assert!(!results[0].is_error, "the tool failed: {:?}", results[0]);
}

#[test]
fn bash_tool_call_denied_by_a_pattern_does_not_run() {
    let attempt = Attempt::new("forbidden").with_runner_args(&["--deny", "*forbidden.txt*"]);
    let (ended, fake) = run_bash(
        &attempt,
        "echo no > forbidden.txt",
        "I was not allowed to. <task-failed>forbidden</task-failed>",
    );

    ended.assert_outcome(OutcomeClass::Finished);
    assert!(
        !attempt.workspace().join("forbidden.txt").exists(),
        "the denied command ran\n{}",
        ended.logs
    );
    let results = answered_tool_results(&fake, "forbidden");
    assert!(
        results[0].is_error,
        "the denial reached the model as an error: {:?}",
        results[0]
    );
}

/// The tool results of the second model call of `task`, after asserting that there were two
/// calls (the tool call, then the answer after its result) and one result.
fn answered_tool_results(fake: &FakeAnthropic, task: &str) -> Vec<fake_anthropic::ToolResult> {
    let main = fake.main_requests(task);
    assert_eq!(
        main.len(),
        2,
        "the tool call, then the answer after its result"
    );
    let results = main[1].tool_results();
    assert_eq!(results.len(), 1, "tool results sent back: {results:?}");
    results
}

#[test]
fn write_tool_creates_the_file_in_the_workspace() {
    let (_ended, fake) = scenario::a_new_file_the_agent_writes_lands_in_the_workspace(
        claude,
        FakeAnthropic::write_file,
    );

    fake.assert_tool_results("write-notes", false);
}

#[test]
fn sigterm_while_the_model_hangs_cancels_the_attempt() {
    let attempt = Attempt::new("slow-task");
    let (fake, launch) = scenario::start(
        claude,
        &attempt,
        vec![Turn::hang("Let me think about this")],
    );
    let child = attempt.spawn(&launch);

    let hanging = fake.wait_until_hanging(HANG_DEADLINE);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the runner");
    let ended = attempt.wait(child);

    assert!(hanging, "the model request never started\n{}", ended.logs);
    ended.assert_exit(EXIT_CANCELLED);
    ended.assert_outcome(OutcomeClass::Cancelled);
    assert_eq!(ended.result.sigils.task_done, None);
}

#[test]
fn a_rejected_api_key_is_misconfiguration_naming_authentication() {
    let (ended, _fake) = scenario::run_task(
        claude,
        "locked-out",
        vec![FakeAnthropic::error(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    );

    ended.assert_exit(EXIT_MISCONFIGURED);
    ended.assert_outcome(OutcomeClass::Misconfigured);
    let problem = ended
        .result
        .misconfiguration
        .clone()
        .unwrap_or_else(|| panic!("no misconfiguration in {:?}", ended.result));
    assert!(
        problem.problem.contains("needs authentication"),
        "problem: {problem:?}"
    );
}
