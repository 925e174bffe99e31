//! `ralph runner` driving the real codex-acp (Codex over ACP), offline against a scripted
//! fake of the OpenAI Responses API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use ralph::engine::attempt::StopReason;
use real_agents::fake_openai::{self, CODEX_MODEL, FakeOpenAi, codex, codex_asking};
use real_agents::scenario::{self, scenario_tests};

scenario_tests! {
    codex;
    the_prompt_file_reaches_the_model_as_the_user_message(fake_openai::user_text);
    an_answer_without_a_sigil_finishes_with_no_verdict;
    task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason;
    /// codex-acp reports a 5xx as a `systemError` thread status and a message chunk
    /// ("We're currently experiencing high demand…", no status code), then `end_turn`.
    http_500_from_the_model_api_is_a_crash_named_by_codexs_message =
        an_api_error_is_a_crash_naming(FakeOpenAi::server_error(), &["high demand"]);
    http_429_insufficient_quota_is_exhaustion =
        an_api_error_is_exhaustion_naming(FakeOpenAi::quota_exhausted(), "quota");
    /// A rate limit without a quota type is transient: a crash (retried with backoff), not
    /// exhaustion and never a clean turn.
    http_429_rate_limit_without_a_quota_type_is_a_crash =
        an_api_error_is_a_crash_naming(FakeOpenAi::rate_limited(), &["429"]);
    /// codex-acp reports `response.incomplete` (`max_output_tokens`) as a `systemError`
    /// thread status and the message "Incomplete response returned, reason:
    /// max_output_tokens", then `end_turn`; the runner should call that what it is, a
    /// `max_tokens` stop, as for claude.
    max_output_tokens_stop_is_reported_as_max_tokens =
        a_cut_off_answer_is_not_continued(StopReason::MaxTokens);
    kill_9_of_the_agent_is_a_crash_with_the_signal;
    a_model_that_hangs_past_the_idle_timeout_is_a_crash;
    ralph_run_completes_a_three_task_feature_in_dependency_order =
        ralph_run_completes_a_feature_in_dependency_order(
            &["write-greeting", "translate-greeting", "review-greeting"],
            |_| FakeOpenAi::shell("echo 'Hello, world!' > greeting.txt"),
        );
}

scenario_tests! {
    codex_asking;
    a_command_codex_asks_permission_for_runs_when_the_runner_allows_it =
        a_command_the_agent_asks_permission_for_runs_when_allowed(FakeOpenAi::escalated_shell);
}

#[test]
fn task_done_sigil_ending_the_final_answer_finishes_the_attempt() {
    let (ended, fake) =
        scenario::task_done_sigil_ending_the_final_answer_finishes_the_attempt(codex);

    ended.assert_usage_reported();
    assert_eq!(
        ended.result.ran_by.model.as_deref(),
        Some(CODEX_MODEL),
        "{}",
        ended.explain(&fake.traffic())
    );
    assert_eq!(
        ended.result.usage.cost_usd, None,
        "codex reports no cost: unknown, not 0"
    );
    let agent = ended.result.ran_by.agent.clone().unwrap_or_default();
    assert!(agent.contains("codex-acp"), "agent was {agent:?}");
}

/// Codex offers one way to refuse an escalated command, "No, and tell Codex what to do
/// differently", which interrupts its turn (`stopReason: cancelled` though the runner never
/// cancelled): a crash naming the refusal, not a user cancellation.
#[test]
fn a_command_denied_by_a_pattern_does_not_run_and_is_a_crash_naming_the_refusal() {
    let (ended, fake) = scenario::a_command_denied_by_a_pattern_does_not_run(
        codex_asking,
        FakeOpenAi::escalated_shell,
    );

    ended.assert_crashed();
    ended.assert_stop_reason(Some(StopReason::Cancelled));
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(
        crash.contains("refused permission") && crash.contains("forbidden.txt"),
        "crash summary names the refusal: {crash:?}"
    );
    assert_eq!(
        fake.main_requests("forbidden").len(),
        1,
        "no model call after the refusal\n{}",
        ended.explain(&fake.traffic())
    );
}

#[test]
fn a_patch_adding_a_file_in_the_workspace_is_allowed_and_applied() {
    let (ended, _fake) = scenario::a_new_file_the_agent_writes_lands_in_the_workspace(
        codex_asking,
        FakeOpenAi::add_file_patch,
    );

    ended.assert_sigils(Some("write-notes"), None);
    assert!(
        ended.permission_decisions().iter().all(|allowed| *allowed),
        "{}",
        ended.explain("")
    );
}

/// codex-acp asks before a file change ("Edit files", kind `edit`, the path in `locations`);
/// a path outside the workspace is refused and nothing is written.
#[test]
fn a_patch_adding_a_file_outside_the_workspace_is_refused() {
    let (ended, _fake) = scenario::a_file_outside_the_workspace_is_not_written(
        codex_asking,
        FakeOpenAi::add_file_patch,
    );

    assert_eq!(
        ended.permission_decisions(),
        [false],
        "the runner was asked and refused\n{}",
        ended.explain("")
    );
    ended.assert_sigils(None, None);
}
