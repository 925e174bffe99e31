//! The model a Feature chooses reaches the real claude-agent-acp (offline, against the fake
//! Anthropic API, which sees the model in its requests), and a model claude does not offer
//! is a misconfiguration. See docs/models-and-pools.md and docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/real_agents.rs"]
mod real_agents;

use ralph::engine::attempt::OutcomeClass;
use real_agents::fake_anthropic::FakeAnthropic;
use real_agents::fake_model::{Script, Turn};
use real_agents::real_agent::{AgentLaunch, Attempt};

fn claude(attempt: &Attempt, turns: Vec<Turn>) -> (FakeAnthropic, AgentLaunch) {
    real_agents::fake_anthropic::claude(Script::new().task(attempt.task(), turns), &attempt.home())
}

#[test]
fn the_model_the_feature_chose_reaches_the_model_api_and_is_recorded() {
    let attempt = Attempt::new("cheap-model").with_runner_args(&["--model", "haiku"]);
    let (fake, launch) = claude(
        &attempt,
        vec![Turn::text("Done.\n<task-done>cheap-model</task-done>")],
    );

    let ended = attempt.run(&launch);

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
    assert_eq!(ended.result.requested_model.as_deref(), Some("haiku"));
}

#[test]
fn a_model_claude_does_not_offer_is_a_misconfiguration_not_a_retry() {
    let attempt = Attempt::new("unknown-model").with_runner_args(&["--model", "no-such-model-xyz"]);
    let (fake, launch) = claude(
        &attempt,
        vec![Turn::text("Done.\n<task-done>unknown-model</task-done>")],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Misconfigured);
    let problem = ended
        .result
        .misconfiguration
        .clone()
        .map(|m| m.problem)
        .unwrap_or_default();
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
