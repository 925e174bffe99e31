//! `ralph runner` driving the real gemini-cli (`gemini --acp`), offline against a scripted fake
//! of the Gemini API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use ralph::engine::attempt::{OutcomeClass, StopReason};
use real_agents::fake_gemini::{self, FakeGemini, GEMINI_MODEL, gemini};
use real_agents::scenario::{self, scenario_tests};

scenario_tests! {
    gemini;
    the_prompt_file_reaches_the_model_as_the_user_message(fake_gemini::user_text);
    an_answer_without_a_sigil_finishes_with_no_verdict;
    task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason;
    http_500_from_the_model_api_is_a_crash =
        an_api_error_is_a_crash_naming(FakeGemini::server_error(), &["500", "internal"]);
    http_429_with_a_daily_quota_is_exhaustion =
        an_api_error_is_exhaustion_naming(FakeGemini::daily_quota_exhausted(), "quota");
    /// A rate limit without a quota type is transient: a crash (retried with backoff), not
    /// exhaustion and never a clean turn.
    http_429_without_quota_details_is_a_crash =
        an_api_error_is_a_crash_naming(FakeGemini::rate_limited(), &["429"]);
    /// gemini-cli 0.61.0 answers a `MAX_TOKENS` finish with `stopReason: end_turn` (it sends
    /// `max_tokens` only when the context window would overflow): the runner cannot tell,
    /// and the cut-off answer, which has no sigil, is released without a verdict.
    max_tokens_finish_reaches_the_runner_as_an_ordinary_end_turn =
        a_cut_off_answer_is_not_continued(StopReason::EndTurn);
    kill_9_of_the_agent_is_a_crash_with_the_signal;
    a_model_that_hangs_past_the_idle_timeout_is_a_crash;
    a_shell_command_gemini_asks_permission_for_runs_when_the_runner_allows_it =
        a_command_the_agent_asks_permission_for_runs_when_allowed(FakeGemini::shell);
    /// gemini-cli's write tool reads the file first; through the client's fs capability a file
    /// that does not exist yet fails, so the runner must not advertise fs to gemini (issue 9.4).
    a_new_file_gemini_writes_lands_in_the_workspace =
        a_new_file_the_agent_writes_lands_in_the_workspace(FakeGemini::write_file);
    ralph_run_completes_a_three_task_feature_in_dependency_order =
        ralph_run_completes_a_feature_in_dependency_order(
            &["write-greeting", "translate-greeting", "review-greeting"],
            |greeting| FakeGemini::write_file(greeting, "Hello, world!\n"),
        );
}

#[test]
fn task_done_sigil_ending_the_final_answer_finishes_the_attempt() {
    let (ended, fake) =
        scenario::task_done_sigil_ending_the_final_answer_finishes_the_attempt(gemini);

    let agent = ended.result.ran_by.agent.clone().unwrap_or_default();
    assert!(agent.contains("gemini-cli"), "agent was {agent:?}");
    assert_eq!(
        fake.main_requests("write-greeting").len(),
        1,
        "{}",
        fake.traffic()
    );
}

/// gemini-cli reports tokens only in the prompt response's `_meta.quota.token_count`, and
/// its model in `session/new` (`models.currentModelId`) and `_meta.quota.model_usage`.
#[test]
fn the_tokens_and_model_gemini_reports_are_recorded() {
    let (ended, _fake) = scenario::the_agent_reports_its_usage(gemini);

    assert_eq!(
        ended.result.ran_by.model.as_deref(),
        Some(GEMINI_MODEL),
        "{}",
        ended.explain("")
    );
}

#[test]
fn a_shell_command_denied_by_a_pattern_does_not_run() {
    let (ended, _fake) =
        scenario::a_command_denied_by_a_pattern_does_not_run(gemini, FakeGemini::shell);

    ended.assert_outcome(OutcomeClass::Finished);
}

/// gemini-cli refuses a path outside its workspace directories itself, before asking.
#[test]
fn a_file_outside_the_workspace_is_not_written() {
    let (ended, fake) =
        scenario::a_file_outside_the_workspace_is_not_written(gemini, FakeGemini::write_file);

    assert_eq!(
        ended.permission_decisions(),
        Vec::<bool>::new(),
        "{}",
        ended.explain("")
    );
    let main = fake.main_requests("escape");
    assert_eq!(main.len(), 2, "{}", fake.traffic());
    let responses = fake_gemini::tool_responses(main[1].body.as_ref().expect("a JSON body"));
    assert!(
        responses.len() == 1 && responses[0].to_string().contains("Path not in workspace"),
        "the refusal reached the model: {responses:?}"
    );
    ended.assert_sigils(None, Some("escape"));
}
