//! The behaviours every real agent is held to, written once: each scenario scripts the fake
//! model API, runs `ralph runner` (or `ralph run`) on the agent and asserts what must hold
//! for any agent. A test names the agent and the behaviour and adds what is particular to
//! that agent:
//!
//! ```ignore
//! #[test]
//! fn kill_9_of_the_agent_is_a_crash_with_the_signal() {
//!     scenario::kill_9_of_the_agent_is_a_crash_with_the_signal(codex);
//! }
//! ```
//!
//! A part of tests/support/real_agents.rs (it uses its siblings `fake_model`, `local_run` and
//! `real_agent`).

use std::ops::Deref;
use std::path::Path;

use ralph::engine::attempt::{OutcomeClass, StopReason};
use ralph::engine::dag::TaskPhase;
use serde_json::Value;

use super::fake_model::{ModelServer, Script, Turn};
use super::local_run::{Project, describe, exit_code, feature_yaml, task};
use super::real_agent::{
    AgentLaunch, Attempt, EXIT_EXHAUSTED, EXIT_FINISHED, Ended, HANG_DEADLINE, SHORT_IDLE_TIMEOUT,
    kill_agent_of, ralph_run,
};

/// `ralph run` of `manifest` with the agent, which must exit 0 (its output and what the
/// fake model received are shown when it does not).
pub fn ralph_run_to_success(
    manifest: &Path,
    launch: &AgentLaunch,
    model: &ModelServer,
) -> std::process::Output {
    let output = ralph_run(manifest, launch);
    assert_eq!(
        exit_code(&output),
        0,
        "{}\n{}",
        describe(&output),
        model.traffic()
    );
    output
}

/// Starts an agent's fake model API with a script and says how to start the agent against
/// it, with the given home directory (e.g. `|script, home| codex(script, home)`).
pub trait StartAgent<F>: Fn(Script, &Path) -> (F, AgentLaunch) {}

impl<F, T: Fn(Script, &Path) -> (F, AgentLaunch)> StartAgent<F> for T {}

/// The fake scripted with `turns` for the attempt's task, and the agent's launch against it.
pub fn start<F>(
    agent: impl StartAgent<F>,
    attempt: &Attempt,
    turns: Vec<Turn>,
) -> (F, AgentLaunch) {
    agent(Script::new().task(attempt.task(), turns), &attempt.home())
}

/// Runs `attempt` to its end, the model answering with `turns`.
pub fn run<F>(agent: impl StartAgent<F>, attempt: &Attempt, turns: Vec<Turn>) -> (Ended, F) {
    let (fake, launch) = start(agent, attempt, turns);
    (attempt.run(&launch), fake)
}

/// Runs a fresh attempt of `task` to its end, the model answering with `turns`.
pub fn run_task<F>(agent: impl StartAgent<F>, task: &str, turns: Vec<Turn>) -> (Ended, F) {
    run(agent, &Attempt::new(task), turns)
}

/// A final answer ending with the task-done sigil finishes the attempt with the sigil found;
/// returns the end and the fake for what the agent reports besides.
pub fn task_done_sigil_ending_the_final_answer_finishes_the_attempt<F>(
    agent: impl StartAgent<F>,
) -> (Ended, F) {
    the_task_done_sigil_in_the_answer_finishes_the_attempt(
        agent,
        "The greeting is written.\n<task-done>write-greeting</task-done>",
    )
}

/// `answer`, which holds the task-done sigil of task `write-greeting`, finishes the attempt
/// with the sigil found; returns the end and the fake.
pub fn the_task_done_sigil_in_the_answer_finishes_the_attempt<F>(
    agent: impl StartAgent<F>,
    answer: &str,
) -> (Ended, F) {
    let (ended, fake) = run_task(agent, "write-greeting", vec![Turn::text(answer)]);

    ended.assert_finished(StopReason::EndTurn, Some("write-greeting"), None);
    (ended, fake)
}

/// The prompt file reaches the model as the user's message, read from a request body with
/// `user_text` (each wire format puts it elsewhere).
pub fn the_prompt_file_reaches_the_model_as_the_user_message<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    user_text: impl Fn(&Value) -> String,
) {
    let attempt = Attempt::new("write-readme");
    let (ended, fake) = run(
        agent,
        &attempt,
        vec![Turn::text("<task-done>write-readme</task-done>")],
    );

    ended.assert_exit(EXIT_FINISHED);
    let main = fake.main_requests("write-readme");
    assert_eq!(main.len(), 1, "one model call: {}", fake.traffic());
    let prompt = user_text(main[0].body.as_ref().expect("a JSON body"));
    assert!(
        prompt.contains(attempt.prompt().trim()),
        "the user message carries the prompt file; it was:\n{prompt}"
    );
}

/// An answer without a sigil finishes the attempt with no verdict.
pub fn an_answer_without_a_sigil_finishes_with_no_verdict<F>(agent: impl StartAgent<F>) {
    let (ended, _fake) = run_task(
        agent,
        "chatty",
        vec![Turn::text("I looked around and will continue later.")],
    );

    ended.assert_finished(StopReason::EndTurn, None, None);
}

/// A final answer ending with the task-failed sigil is reported with the agent's reason.
pub fn task_failed_sigil_ending_the_final_answer_is_reported_with_its_reason<F>(
    agent: impl StartAgent<F>,
) {
    let (ended, _fake) = run_task(
        agent,
        "impossible",
        vec![Turn::text(
            "The API the task needs does not exist.\n<task-failed>impossible</task-failed>",
        )],
    );

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

/// The API error `error` is a crash whose summary names one of `named` (compared in lower
/// case).
pub fn an_api_error_is_a_crash_naming<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    error: Turn,
    named: &[&str],
) {
    let (ended, fake) = run_task(agent, "unlucky", vec![error]);

    ended.assert_crashed();
    ended.assert_sigils(None, None);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(
        named
            .iter()
            .any(|name| crash.to_lowercase().contains(&name.to_lowercase())),
        "crash summary names one of {named:?}: {crash:?}\n{}",
        ended.explain(&fake.traffic())
    );
}

/// The API error `error` is exhaustion whose message names `named` (compared in lower case).
pub fn an_api_error_is_exhaustion_naming<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    error: Turn,
    named: &str,
) {
    let (ended, fake) = run_task(agent, "over-quota", vec![error]);

    ended.assert_outcome(OutcomeClass::Exhausted);
    ended.assert_exit(EXIT_EXHAUSTED);
    let exhaustion = ended
        .result
        .exhaustion
        .clone()
        .unwrap_or_else(|| panic!("no exhaustion\n{}", ended.explain(&fake.traffic())));
    assert!(
        exhaustion.message.to_lowercase().contains(named),
        "exhaustion message: {:?}",
        exhaustion.message
    );
}

/// An answer cut off by the output token limit finishes without a verdict, with the stop
/// reason the agent reports (`stop_reason`); returns the end and the fake.
pub fn a_cut_off_answer_finishes_with_stop_reason<F>(
    agent: impl StartAgent<F>,
    stop_reason: StopReason,
) -> (Ended, F) {
    let (ended, fake) = run_task(
        agent,
        "long-answer",
        vec![Turn::max_tokens(
            "Here is a very long answer that never ends",
        )],
    );

    ended.assert_finished(stop_reason, None, None);
    (ended, fake)
}

/// A cut-off answer finishes as [`a_cut_off_answer_finishes_with_stop_reason`] says, and the
/// agent does not ask the model to go on.
pub fn a_cut_off_answer_is_not_continued<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    stop_reason: StopReason,
) {
    let (_ended, fake) = a_cut_off_answer_finishes_with_stop_reason(agent, stop_reason);

    assert_one_model_call(&fake, "long-answer");
}

/// A finished attempt records the tokens the agent reports; returns the end and the fake
/// for the rest of what it reports.
pub fn the_agent_reports_its_usage<F>(agent: impl StartAgent<F>) -> (Ended, F) {
    let (ended, fake) = run_task(
        agent,
        "report-usage",
        vec![Turn::text("Done.\n<task-done>report-usage</task-done>")],
    );

    ended.assert_outcome(OutcomeClass::Finished);
    ended.assert_usage_reported();
    (ended, fake)
}

/// Asserts that the model was called once for `task`: the agent did not ask it to go on.
pub fn assert_one_model_call(fake: &ModelServer, task: &str) {
    assert_eq!(
        fake.main_requests(task).len(),
        1,
        "the agent does not ask the model to continue: {}",
        fake.traffic()
    );
}

/// kill -9 of the agent while the model hangs is a crash with the signal.
pub fn kill_9_of_the_agent_is_a_crash_with_the_signal<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
) {
    let attempt = Attempt::new("killed");
    let (fake, launch) = start(agent, &attempt, vec![Turn::hang("Let me think about this")]);
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
    ended.assert_crashed();
    assert_eq!(ended.result.signal, Some(9), "{}", ended.explain(""));
}

/// A model that hangs past the runner's idle timeout is a crash saying so.
pub fn a_model_that_hangs_past_the_idle_timeout_is_a_crash<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
) {
    let attempt = Attempt::new("stuck").with_idle_timeout(SHORT_IDLE_TIMEOUT, "2s");
    let (ended, fake) = run(agent, &attempt, vec![Turn::hang("Let me think about this")]);

    assert!(
        fake.wait_until_hanging(std::time::Duration::ZERO),
        "the model request never started\n{}",
        ended.explain("")
    );
    ended.assert_crashed();
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(crash.contains("idle timeout"), "crash summary: {crash:?}");
}

/// A shell command (`shell`, the agent's tool call) the agent asks permission for runs in the
/// workspace when the runner allows it; returns the end and the fake.
pub fn a_command_the_agent_asks_permission_for_runs_when_allowed<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    shell: impl Fn(&str) -> Turn,
) -> (Ended, F) {
    let attempt = Attempt::new("write-proof");
    let (ended, fake) = run(
        agent,
        &attempt,
        vec![
            shell("echo hi > proof.txt"),
            Turn::text("Wrote proof.txt.\n<task-done>write-proof</task-done>"),
        ],
    );

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_sigils(Some("write-proof"), None);
    assert_eq!(
        ended.permission_decisions(),
        [true],
        "the agent asked once and the runner allowed it\n{}",
        ended.explain(&fake.traffic())
    );
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(proof, "hi\n");
    (ended, fake)
}

/// A shell command denied by a `--deny` pattern is refused when the agent asks and does not
/// run; returns the end and the fake.
pub fn a_command_denied_by_a_pattern_does_not_run<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    shell: impl Fn(&str) -> Turn,
) -> (Ended, F) {
    let attempt = Attempt::new("forbidden").with_runner_args(&["--deny", "*forbidden.txt*"]);
    let (ended, fake) = run(
        agent,
        &attempt,
        vec![
            shell("echo no > forbidden.txt"),
            Turn::text("I was not allowed to.\n<task-failed>forbidden</task-failed>"),
        ],
    );

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
    (ended, fake)
}

/// A new file the agent writes (`write`, its tool call for a path and content) lands in the
/// workspace; returns the end and the fake.
pub fn a_new_file_the_agent_writes_lands_in_the_workspace<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    write: impl Fn(&Path, &str) -> Turn,
) -> (Ended, F) {
    let attempt = Attempt::new("write-notes");
    let notes = attempt.workspace().join("notes.md");
    let (ended, fake) = run(
        agent,
        &attempt,
        vec![
            write(&notes, "# Notes\n"),
            Turn::text("Wrote notes.md.\n<task-done>write-notes</task-done>"),
        ],
    );

    ended.assert_exit(EXIT_FINISHED);
    let written = std::fs::read_to_string(&notes)
        .unwrap_or_else(|error| panic!("notes.md: {error}\n{}", ended.explain(&fake.traffic())));
    assert_eq!(written, "# Notes\n");
    (ended, fake)
}

/// A file the agent writes outside the workspace (`write`) is not written; returns the end
/// and the fake for how the agent was stopped.
pub fn a_file_outside_the_workspace_is_not_written<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    write: impl Fn(&Path, &str) -> Turn,
) -> (Ended, F) {
    let attempt = Attempt::new("escape");
    let outside = tempfile::tempdir().expect("create a directory outside the workspace");
    let target = outside.path().join("escaped.txt");
    let (ended, fake) = run(
        agent,
        &attempt,
        vec![
            write(&target, "gotcha\n"),
            Turn::text("Could not write it.\n<task-failed>escape</task-failed>"),
        ],
    );

    assert!(
        !target.exists(),
        "the agent wrote outside the workspace\n{}",
        ended.explain(&fake.traffic())
    );
    (ended, fake)
}

/// `ralph run` completes a feature whose tasks `chain` each depend on the one before, in that
/// order; the first writes `greeting.txt` in the project with `write_greeting` (given the
/// file's path).
pub fn ralph_run_completes_a_feature_in_dependency_order<F: Deref<Target = ModelServer>>(
    agent: impl StartAgent<F>,
    chain: &[&str],
    write_greeting: impl Fn(&Path) -> Turn,
) {
    let tasks: Vec<_> = chain
        .iter()
        .enumerate()
        .map(|(at, name)| task(name, if at == 0 { &[] } else { &chain[at - 1..at] }))
        .collect();
    let project = Project::new(&feature_yaml("greeting", "", &tasks), "");
    let greeting = project.path("greeting.txt");
    let script = chain
        .iter()
        .enumerate()
        .fold(Script::new(), |script, (at, name)| {
            let done = Turn::text(format!(
                "Task {name} is done.\n<task-done>{name}</task-done>"
            ));
            let turns = if at == 0 {
                vec![write_greeting(&greeting), done]
            } else {
                vec![done]
            };
            script.task(*name, turns)
        });
    let home = project.path("home");
    std::fs::create_dir(&home).expect("create the agent's home");
    let (fake, launch) = agent(script, &home);

    let output = ralph_run_to_success(&project.path("feature.yaml"), &launch, &fake);
    let written = std::fs::read_to_string(&greeting).unwrap_or_else(|error| {
        panic!(
            "the agent wrote no greeting.txt ({error})\n{}\n{}",
            describe(&output),
            fake.traffic()
        )
    });
    assert_eq!(written, "Hello, world!\n");
    let tasks = project.store().tasks().expect("read the run's tasks");
    assert!(
        tasks.iter().all(|task| task.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    assert_eq!(project.started_order(), chain);
}

/// One `#[test]` per line, each running a scenario on `agent` and ignoring what it returns:
///
/// ```ignore
/// scenario_tests! {
///     codex;
///     kill_9_of_the_agent_is_a_crash_with_the_signal;
///     the_prompt_file_reaches_the_model_as_the_user_message(fake_openai::user_text);
///     http_429_is_a_crash = an_api_error_is_a_crash_naming(FakeOpenAi::rate_limited(), &["429"]);
/// }
/// ```
///
/// A line names the test; the scenario has the same name unless `= scenario(…)` names it;
/// arguments in parentheses follow the agent.
#[allow(unused_macros)]
macro_rules! scenario_tests {
    ($agent:expr;) => {};
    ($agent:expr; $(#[$meta:meta])* $test:ident = $scenario:ident($($arg:expr),* $(,)?); $($rest:tt)*) => {
        $(#[$meta])*
        #[test]
        fn $test() {
            $crate::support::scenario::$scenario($agent, $($arg),*);
        }
        $crate::support::scenario::scenario_tests!($agent; $($rest)*);
    };
    ($agent:expr; $(#[$meta:meta])* $test:ident($($arg:expr),* $(,)?); $($rest:tt)*) => {
        $crate::support::scenario::scenario_tests!(
            $agent; $(#[$meta])* $test = $test($($arg),*); $($rest)*
        );
    };
    ($agent:expr; $(#[$meta:meta])* $test:ident; $($rest:tt)*) => {
        $crate::support::scenario::scenario_tests!($agent; $(#[$meta])* $test = $test(); $($rest)*);
    };
}
#[allow(unused_imports)]
pub(crate) use scenario_tests;
