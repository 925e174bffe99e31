//! More cases of `ralph runner` driving the real claude-agent-acp offline (see
//! tests/claude_agent_acp.rs for the first ones): the verdicts, a plain API 500, kill -9 of the
//! agent, an idle hang, and permission requests under `permissions.defaultMode: "default"`.
//! See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use real_agents::fake_anthropic::{FakeAnthropic, claude_asking};
use real_agents::scenario::{self, scenario_tests};

scenario_tests! {
    claude_asking;
    an_answer_without_a_sigil_finishes_with_no_verdict;
    /// claude-agent-acp sends an informational chunk after some answers; the recorded reason
    /// is the agent's own text next to the sigil, not that chunk.
    task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason;
    http_500_from_the_model_api_is_a_crash = an_api_error_is_a_crash_naming(
        FakeAnthropic::error(500, "api_error", "Internal server error"),
        &["500"],
    );
    kill_9_of_the_agent_is_a_crash_with_the_signal;
    a_model_that_hangs_past_the_idle_timeout_is_a_crash;
}

#[test]
fn the_model_claude_reports_and_its_tokens_are_recorded() {
    let (ended, fake) = scenario::the_agent_reports_its_usage(claude_asking);

    let asked = fake.main_requests("report-usage")[0]
        .model()
        .unwrap_or_default()
        .to_owned();
    let model = ended.result.ran_by.model.clone().unwrap_or_default();
    assert!(
        !model.is_empty() && model != "default",
        "the model is the one the agent reports (it asked the API for {asked:?}), not {model:?}\n{}",
        ended.explain("")
    );
}

#[test]
fn a_command_claude_asks_permission_for_under_default_mode_runs_when_allowed() {
    let (_ended, fake) = scenario::a_command_the_agent_asks_permission_for_runs_when_allowed(
        claude_asking,
        FakeAnthropic::bash,
    );

    fake.assert_tool_results("write-proof", false);
}

#[test]
fn a_write_outside_the_workspace_is_refused() {
    let (ended, fake) = scenario::a_file_outside_the_workspace_is_not_written(
        claude_asking,
        FakeAnthropic::write_file,
    );

    assert_eq!(
        ended.permission_decisions(),
        [false],
        "the runner was asked and refused\n{}",
        ended.explain("")
    );
    fake.assert_tool_results("escape", true);
}
