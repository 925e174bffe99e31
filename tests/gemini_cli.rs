//! `ralph runner` driving the real gemini-cli (`gemini --acp`), offline against a scripted fake
//! of the Gemini API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_gemini.rs"]
mod fake_gemini;
#[path = "support/fake_model.rs"]
mod fake_model;
#[path = "support/local_run.rs"]
mod local_run;
#[path = "support/real_agent.rs"]
mod real_agent;

use fake_gemini::{FakeGemini, GEMINI_MODEL};
use fake_model::{Script, Turn};
use local_run::{Project, describe, exit_code, feature_yaml, task};
use ralph::engine::attempt::{OutcomeClass, StopReason};
use ralph::engine::dag::TaskPhase;
use real_agent::{
    AgentLaunch, Attempt, EXIT_CRASHED, EXIT_EXHAUSTED, EXIT_FINISHED, HANG_DEADLINE,
    kill_agent_of, ralph_run,
};

/// The fake API scripted with `turns` for the attempt's task, and gemini-cli configured for it.
fn gemini(attempt: &Attempt, turns: Vec<Turn>) -> (FakeGemini, AgentLaunch) {
    let fake = FakeGemini::start(Script::new().task(attempt.task(), turns))
        .expect("start the fake Gemini API");
    let launch = fake
        .gemini_cli(&attempt.home())
        .unwrap_or_else(|error| panic!("configure gemini-cli: {error}"));
    (fake, launch)
}

#[test]
fn task_done_sigil_ending_the_final_answer_finishes_the_attempt() {
    let attempt = Attempt::new("write-greeting");
    let (fake, launch) = gemini(
        &attempt,
        vec![Turn::text(
            "The greeting is written.\n<task-done>write-greeting</task-done>",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_stop_reason(Some(StopReason::EndTurn));
    ended.assert_sigils(Some("write-greeting"), None);
    let agent = ended.result.agent.clone().unwrap_or_default();
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
    let attempt = Attempt::new("report-usage");
    let (_fake, launch) = gemini(
        &attempt,
        vec![Turn::text("Done.\n<task-done>report-usage</task-done>")],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_usage_reported();
    assert_eq!(
        ended.result.model.as_deref(),
        Some(GEMINI_MODEL),
        "{}",
        ended.explain("")
    );
}

#[test]
fn the_prompt_file_reaches_the_model_as_the_user_message() {
    let attempt = Attempt::new("write-readme");
    let (fake, launch) = gemini(
        &attempt,
        vec![Turn::text("<task-done>write-readme</task-done>")],
    );

    attempt.run(&launch).assert_exit(EXIT_FINISHED);

    let main = fake.main_requests("write-readme");
    assert_eq!(main.len(), 1, "one model call: {}", fake.traffic());
    let prompt = fake_gemini::user_text(main[0].body.as_ref().expect("a JSON body"));
    assert!(
        prompt.contains(attempt.prompt().trim()),
        "the user turn carries the prompt file; it was:\n{prompt}"
    );
}

#[test]
fn an_answer_without_a_sigil_finishes_with_no_verdict() {
    let attempt = Attempt::new("chatty");
    let (_fake, launch) = gemini(
        &attempt,
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
    let (_fake, launch) = gemini(
        &attempt,
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

#[test]
fn http_500_from_the_model_api_is_a_crash() {
    let attempt = Attempt::new("unlucky");
    let (fake, launch) = gemini(&attempt, vec![FakeGemini::server_error()]);

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Crashed);
    ended.assert_exit(EXIT_CRASHED);
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(
        crash.contains("500") || crash.to_lowercase().contains("internal"),
        "crash summary names the API error: {crash:?}\n{}",
        ended.explain(&fake.traffic())
    );
}

#[test]
fn http_429_with_a_daily_quota_is_exhaustion() {
    let attempt = Attempt::new("over-quota");
    let (fake, launch) = gemini(&attempt, vec![FakeGemini::daily_quota_exhausted()]);

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
fn http_429_without_quota_details_is_a_crash() {
    let attempt = Attempt::new("rate-limited");
    let (fake, launch) = gemini(&attempt, vec![FakeGemini::rate_limited()]);

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

/// gemini-cli 0.61.0 answers a `MAX_TOKENS` finish with `stopReason: end_turn` (it sends
/// `max_tokens` only when the context window would overflow): the runner cannot tell, and the
/// cut-off answer, which has no sigil, is released without a verdict.
#[test]
fn max_tokens_finish_reaches_the_runner_as_an_ordinary_end_turn() {
    let attempt = Attempt::new("long-answer");
    let (fake, launch) = gemini(
        &attempt,
        vec![Turn::max_tokens(
            "Here is a very long answer that never ends",
        )],
    );

    let ended = attempt.run(&launch);

    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_stop_reason(Some(StopReason::EndTurn));
    ended.assert_sigils(None, None);
    assert_eq!(
        fake.main_requests("long-answer").len(),
        1,
        "gemini does not ask the model to continue: {}",
        fake.traffic()
    );
}

#[test]
fn kill_9_of_the_agent_is_a_crash_with_the_signal() {
    let attempt = Attempt::new("killed");
    let (fake, launch) = gemini(&attempt, vec![Turn::hang("Let me think about this")]);
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
    let (fake, launch) = gemini(&attempt, vec![Turn::hang("Let me think about this")]);

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
fn a_shell_command_gemini_asks_permission_for_runs_when_the_runner_allows_it() {
    let attempt = Attempt::new("write-proof");
    let (fake, launch) = gemini(
        &attempt,
        vec![
            FakeGemini::shell("echo hi > proof.txt"),
            Turn::text("Wrote proof.txt.\n<task-done>write-proof</task-done>"),
        ],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-proof"), None);
    assert_eq!(
        ended.permission_decisions(),
        [true],
        "gemini asked once and the runner allowed it\n{}",
        ended.explain(&fake.traffic())
    );
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(proof, "hi\n");
}

#[test]
fn a_shell_command_denied_by_a_pattern_does_not_run() {
    let attempt = Attempt::new("forbidden").with_runner_args(&["--deny", "*forbidden.txt*"]);
    let (fake, launch) = gemini(
        &attempt,
        vec![
            FakeGemini::shell("echo no > forbidden.txt"),
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
    ended.assert_outcome(OutcomeClass::Finished);
}

/// gemini-cli's write tool reads the file first; through the client's fs capability a file
/// that does not exist yet fails, so the runner must not advertise fs to gemini (issue 9.4).
#[test]
fn a_new_file_gemini_writes_lands_in_the_workspace() {
    let attempt = Attempt::new("write-notes");
    let notes = attempt.workspace().join("notes.md");
    let (fake, launch) = gemini(
        &attempt,
        vec![
            FakeGemini::write_file(&notes, "# Notes\n"),
            Turn::text("Wrote notes.md.\n<task-done>write-notes</task-done>"),
        ],
    );

    let ended = attempt.run(&launch);

    ended.assert_exit(EXIT_FINISHED);
    let written = std::fs::read_to_string(&notes)
        .unwrap_or_else(|error| panic!("notes.md: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(written, "# Notes\n");
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
    let greeting = project.path("greeting.txt");
    let fake = FakeGemini::start(
        Script::new()
            .task(
                "write-greeting",
                [
                    FakeGemini::write_file(&greeting, "Hello, world!\n"),
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
    .expect("start the fake Gemini API");
    let home = project.path("home");
    std::fs::create_dir(&home).expect("create the agent's home");
    let launch = fake
        .gemini_cli(&home)
        .unwrap_or_else(|error| panic!("configure gemini-cli: {error}"));

    let output = ralph_run(&project.path("feature.yaml"), &launch);

    assert_eq!(
        exit_code(&output),
        0,
        "{}\n{}",
        describe(&output),
        fake.traffic()
    );
    assert_eq!(
        std::fs::read_to_string(&greeting).expect("the agent wrote greeting.txt"),
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

/// gemini-cli refuses a path outside its workspace directories itself, before asking.
#[test]
fn a_file_outside_the_workspace_is_not_written() {
    let attempt = Attempt::new("escape");
    let outside = tempfile::tempdir().expect("create a directory outside the workspace");
    let target = outside.path().join("escaped.txt");
    let (fake, launch) = gemini(
        &attempt,
        vec![
            FakeGemini::write_file(&target, "gotcha\n"),
            Turn::text("Could not write it.\n<task-failed>escape</task-failed>"),
        ],
    );

    let ended = attempt.run(&launch);

    assert!(
        !target.exists(),
        "gemini wrote outside the workspace\n{}",
        ended.explain(&fake.traffic())
    );
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
