//! The model a Feature chooses reaches the real claude-agent-acp (offline, against the fake
//! Anthropic API, which sees the model in its requests), and a model claude does not offer
//! is a misconfiguration. See docs/models-and-pools.md and docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use ralph::engine::attempt::OutcomeClass;
use real_agents::fake_anthropic::FakeAnthropic;
use real_agents::fake_model::{Script, Turn};
use real_agents::real_agent::{Attempt, Ended};

/// Runs claude-agent-acp with `--model model` on the task `task`, which the model answers
/// done; the fake API and how the attempt ended.
fn run_with_model(task: &str, model: &str) -> (FakeAnthropic, Ended) {
    let attempt = Attempt::new(task).with_runner_args(&["--model", model]);
    let done = Turn::text(format!("Done.\n<task-done>{task}</task-done>"));
    let (fake, launch) = real_agents::fake_anthropic::claude(
        Script::new().task(attempt.task(), vec![done]),
        &attempt.home(),
    );
    let ended = attempt.run(&launch);
    (fake, ended)
}

#[test]
fn the_model_the_feature_chose_reaches_the_model_api_and_is_recorded() {
    let (fake, ended) = run_with_model("cheap-model", "haiku");

    ended.assert_outcome(OutcomeClass::Finished);
    let asked = fake.main_requests("cheap-model")[0]
        .model()
        .unwrap_or_default()
        .to_owned();
    assert!(
        asked.contains("haiku"),
        "the API was asked for {asked:?}\n{}",
        ended.explain("")
    );
    assert_eq!(
        ended.result.ran_by.requested_model.as_deref(),
        Some("haiku")
    );
}

#[test]
fn a_model_claude_does_not_offer_is_a_misconfiguration_not_a_retry() {
    let (fake, ended) = run_with_model("unknown-model", "no-such-model-xyz");

    ended.assert_outcome(OutcomeClass::Misconfigured);
    let problem = ended.misconfiguration_problem();
    assert!(
        problem.contains("no-such-model-xyz"),
        "{problem}\n{}",
        ended.explain("")
    );
    assert!(
        fake.main_requests("unknown-model").is_empty(),
        "no prompt reached the model API"
    );
}
