//! The model gateway (docs/gateway.md) between real agents and the fake model APIs: the
//! runner starts it when the agent's API key is in its environment, the agent gets the
//! gateway's URL and a placeholder key, the fake receives the real key, and the attempt's
//! usage is what the fake sent, counted on the wire.
//!
//! The agents are installed by `scripts/install-agents`; these tests fail, not skip, when
//! one is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/real_agents.rs"]
mod real_agents;

use std::path::Path;

use ralph::engine::attempt::{OutcomeClass, Tokens};
use real_agents::fake_anthropic::{FAKE_API_KEY, FakeAnthropic, claude};
use real_agents::fake_gemini::{FAKE_GEMINI_KEY, FakeGemini, gemini};
use real_agents::fake_model::{ModelServer, Script, Turn};
use real_agents::fake_openai::{CodexApproval, FAKE_OPENAI_KEY, FakeOpenAi};
use real_agents::real_agent::{AgentLaunch, Attempt, EXIT_MISCONFIGURED, Ended};
use real_agents::scenario;

/// `ralph runner`'s exit status for an attempt whose budget share ran out.
const EXIT_LIMIT_REACHED: i32 = 7;

/// claude-agent-acp against a fake whose key (the real key, as far as the agent knows
/// nothing of it) is [`FAKE_API_KEY`]: the runner finds it in its environment.
fn claude_behind_gateway(script: Script, home: &Path) -> (FakeAnthropic, AgentLaunch) {
    claude(script, home)
}

/// Asserts that the attempt's usage is what the fake sent, summed over every answer.
fn assert_metered_as_sent(ended: &Ended, fake: &ModelServer) {
    let sent = fake.tokens_sent();
    assert_eq!(
        (
            ended.result.usage.tokens.input,
            ended.result.usage.tokens.output
        ),
        (sent.input, sent.output),
        "usage recorded vs sent by the fake ({} answers)\n{}",
        sent.answers,
        ended.explain(&fake.traffic())
    );
}

/// The fake saw only the real key, never the placeholder the agent was given.
fn assert_only_the_real_key_reached(fake: &ModelServer) {
    let keys = fake.keys_seen();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key == FAKE_API_KEY),
        "keys the fake received: {keys:?}"
    );
}

#[test]
fn the_tokens_recorded_are_those_the_model_api_sent() {
    let attempt = Attempt::new("metered");
    let turns = vec![
        FakeAnthropic::bash("echo one > one.txt"),
        Turn::text("Done. <task-done>metered</task-done>"),
    ];
    let (ended, fake) = scenario::run(claude_behind_gateway, &attempt, turns);

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    assert_eq!(
        ended.result.model_calls,
        Some(fake.tokens_sent().answers),
        "{}",
        ended.explain(&fake.traffic())
    );
}

#[test]
fn the_agents_own_report_is_kept_beside_the_metered_usage() {
    let (ended, fake) = scenario::run_task(
        claude_behind_gateway,
        "reported",
        vec![Turn::text("<task-done>reported</task-done>")],
    );

    let reported = ended.result.reported_usage.clone().unwrap_or_default();
    assert!(
        reported.tokens.input > 0,
        "claude's own report is kept: {}",
        ended.explain(&fake.traffic())
    );
    assert!(
        ended.result.usage.cost_usd.is_some(),
        "claude-opus-4-8 is priced"
    );
}

#[test]
fn the_model_api_receives_the_real_key() {
    let (ended, fake) = scenario::run_task(
        claude_behind_gateway,
        "real-key",
        vec![Turn::text("<task-done>real-key</task-done>")],
    );

    ended.assert_outcome(OutcomeClass::Finished);
    assert_only_the_real_key_reached(&fake);
}

#[test]
fn a_command_the_agent_runs_sees_the_placeholder_not_the_key() {
    let attempt = Attempt::new("print-env");
    let turns = vec![
        FakeAnthropic::bash("env > env.txt"),
        Turn::text("<task-done>print-env</task-done>"),
    ];
    let (ended, fake) = scenario::run(claude_behind_gateway, &attempt, turns);

    let env = std::fs::read_to_string(attempt.workspace().join("env.txt"))
        .unwrap_or_else(|_| panic!("env.txt written\n{}", ended.explain(&fake.traffic())));
    assert!(
        env.lines()
            .any(|line| line.starts_with("ANTHROPIC_API_KEY=ralph-gateway-")),
        "the agent's key is the placeholder:\n{env}"
    );
    assert!(
        !env.contains(FAKE_API_KEY),
        "the real key is not in the agent's environment"
    );
}

#[test]
fn no_file_the_agent_can_read_holds_the_key() {
    let attempt = Attempt::new("no-key-files");
    let (ended, fake) = scenario::run(
        claude_behind_gateway,
        &attempt,
        vec![Turn::text("<task-done>no-key-files</task-done>")],
    );

    ended.assert_outcome(OutcomeClass::Finished);
    assert_only_the_real_key_reached(&fake);
    let holding = files_containing(&attempt.home(), FAKE_API_KEY.as_bytes());
    assert!(holding.is_empty(), "files holding the key: {holding:?}");
    assert!(
        files_containing(&attempt.workspace(), FAKE_API_KEY.as_bytes()).is_empty(),
        "the workspace holds no key"
    );
}

/// Every log of the gateway and the HTTP stack under it, at the finest level (the ACP
/// connection's own trace logs carry the prompt by design; they are not the gateway's).
const GATEWAY_TRACE: &str = "ralph::gateway=trace,ralph::runner::gateway=trace,hyper=trace,hyper_util=trace,hyper_rustls=trace,rustls=trace";

#[test]
fn the_gateway_logs_neither_the_key_nor_the_prompt() {
    let attempt = Attempt::new("quiet-logs");
    let (ended, fake) = scenario::run(
        with_env(claude_behind_gateway, "RALPH_LOG", GATEWAY_TRACE),
        &attempt,
        vec![Turn::text("<task-done>quiet-logs</task-done>")],
    );

    ended.assert_outcome(OutcomeClass::Finished);
    assert_only_the_real_key_reached(&fake);
    assert!(
        ended.logs.contains("forwarded"),
        "the gateway logged its calls:\n{}",
        ended.logs
    );
    assert!(!ended.logs.contains(FAKE_API_KEY), "the key is not logged");
    let prompt_line = attempt
        .prompt()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !ended.logs.contains(&prompt_line),
        "the prompt is not logged:\n{}",
        ended.logs
    );
}

#[test]
fn a_budget_spent_mid_turn_ends_the_attempt_limit_reached() {
    // Claude Code's first call alone is ~20,000 input tokens: a 1,000-token share is spent
    // by it, and the call after the tool result is refused.
    let attempt = Attempt::new("over-budget").with_runner_args(&["--budget-tokens", "1000"]);
    let turns = vec![
        FakeAnthropic::bash("echo first > first.txt"),
        FakeAnthropic::bash("echo second > second.txt"),
        Turn::text("<task-done>over-budget</task-done>"),
    ];
    let (ended, fake) = scenario::run(claude_behind_gateway, &attempt, turns);

    ended.assert_outcome(OutcomeClass::LimitReached);
    ended.assert_exit(EXIT_LIMIT_REACHED);
    assert_eq!(
        fake.main_requests("over-budget").len(),
        1,
        "{}",
        fake.traffic()
    );
    assert!(attempt.workspace().join("first.txt").exists());
    assert!(!attempt.workspace().join("second.txt").exists());
    assert_metered_as_sent(&ended, &fake);
    let refusal = ended.result.budget_refusal.clone().unwrap_or_default();
    assert!(refusal.contains("of 1000 tokens"), "{refusal}");
    eprintln!(
        "overshoot with one attempt: {} tokens used of a 1000-token share",
        ended.result.usage.tokens.total()
    );
}

#[test]
fn an_empty_key_is_a_misconfiguration_naming_the_variable() {
    let attempt = Attempt::new("empty-key");
    let (ended, fake) = scenario::run(
        with_env(claude_behind_gateway, "ANTHROPIC_API_KEY", ""),
        &attempt,
        vec![Turn::text("<task-done>empty-key</task-done>")],
    );

    ended.assert_outcome(OutcomeClass::Misconfigured);
    ended.assert_exit(EXIT_MISCONFIGURED);
    let problem = ended
        .result
        .misconfiguration
        .clone()
        .map(|m| m.problem)
        .unwrap_or_default();
    assert!(
        problem.contains("ANTHROPIC_API_KEY") && problem.contains("empty"),
        "{problem}"
    );
    assert!(
        fake.requests().is_empty(),
        "no model call: {}",
        fake.traffic()
    );
}

#[test]
fn with_the_gateway_off_the_agent_gets_the_key_and_reports_its_own_usage() {
    let attempt = Attempt::new("gateway-off").with_runner_args(&["--gateway", "off"]);
    let turns = vec![
        FakeAnthropic::bash("env > env.txt"),
        Turn::text("<task-done>gateway-off</task-done>"),
    ];
    let (ended, _fake) = scenario::run(claude_behind_gateway, &attempt, turns);

    let env = std::fs::read_to_string(attempt.workspace().join("env.txt")).unwrap_or_default();
    assert!(env.contains(&format!("ANTHROPIC_API_KEY={FAKE_API_KEY}")));
    assert_eq!(ended.result.reported_usage, None);
    assert_eq!(ended.result.model_calls, None);
}

#[test]
fn usage_sums_every_answer_of_the_attempt() {
    let (ended, fake) = scenario::run_task(
        claude_behind_gateway,
        "two-calls",
        vec![
            FakeAnthropic::bash("true"),
            Turn::text("<task-done>two-calls</task-done>"),
        ],
    );

    let sent = fake.tokens_sent();
    assert!(
        sent.answers >= 2,
        "two main calls at least: {}",
        fake.traffic()
    );
    assert_eq!(
        ended.result.usage.tokens,
        Tokens::new(sent.input, sent.output)
    );
}

#[test]
fn gemini_cli_calls_are_metered_as_the_gemini_api_sent_them() {
    let attempt = Attempt::new("gemini-metered");
    let turns = vec![
        FakeGemini::write_file(&attempt.workspace().join("a.txt"), "a"),
        Turn::text("<task-done>gemini-metered</task-done>"),
    ];
    let (ended, fake) = scenario::run(gemini, &attempt, turns);

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    let keys = fake.keys_seen();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key == FAKE_GEMINI_KEY),
        "keys the Gemini fake received: {keys:?}"
    );
}

#[test]
fn codex_acp_calls_are_metered_as_the_openai_api_sent_them() {
    let port = free_port();
    let attempt = Attempt::new("codex-metered")
        .with_runner_args(&["--gateway-listen", &format!("127.0.0.1:{port}")]);
    let codex_behind_gateway = |script: Script, home: &Path| {
        let fake = FakeOpenAi::start(script).expect("start the OpenAI fake");
        let gateway = format!("http://127.0.0.1:{port}/v1");
        let mut launch =
            FakeOpenAi::codex_acp_at(home, CodexApproval::Never, &gateway, Some("OPENAI_API_KEY"))
                .expect("configure codex-acp");
        launch.env.extend([
            ("OPENAI_API_KEY".to_owned(), FAKE_OPENAI_KEY.to_owned()),
            (
                "OPENAI_BASE_URL".to_owned(),
                format!("{}/v1", fake.base_url()),
            ),
        ]);
        (fake, launch)
    };
    let turns = vec![
        FakeOpenAi::shell("echo hi > hi.txt"),
        Turn::text("<task-done>codex-metered</task-done>"),
    ];
    let (ended, fake) = scenario::run(codex_behind_gateway, &attempt, turns);

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    let keys = fake.keys_seen();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key == FAKE_OPENAI_KEY),
        "keys the OpenAI fake received: {keys:?}"
    );
}

/// A port on 127.0.0.1 free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// `start` with `name=value` added to the agent's launch environment.
fn with_env(
    start: impl Fn(Script, &Path) -> (FakeAnthropic, AgentLaunch),
    name: &'static str,
    value: &'static str,
) -> impl Fn(Script, &Path) -> (FakeAnthropic, AgentLaunch) {
    move |script, home| {
        let (fake, mut launch) = start(script, home);
        launch.env.retain(|(n, _)| n != name);
        launch.env.push((name.to_owned(), value.to_owned()));
        (fake, launch)
    }
}

/// Files under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.filter_map(Result::ok).map(|e| e.path()));
            }
        } else if meta.is_file()
            && std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        {
            found.push(path);
        }
    }
    found
}
