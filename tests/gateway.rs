//! The model gateway (docs/gateway.md) between real agents and the fake model APIs: the
//! runner starts it when the agent's API key is in its environment, the agent gets the
//! gateway's URL and a placeholder key, the fake receives the real key, and the attempt's
//! usage is what the fake sent, counted on the wire.
//!
//! The agents are installed by `scripts/install-agents`; these tests fail, not skip, when
//! one is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The fake API server and the `ralph run` helpers both include tests/support/mentions.rs.
#![allow(clippy::duplicate_mod)]

use crate::support::{fake_apiserver, real_agents};

use std::path::Path;

use ralph::engine::attempt::{OutcomeClass, Tokens};
use ralph::gateway::sidecar::POD_PLACEHOLDER;
use real_agents::fake_anthropic::{FAKE_API_KEY, FakeAnthropic, claude};
use real_agents::fake_gemini::{FAKE_GEMINI_KEY, FakeGemini, gemini};
use real_agents::fake_model::{ModelServer, RequestKind, Script, Turn};
use real_agents::fake_openai::{CodexApproval, FAKE_OPENAI_KEY, FakeOpenAi};
use real_agents::local_run::{
    Project, assert_printed, assert_run_exit, describe, feature_yaml, independent,
};
use real_agents::real_agent::{AgentLaunch, Attempt, EXIT_MISCONFIGURED, Ended, ralph_run};
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

/// The attempt of `task` ended `limitReached` once its first main call had spent the
/// share: the next call never reached the fake, and every token sent is recorded.
fn assert_refused_after_the_first_call(ended: &Ended, fake: &ModelServer, task: &str) {
    ended.assert_outcome(OutcomeClass::LimitReached);
    ended.assert_exit(EXIT_LIMIT_REACHED);
    assert_eq!(fake.main_requests(task).len(), 1, "{}", fake.traffic());
    assert_metered_as_sent(ended, fake);
}

/// The fake saw only the real key, never the placeholder the agent was given.
fn assert_only_the_real_key_reached(fake: &ModelServer) {
    assert_only_key_reached(fake, FAKE_API_KEY);
}

/// Every model call the fake received presented `key`.
fn assert_only_key_reached(fake: &ModelServer, key: &str) {
    let keys = fake.keys_seen();
    assert!(
        !keys.is_empty() && keys.iter().all(|seen| seen == key),
        "keys the fake received (expected only {key}): {keys:?}"
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

    assert_refused_after_the_first_call(&ended, &fake, "over-budget");
    assert!(attempt.workspace().join("first.txt").exists());
    assert!(!attempt.workspace().join("second.txt").exists());
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
    let problem = ended.misconfiguration_problem();
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
    assert_only_key_reached(&fake, FAKE_GEMINI_KEY);
    print_reported_and_metered("gemini-cli", &ended);
}

/// codex-acp against the OpenAI fake through a gateway at `port`, holding
/// [`FAKE_OPENAI_KEY`], starting its sessions in `mode` (`INITIAL_AGENT_MODE`).
fn codex_behind_gateway(
    port: u16,
    approval: CodexApproval,
    mode: &'static str,
) -> impl Fn(Script, &Path) -> (FakeOpenAi, AgentLaunch) {
    move |script: Script, home: &Path| {
        let fake = FakeOpenAi::start(script).expect("start the OpenAI fake");
        let gateway = format!("http://127.0.0.1:{port}/v1");
        let mut launch = FakeOpenAi::codex_acp_at(home, approval, &gateway, Some("OPENAI_API_KEY"))
            .expect("configure codex-acp");
        launch.env.retain(|(name, _)| name != "INITIAL_AGENT_MODE");
        launch.env.extend([
            ("OPENAI_API_KEY".to_owned(), FAKE_OPENAI_KEY.to_owned()),
            (
                "OPENAI_BASE_URL".to_owned(),
                format!("{}/v1", fake.base_url()),
            ),
            ("INITIAL_AGENT_MODE".to_owned(), mode.to_owned()),
        ]);
        (fake, launch)
    }
}

#[test]
fn codex_acp_calls_are_metered_as_the_openai_api_sent_them() {
    let port = free_port();
    let attempt = Attempt::new("codex-metered")
        .with_runner_args(&["--gateway-listen", &format!("127.0.0.1:{port}")]);
    let turns = vec![
        FakeOpenAi::shell("echo hi > hi.txt"),
        Turn::text("<task-done>codex-metered</task-done>"),
    ];
    let (ended, fake) = scenario::run(
        codex_behind_gateway(port, CodexApproval::Never, "agent-full-access"),
        &attempt,
        turns,
    );

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    assert_only_key_reached(&fake, FAKE_OPENAI_KEY);
    print_reported_and_metered("codex-acp", &ended);
}

/// `ralph run` of `tasks` (each: a Bash call, then done) with the claude fake, under
/// `spec_extra` (a budget); returns the project, the fake and the run's output.
fn ralph_run_claude(
    tasks: &[&str],
    spec_extra: &str,
) -> (Project, FakeAnthropic, std::process::Output) {
    let project = Project::new(
        &feature_yaml("budgeted", spec_extra, &independent(tasks)),
        "",
    );
    let script = tasks.iter().fold(Script::new(), |script, name| {
        script.task(
            *name,
            [
                FakeAnthropic::bash(&format!("echo {name} > {name}.txt")),
                Turn::text(format!("<task-done>{name}</task-done>")),
            ],
        )
    });
    let home = project.path("home");
    std::fs::create_dir(&home).expect("create the agent's home");
    let (fake, launch) = claude(script, &home);
    let output = ralph_run(&project.path("feature.yaml"), &launch);
    (project, fake, output)
}

/// What the run's stored attempts used, input plus output tokens.
fn stored_tokens(project: &Project) -> u64 {
    project
        .attempts()
        .iter()
        .map(|attempt| attempt.details.usage.tokens.total())
        .sum()
}

#[test]
fn ralph_run_ends_limit_reached_when_the_budget_runs_out_mid_turn() {
    let (project, fake, output) =
        ralph_run_claude(&["first", "second"], "  budget:\n    maxTokens: 1000\n");

    assert_run_exit(&output, 5, &fake.traffic());
    assert_eq!(
        project.attempt_outcomes(),
        ["limitReached"],
        "{}",
        describe(&output)
    );
    let sent = fake.tokens_sent();
    assert_eq!(stored_tokens(&project), sent.input + sent.output);
    eprintln!(
        "budget overshoot, 1 attempt: {} tokens used of maxTokens 1000",
        stored_tokens(&project)
    );
}

#[test]
fn ten_parallel_attempts_share_the_budget_and_overshoot_it_by_the_calls_in_flight() {
    let tasks: Vec<String> = (1..=10).map(|n| format!("t-{n:02}")).collect();
    let names: Vec<&str> = tasks.iter().map(String::as_str).collect();
    let (project, fake, output) = ralph_run_claude(
        &names,
        "  parallelism: 10\n  budget:\n    maxTokens: 100000\n",
    );

    assert_run_exit(&output, 5, &fake.traffic());
    let sent = fake.tokens_sent();
    let used = stored_tokens(&project);
    assert_eq!(
        used,
        sent.input + sent.output,
        "every token sent is recorded"
    );
    assert_eq!(
        project.attempt_outcomes(),
        vec!["limitReached"; 10],
        "each attempt's first call spent its share; none started once the shares held the budget"
    );
    let largest_call = project
        .attempts()
        .iter()
        .map(|attempt| attempt.details.usage.tokens.total())
        .max()
        .unwrap_or_default();
    assert!(
        used <= 100_000 + 10 * largest_call,
        "overshoot bounded by one call in flight per attempt: used {used}"
    );
    eprintln!(
        "budget overshoot, 10 parallel attempts: {used} tokens used of maxTokens 100000 \
         ({} attempts, outcomes {:?})",
        project.attempts().len(),
        project.attempt_outcomes()
    );
}

#[test]
fn ralph_sidecar_runs_the_gateway_an_agent_pods_runner_reads() {
    // `ralph sidecar --gateway anthropic` as the agent Pod runs it (its claim Lease on the
    // fake API server, the key in RALPH_GATEWAY_CREDENTIAL), the runner with --gateway-url.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let apiserver = runtime.block_on(lease_held_by("feat-build-a1"));
    let attempt = Attempt::new("sidecar-metered");
    let script = Script::new().task(
        "sidecar-metered",
        [Turn::text("<task-done>sidecar-metered</task-done>")],
    );
    let (fake, mut launch) = claude(script, &attempt.home());
    let port = free_port();
    let gateway = format!("http://127.0.0.1:{port}");
    let mut sidecar = spawn_sidecar(&apiserver, &attempt, port, fake.base_url());
    wait_until_listening(port, &mut sidecar);
    launch
        .env
        .retain(|(name, _)| !name.starts_with("ANTHROPIC_"));
    launch.env.extend([
        ("ANTHROPIC_BASE_URL".to_owned(), gateway.clone()),
        ("ANTHROPIC_API_KEY".to_owned(), POD_PLACEHOLDER.to_owned()),
    ]);

    let ended = attempt
        .with_runner_args(&["--gateway-url", &gateway])
        .run(&launch);
    let _ = sidecar.kill();
    let _ = sidecar.wait();

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    assert_only_the_real_key_reached(&fake);
}

/// A fake API server where attempt `holder` holds the claim Lease `team/feat-build`.
async fn lease_held_by(holder: &str) -> fake_apiserver::FakeApiServer {
    let server = fake_apiserver::FakeApiServer::start()
        .await
        .expect("fake API server");
    let leases = ralph::controller::act::claim::Leases::new(
        kube::Api::namespaced(server.client_in("team"), "team"),
        std::time::Duration::from_secs(5),
    );
    let request = ralph::controller::act::claim::ClaimRequest {
        lease: "feat-build".to_owned(),
        holder: holder.to_owned(),
        duration_seconds: 60,
        owner: None,
        labels: Default::default(),
    };
    leases
        .create(&request, jiff::Timestamp::now())
        .await
        .expect("claim");
    server
}

/// `ralph sidecar` keeping the claim of `attempt` and running the gateway on `port` in
/// front of `upstream`, with [`FAKE_API_KEY`] from the environment.
fn spawn_sidecar(
    apiserver: &fake_apiserver::FakeApiServer,
    attempt: &Attempt,
    port: u16,
    upstream: &str,
) -> std::process::Child {
    let dir = attempt.home();
    let kubeconfig = dir.join("sidecar.kubeconfig");
    std::fs::write(&kubeconfig, apiserver.kubeconfig_yaml("team")).expect("kubeconfig");
    let heartbeat = dir.join("heartbeat");
    std::fs::write(&heartbeat, b"").expect("heartbeat");
    let listen = format!("127.0.0.1:{port}");
    std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args([
            "sidecar",
            "--lease",
            "team/feat-build",
            "--holder",
            "feat-build-a1",
        ])
        .arg("--heartbeat-file")
        .arg(&heartbeat)
        .args(["--gateway", "anthropic", "--gateway-listen", &listen])
        .args(["--gateway-upstream", upstream])
        .args(["--gateway-placeholder", POD_PLACEHOLDER])
        .env("KUBECONFIG", &kubeconfig)
        .env("RALPH_GATEWAY_CREDENTIAL", FAKE_API_KEY)
        .env(
            "RALPH_GATEWAY_CREDENTIAL_SOURCE",
            "Secret models key anthropic",
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start ralph sidecar")
}

/// Waits (bounded) until something listens on `port`; fails if `sidecar` exits first.
fn wait_until_listening(port: u16, sidecar: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = sidecar.try_wait() {
            panic!("ralph sidecar exited before its gateway listened: {status}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sidecar's gateway did not listen within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn ralph_run_warns_when_a_feature_turns_the_gateway_off() {
    let manifest = feature_yaml("ungated", "", &independent(&["only"])).replace(
        "    command: [\"unused-agent\"]\n",
        "    command: [\"unused-agent\"]\n    gateway:\n      enabled: false\n",
    );
    let project = Project::new(
        &manifest,
        "default:\n  - text: \"<task-done>{task}</task-done>\"\n",
    );

    let output = project.run_to_success(&[]);

    assert_printed(&output, "the model gateway is off");
}

#[test]
fn every_call_codex_makes_around_a_shell_command_is_metered() {
    // codex-acp in the mode ralph runs it in (under Landlock: agent-full-access; its
    // reviewer, which runs only in mode `agent`, is not asked): the turn that asks for the
    // command and the turn after it are two calls, both metered as sent.
    let port = free_port();
    let attempt = Attempt::new("codex-reviewed")
        .with_runner_args(&["--gateway-listen", &format!("127.0.0.1:{port}")]);
    let turns = vec![
        FakeOpenAi::escalated_shell("echo hi > hi.txt"),
        Turn::text("<task-done>codex-reviewed</task-done>"),
    ];
    let codex = codex_behind_gateway(port, CodexApproval::OnRequest, "agent");
    let (ended, fake) = scenario::run(codex, &attempt, turns);

    assert!(
        fake.requests().len() >= 2,
        "the shell turn and the turn after it: {}",
        fake.traffic()
    );
    assert_metered_as_sent(&ended, &fake);
    print_reported_and_metered("codex-acp around a shell command", &ended);
}

#[test]
fn an_agent_ralph_does_not_know_goes_through_the_gateway_of_the_provider_named() {
    // claude-agent-acp under another name: without --gateway-provider it would hold the key.
    let attempt = Attempt::new("renamed").with_runner_args(&["--gateway-provider", "anthropic"]);
    let renamed = |script: Script, home: &Path| {
        let (fake, mut launch) = claude(script, home);
        let alias = home.join("my-agent");
        std::os::unix::fs::symlink(&launch.program, &alias).expect("alias the agent");
        launch.program = alias;
        (fake, launch)
    };
    let turns = vec![
        FakeAnthropic::bash("env > env.txt"),
        Turn::text("<task-done>renamed</task-done>"),
    ];
    let (ended, fake) = scenario::run(renamed, &attempt, turns);

    ended.assert_outcome(OutcomeClass::Finished);
    assert_metered_as_sent(&ended, &fake);
    let env = std::fs::read_to_string(attempt.workspace().join("env.txt")).unwrap_or_default();
    assert!(
        !env.contains(FAKE_API_KEY),
        "the key stays out of the agent's environment"
    );
}

/// A port on 127.0.0.1 free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

#[test]
fn a_turn_cut_off_by_max_tokens_counts_every_call_claude_made() {
    // Claude Code asks the model to go on three more times after a max_tokens stop, and
    // reports the turn as 0 / 0 tokens itself.
    let (ended, fake) = scenario::run_task(
        claude_behind_gateway,
        "cut-off",
        vec![Turn::max_tokens("A long answer that never ends")],
    );

    assert!(
        fake.main_requests("cut-off").len() > 1,
        "{}",
        fake.traffic()
    );
    assert!(ended.result.usage.tokens.total() > 0);
    assert_metered_as_sent(&ended, &fake);
    print_reported_and_metered("claude, a max_tokens turn", &ended);
}

#[test]
fn claudes_title_call_is_metered_too() {
    let allow_side_calls = |script: Script, home: &Path| {
        let (fake, mut launch) = claude(script, home);
        launch
            .env
            .retain(|(name, _)| name != "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC");
        (fake, launch)
    };
    let (ended, fake) = scenario::run_task(
        allow_side_calls,
        "titled",
        vec![Turn::text("<task-done>titled</task-done>")],
    );

    let side_calls = fake
        .requests()
        .iter()
        .filter(|request| request.kind == RequestKind::Side)
        .count();
    assert!(side_calls > 0, "a title call was made: {}", fake.traffic());
    assert_metered_as_sent(&ended, &fake);
    print_reported_and_metered("claude with its title call", &ended);
}

#[test]
fn a_gemini_budget_spent_mid_turn_ends_the_attempt_limit_reached() {
    let attempt = Attempt::new("gemini-budget").with_runner_args(&["--budget-tokens", "100"]);
    let turns = vec![
        FakeGemini::shell("echo first > first.txt"),
        Turn::text("<task-done>gemini-budget</task-done>"),
    ];
    let (ended, fake) = scenario::run(gemini, &attempt, turns);

    assert_refused_after_the_first_call(&ended, &fake, "gemini-budget");
}

/// Prints what the agent reported beside what the gateway metered (for docs/gateway.md).
fn print_reported_and_metered(what: &str, ended: &Ended) {
    let reported = ended.result.reported_usage.clone().unwrap_or_default();
    let metered = &ended.result.usage;
    eprintln!(
        "{what}: the agent reported {} in / {} out, the gateway metered {} in / {} out over {:?} calls",
        reported.tokens.input,
        reported.tokens.output,
        metered.tokens.input,
        metered.tokens.output,
        ended.result.model_calls
    );
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
