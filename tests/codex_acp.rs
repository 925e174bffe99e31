//! `ralph runner` driving the real codex-acp (Codex over ACP), offline against a scripted
//! fake of the OpenAI Responses API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_model.rs"]
mod fake_model;
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[path = "support/local_run.rs"]
mod local_run;
#[path = "support/real_agent.rs"]
mod real_agent;

use fake_model::{Script, Turn};
use fake_openai::{CODEX_MODEL, CodexApproval, FakeOpenAi};
use local_run::{Project, describe, exit_code, feature_yaml, task};
use ralph::engine::attempt::{OutcomeClass, StopReason};
use ralph::engine::dag::TaskPhase;
use real_agent::{
    AgentLaunch, Attempt, EXIT_CRASHED, EXIT_EXHAUSTED, EXIT_FINISHED, HANG_DEADLINE,
    kill_agent_of, ralph_run,
};

/// The fake API scripted with `turns` for `task`, and codex-acp configured against it.
fn codex(
    attempt: &Attempt,
    approval: CodexApproval,
    turns: Vec<Turn>,
) -> (FakeOpenAi, AgentLaunch) {
    let fake = FakeOpenAi::start(Script::new().task(attempt.task(), turns))
        .expect("start the fake OpenAI API");
    let launch = fake
        .codex_acp(&attempt.home(), approval)
        .unwrap_or_else(|error| panic!("configure codex-acp: {error}"));
    (fake, launch)
}

#[test]
fn task_done_sigil_ending_the_final_answer_finishes_the_attempt() {
    let attempt = Attempt::new("write-greeting");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::text(
            "The greeting is written.\n<task-done>write-greeting</task-done>",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_stop_reason(Some(StopReason::EndTurn));
    ended.assert_sigils(Some("write-greeting"), None);
    ended.assert_usage_reported();
    assert_eq!(
        ended.result.model.as_deref(),
        Some(CODEX_MODEL),
        "{}",
        ended.explain(&fake.traffic())
    );
    assert_eq!(
        ended.result.usage.cost_usd, None,
        "codex reports no cost: unknown, not 0"
    );
    let agent = ended.result.agent.clone().unwrap_or_default();
    assert!(agent.contains("codex-acp"), "agent was {agent:?}");
}

#[test]
fn the_prompt_file_reaches_the_model_as_the_user_message() {
    let attempt = Attempt::new("write-readme");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::text("<task-done>write-readme</task-done>")],
    );

    attempt.run(&launch).assert_exit(EXIT_FINISHED);

    let main = fake.main_requests("write-readme");
    assert_eq!(main.len(), 1, "one model call: {}", fake.traffic());
    let prompt = fake_openai::user_text(main[0].body.as_ref().expect("a JSON body"));
    assert!(
        prompt.contains(attempt.prompt().trim()),
        "the user message carries the prompt file; it was:\n{prompt}"
    );
}

#[test]
fn an_answer_without_a_sigil_finishes_with_no_verdict() {
    let attempt = Attempt::new("chatty");
    let (_fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::text("I looked around and will continue later.")],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_stop_reason(Some(StopReason::EndTurn));
    ended.assert_sigils(None, None);
}

#[test]
fn task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason() {
    let attempt = Attempt::new("impossible");
    let (_fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::text(
            "The API the task needs does not exist.\n<task-failed>impossible</task-failed>",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_sigils(None, Some("impossible"));
    let reason = ended
        .result
        .sigils
        .task_failed_reason
        .clone()
        .unwrap_or_default();
    assert!(
        reason.contains("does not exist"),
        "failure reason: {reason:?}\n{}",
        ended.explain("")
    );
}

/// codex-acp reports a 5xx as a `systemError` thread status and a message chunk
/// ("We're currently experiencing high demand…", no status code), then `end_turn`.
#[test]
fn http_500_from_the_model_api_is_a_crash_named_by_codexs_message() {
    let attempt = Attempt::new("unlucky");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![FakeOpenAi::server_error()],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(
        crash.contains("high demand"),
        "crash summary quotes the agent's error: {crash:?}\n{}",
        ended.explain(&fake.traffic())
    );
}

#[test]
fn http_429_insufficient_quota_is_exhaustion() {
    let attempt = Attempt::new("over-quota");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![FakeOpenAi::quota_exhausted()],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Exhausted);
    ended.assert_exit(EXIT_EXHAUSTED);
    let exhaustion = ended
        .result
        .exhaustion
        .clone()
        .unwrap_or_else(|| panic!("no exhaustion\n{}", ended.explain(&fake.traffic())));
    assert!(
        exhaustion.message.to_lowercase().contains("quota"),
        "exhaustion message: {:?}",
        exhaustion.message
    );
}

/// A rate limit without a quota type is transient: a crash (retried with backoff), not
/// exhaustion and never a clean turn.
#[test]
fn http_429_rate_limit_without_a_quota_type_is_a_crash() {
    let attempt = Attempt::new("rate-limited");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![FakeOpenAi::rate_limited()],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(
        crash.contains("429"),
        "crash summary names the status: {crash:?}\n{}",
        ended.explain(&fake.traffic())
    );
}

/// codex-acp reports `response.incomplete` (`max_output_tokens`) as a `systemError` thread
/// status and the message "Incomplete response returned, reason: max_output_tokens", then
/// `end_turn`; the runner should call that what it is, a `max_tokens` stop, as for claude.
#[test]
fn max_output_tokens_stop_is_reported_as_max_tokens() {
    let attempt = Attempt::new("long-answer");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::max_tokens(
            "Here is a very long answer that never ends",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_stop_reason(Some(StopReason::MaxTokens));
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_sigils(None, None);
    assert_eq!(
        fake.main_requests("long-answer").len(),
        1,
        "codex does not ask the model to continue: {}",
        fake.traffic()
    );
}

#[test]
fn kill_9_of_the_agent_is_a_crash_with_the_signal() {
    let attempt = Attempt::new("killed");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::hang("Let me think about this")],
    );
    let child = attempt.spawn(&launch);

    let hanging = fake.wait_until_hanging(HANG_DEADLINE);
    let killed = kill_agent_of(&child);
    let ended = attempt.wait(child);

    assert!(
        hanging,
        "the model request never started\n{}",
        ended.explain("")
    );
    assert_eq!(killed, 1, "the runner has one agent process");
    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    assert_eq!(ended.result.signal, Some(9), "{}", ended.explain(""));
}

#[test]
fn a_model_that_hangs_past_the_idle_timeout_is_a_crash() {
    let attempt = Attempt::new("stuck").with_idle_timeout(real_agent::SHORT_IDLE_TIMEOUT, "2s");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::Never,
        vec![Turn::hang("Let me think about this")],
    );

    let ended = attempt.run(&launch);

    assert!(
        fake.wait_until_hanging(std::time::Duration::ZERO),
        "the model request never started\n{}",
        ended.explain("")
    );
    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(crash.contains("idle timeout"), "crash summary: {crash:?}");
}

#[test]
fn a_command_codex_asks_permission_for_runs_when_the_runner_allows_it() {
    let attempt = Attempt::new("write-proof");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::OnRequest,
        vec![
            FakeOpenAi::escalated_shell("echo hi > proof.txt"),
            Turn::text("Wrote proof.txt.\n<task-done>write-proof</task-done>"),
        ],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-proof"), None);
    assert_eq!(
        ended.permission_decisions(),
        [true],
        "codex asked once and the runner allowed it\n{}",
        ended.explain(&fake.traffic())
    );
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(proof, "hi\n");
}

/// Codex offers one way to refuse an escalated command, "No, and tell Codex what to do
/// differently", which interrupts its turn (`stopReason: cancelled` though the runner never
/// cancelled): a crash naming the refusal, not a user cancellation.
#[test]
fn a_command_denied_by_a_pattern_does_not_run_and_is_a_crash_naming_the_refusal() {
    let attempt = Attempt::new("forbidden").with_runner_args(&["--deny", "*forbidden.txt*"]);
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::OnRequest,
        vec![
            FakeOpenAi::escalated_shell("echo no > forbidden.txt"),
            Turn::text("I was not allowed to.\n<task-failed>forbidden</task-failed>"),
        ],
    );

    let ended = attempt.run(&launch);

    assert_eq!(
        ended.permission_decisions(),
        [false],
        "{}",
        ended.explain("")
    );
    assert!(
        !attempt.workspace().join("forbidden.txt").exists(),
        "the denied command ran\n{}",
        ended.explain(&fake.traffic())
    );
    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
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
    let attempt = Attempt::new("write-notes");
    let notes = attempt.workspace().join("notes.md");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::OnRequest,
        vec![
            FakeOpenAi::add_file_patch(&notes, "# Notes"),
            Turn::text("Wrote notes.md.\n<task-done>write-notes</task-done>"),
        ],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-notes"), None);
    let written = std::fs::read_to_string(&notes)
        .unwrap_or_else(|error| panic!("notes.md: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(written, "# Notes\n");
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
    let attempt = Attempt::new("escape");
    let outside = tempfile::tempdir().expect("create a directory outside the workspace");
    let target = outside.path().join("escaped.txt");
    let (fake, launch) = codex(
        &attempt,
        CodexApproval::OnRequest,
        vec![
            FakeOpenAi::add_file_patch(&target, "gotcha"),
            Turn::text("Could not write it.\n<task-failed>escape</task-failed>"),
        ],
    );

    let ended = attempt.run(&launch);

    assert!(
        !target.exists(),
        "codex wrote outside the workspace\n{}",
        ended.explain(&fake.traffic())
    );
    assert_eq!(
        ended.permission_decisions(),
        [false],
        "the runner was asked and refused\n{}",
        ended.explain("")
    );
    ended.assert_sigils(None, None);
}

#[test]
fn ralph_run_completes_a_three_task_feature_in_dependency_order() {
    let manifest = feature_yaml(
        "greeting",
        "",
        &[
            task("write-greeting", &[]),
            task("translate-greeting", &["write-greeting"]),
            task("review-greeting", &["translate-greeting"]),
        ],
    );
    let project = Project::new(&manifest, "");
    let fake = FakeOpenAi::start(
        Script::new()
            .task(
                "write-greeting",
                [
                    FakeOpenAi::shell("echo 'Hello, world!' > greeting.txt"),
                    Turn::text("Wrote greeting.txt.\n<task-done>write-greeting</task-done>"),
                ],
            )
            .task(
                "translate-greeting",
                [Turn::text(
                    "Bonjour is in the file now.\n<task-done>translate-greeting</task-done>",
                )],
            )
            .task(
                "review-greeting",
                [Turn::text(
                    "The greeting is fine.\n<task-done>review-greeting</task-done>",
                )],
            ),
    )
    .expect("start the fake OpenAI API");
    let home = project.path("home");
    std::fs::create_dir(&home).expect("create the agent's home");
    let launch = fake
        .codex_acp(&home, CodexApproval::Never)
        .unwrap_or_else(|error| panic!("configure codex-acp: {error}"));

    let output = ralph_run(&project.path("feature.yaml"), &launch);

    assert_eq!(
        exit_code(&output),
        0,
        "{}\n{}",
        describe(&output),
        fake.traffic()
    );
    assert_eq!(
        std::fs::read_to_string(project.path("greeting.txt"))
            .expect("the agent wrote greeting.txt"),
        "Hello, world!\n"
    );
    let tasks = project.store().tasks().expect("read the run's tasks");
    assert!(
        tasks.iter().all(|task| task.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    assert_eq!(
        project.started_order(),
        ["write-greeting", "translate-greeting", "review-greeting"]
    );
}
