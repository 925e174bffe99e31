//! The model a Feature chooses reaches the real claude-agent-acp (offline, against the fake
//! Anthropic API, which sees the model in its requests), and a model claude does not offer
//! is a misconfiguration. See docs/models-and-pools.md and docs/testing-with-real-agents.md.

#[path = "support/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "support/real_agent.rs"]
mod real_agent;

use fake_anthropic::{FakeAnthropic, Script, Turn, claude_agent_acp_bin};
use ralph::engine::attempt::OutcomeClass;
use real_agent::{AgentLaunch, Attempt};

fn claude(attempt: &Attempt, turns: Vec<Turn>) -> (FakeAnthropic, AgentLaunch) {
    let fake = FakeAnthropic::start(Script::new().task(attempt.task(), turns))
        .expect("start the fake Anthropic API");
    let launch = AgentLaunch {
        program: claude_agent_acp_bin().unwrap_or_else(|message| panic!("{message}")),
        args: Vec::new(),
        env: fake.agent_env(&attempt.home()),
        env_removed_prefixes: vec!["ANTHROPIC_".to_owned(), "CLAUDE_".to_owned()],
    };
    (fake, launch)
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
