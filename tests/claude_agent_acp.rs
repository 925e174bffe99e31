//! `ralph runner` driving the real third-party agent claude-agent-acp (Claude Code over ACP),
//! offline: the agent talks to a scripted fake of the Anthropic API on 127.0.0.1.
//!
//! The agent is installed by `scripts/install-agents` (pinned in tests/agents); these tests
//! fail, not skip, when it is missing. See docs/testing-with-real-agents.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_anthropic.rs"]
mod fake_anthropic;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fake_anthropic::{FakeAnthropic, Script, Turn, claude_agent_acp_bin};
use ralph::engine::attempt::{AttemptResult, OutcomeClass, StopReason};
use tempfile::TempDir;

/// Longest a runner may take before the test gives up on it (a safety net, not a measurement).
const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// Longest the cancel test waits for the model request to start hanging.
const HANG_DEADLINE: Duration = Duration::from_secs(60);

const EXIT_FINISHED: i32 = 0;
const EXIT_CRASHED: i32 = 3;
const EXIT_EXHAUSTED: i32 = 4;
const EXIT_CANCELLED: i32 = 5;
const EXIT_MISCONFIGURED: i32 = 6;

/// One attempt's files: workspace, throwaway home, prompt, result and logs.
struct Attempt {
    task: String,
    dir: TempDir,
    runner_args: Vec<String>,
}

impl Attempt {
    fn new(task: &str) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        for sub in ["workspace", "home"] {
            std::fs::create_dir(dir.path().join(sub)).expect("create attempt directories");
        }
        let prompt = format!(
            "You are working on one task of a feature.\n\
             Your task ID is: {task}\n\
             When the task is done, end your answer with <task-done>TASK_ID</task-done>, \
             TASK_ID being your task ID.\n"
        );
        std::fs::write(dir.path().join("prompt.md"), prompt).expect("write the prompt file");
        Self {
            task: task.to_owned(),
            dir,
            runner_args: Vec::new(),
        }
    }

    /// Adds options to the runner's command line.
    fn with_runner_args(mut self, args: &[&str]) -> Self {
        self.runner_args
            .extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    fn prompt(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prompt.md")).expect("read the prompt file")
    }

    /// Starts `ralph runner` on claude-agent-acp, pointed at `fake`.
    fn spawn(&self, fake: &FakeAnthropic) -> Child {
        let agent = claude_agent_acp_bin().unwrap_or_else(|message| panic!("{message}"));
        let path = |name: &str| self.dir.path().join(name);
        let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
        command
            .arg("runner")
            .args(["--task", &self.task])
            .args(["--attempt", &format!("{}-a1", self.task)])
            .arg("--prompt-file")
            .arg(path("prompt.md"))
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--result-file")
            .arg(path("result.json"))
            .args([
                "--idle-timeout",
                "60s",
                "--total-timeout",
                "120s",
                "--grace",
                "5s",
            ])
            .args(&self.runner_args)
            .arg("--")
            .arg(agent)
            .current_dir(self.workspace())
            .stdin(Stdio::null())
            .stdout(log_file(&path("runner.stdout")))
            .stderr(log_file(&path("runner.stderr")));
        fake.configure_agent(&mut command, &path("home"));
        command.spawn().expect("start `ralph runner`")
    }

    /// Runs the runner to its end.
    fn run(&self, fake: &FakeAnthropic) -> Ended {
        let child = self.spawn(fake);
        self.wait(child)
    }

    /// Waits for the runner (killing it past [`RUN_DEADLINE`]) and reads its result file.
    fn wait(&self, mut child: Child) -> Ended {
        let deadline = Instant::now() + RUN_DEADLINE;
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll `ralph runner`") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`ralph runner` still running after {RUN_DEADLINE:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text =
            std::fs::read_to_string(self.dir.path().join("result.json")).unwrap_or_else(|error| {
                panic!("no result file ({error}); runner {status}\n{}", self.logs())
            });
        let result = serde_json::from_str(&text).unwrap_or_else(|error| {
            panic!(
                "result file is not an AttemptResult ({error}):\n{text}\n{}",
                self.logs()
            )
        });
        Ended {
            status,
            result,
            logs: self.logs(),
        }
    }

    fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- runner stdout ---\n{}\n--- runner stderr ---\n{}",
            read("runner.stdout"),
            read("runner.stderr")
        )
    }
}

fn log_file(path: &Path) -> File {
    File::create(path).expect("create a log file")
}

/// How a runner ended.
struct Ended {
    status: ExitStatus,
    result: AttemptResult,
    logs: String,
}

impl Ended {
    fn assert_exit(&self, code: i32) {
        assert_eq!(
            self.status.code(),
            Some(code),
            "runner exit status; result: {:?}\n{}",
            self.result,
            self.logs
        );
    }

    fn assert_outcome(&self, outcome: OutcomeClass) {
        assert_eq!(
            self.result.outcome, outcome,
            "outcome; result: {:?}\n{}",
            self.result, self.logs
        );
    }
}

#[test]
fn task_done_sigil_in_the_models_answer_finishes_the_attempt() {
    let attempt = Attempt::new("write-greeting");
    let fake = FakeAnthropic::start(Script::new().task(
        "write-greeting",
        [Turn::text(
            "The greeting is written. <task-done>write-greeting</task-done>",
        )],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    assert_eq!(ended.result.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(
        ended.result.sigils.task_done.as_deref(),
        Some("write-greeting")
    );
    assert_eq!(ended.result.task, "write-greeting");
}

#[test]
fn the_prompt_file_reaches_the_model_as_the_user_message() {
    let attempt = Attempt::new("write-readme");
    let fake = FakeAnthropic::start(Script::new().task(
        "write-readme",
        [Turn::text("<task-done>write-readme</task-done>")],
    ))
    .expect("start the fake Anthropic API");

    attempt.run(&fake).assert_exit(EXIT_FINISHED);

    let main = fake.main_requests("write-readme");
    assert_eq!(main.len(), 1, "one model call for a one-turn answer");
    assert!(
        main[0].prompt_text().contains(attempt.prompt().trim()),
        "the first user message carries the prompt file; it was:\n{}",
        main[0].prompt_text()
    );
}

#[test]
fn the_agent_reports_its_name_and_usage() {
    let attempt = Attempt::new("report-usage");
    let fake = FakeAnthropic::start(Script::new().task(
        "report-usage",
        [Turn::text("Done. <task-done>report-usage</task-done>")],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_outcome(OutcomeClass::Finished);
    let agent = ended.result.agent.clone().unwrap_or_default();
    assert!(agent.contains("claude-agent-acp"), "agent was {agent:?}");
    assert!(
        ended.result.usage.output_tokens > 0,
        "usage: {:?}",
        ended.result.usage
    );
}

#[test]
fn bash_tool_call_is_permitted_and_runs_in_the_workspace() {
    let attempt = Attempt::new("write-proof");
    let fake = FakeAnthropic::start(Script::new().task(
        "write-proof",
        [
            Turn::bash("echo hi > proof.txt"),
            Turn::text("Wrote proof.txt. <task-done>write-proof</task-done>"),
        ],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_FINISHED);
    assert_eq!(
        ended.result.sigils.task_done.as_deref(),
        Some("write-proof")
    );
    let proof = std::fs::read_to_string(attempt.workspace().join("proof.txt"))
        .unwrap_or_else(|error| panic!("proof.txt in the workspace: {error}\n{}", ended.logs));
    assert_eq!(proof, "hi\n");
    let main = fake.main_requests("write-proof");
    assert_eq!(
        main.len(),
        2,
        "the tool call, then the answer after its result"
    );
    let results = main[1].tool_results();
    assert_eq!(results.len(), 1, "tool results sent back: {results:?}");
    assert!(!results[0].is_error, "the tool failed: {:?}", results[0]);
}

#[test]
fn bash_tool_call_denied_by_a_pattern_does_not_run() {
    let attempt = Attempt::new("forbidden").with_runner_args(&["--deny", "*forbidden.txt*"]);
    let fake = FakeAnthropic::start(Script::new().task(
        "forbidden",
        [
            Turn::bash("echo no > forbidden.txt"),
            Turn::text("I was not allowed to. <task-failed>forbidden</task-failed>"),
        ],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_outcome(OutcomeClass::Finished);
    assert!(
        !attempt.workspace().join("forbidden.txt").exists(),
        "the denied command ran\n{}",
        ended.logs
    );
    let main = fake.main_requests("forbidden");
    assert_eq!(
        main.len(),
        2,
        "the tool call, then the answer after its result"
    );
    let results = main[1].tool_results();
    assert_eq!(results.len(), 1, "tool results sent back: {results:?}");
    assert!(
        results[0].is_error,
        "the denial reached the model as an error: {:?}",
        results[0]
    );
}

#[test]
fn write_tool_creates_the_file_in_the_workspace() {
    let attempt = Attempt::new("write-notes");
    let notes = attempt.workspace().join("notes.md");
    let fake = FakeAnthropic::start(Script::new().task(
        "write-notes",
        [
            Turn::write_file(&notes, "# Notes\n"),
            Turn::text("<task-done>write-notes</task-done>"),
        ],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_FINISHED);
    let written = std::fs::read_to_string(&notes)
        .unwrap_or_else(|error| panic!("notes.md in the workspace: {error}\n{}", ended.logs));
    assert_eq!(written, "# Notes\n");
    let results = fake.main_requests("write-notes")[1].tool_results();
    assert!(
        results.iter().all(|result| !result.is_error),
        "tool results: {results:?}"
    );
}

#[test]
fn sigterm_while_the_model_hangs_cancels_the_attempt() {
    let attempt = Attempt::new("slow-task");
    let fake = FakeAnthropic::start(
        Script::new().task("slow-task", [Turn::hang("Let me think about this")]),
    )
    .expect("start the fake Anthropic API");
    let child = attempt.spawn(&fake);

    let hanging = fake.wait_until_hanging(HANG_DEADLINE);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the runner");
    let ended = attempt.wait(child);

    assert!(hanging, "the model request never started\n{}", ended.logs);
    ended.assert_exit(EXIT_CANCELLED);
    ended.assert_outcome(OutcomeClass::Cancelled);
    assert_eq!(ended.result.sigils.task_done, None);
}

#[test]
fn max_tokens_stop_is_reported_as_max_tokens() {
    let attempt = Attempt::new("long-answer");
    let fake = FakeAnthropic::start(Script::new().task(
        "long-answer",
        [Turn::max_tokens(
            "Here is a very long answer that never ends",
        )],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_FINISHED);
    ended.assert_outcome(OutcomeClass::Finished);
    assert_eq!(ended.result.stop_reason, Some(StopReason::MaxTokens));
}

#[test]
fn overloaded_api_is_a_crash() {
    let attempt = Attempt::new("unlucky");
    let fake = FakeAnthropic::start(Script::new().task("unlucky", [Turn::overloaded()]))
        .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_CRASHED);
    ended.assert_outcome(OutcomeClass::Crashed);
    let crash = ended.result.crash.clone().unwrap_or_default();
    assert!(crash.contains("529"), "crash summary: {crash:?}");
}

#[test]
fn rate_limited_api_is_exhaustion() {
    let attempt = Attempt::new("over-quota");
    let fake = FakeAnthropic::start(Script::new().task(
        "over-quota",
        [Turn::rate_limited(
            "This request would exceed your account's rate limit. Please try again later.",
        )],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_EXHAUSTED);
    ended.assert_outcome(OutcomeClass::Exhausted);
    let exhaustion = ended
        .result
        .exhaustion
        .clone()
        .unwrap_or_else(|| panic!("no exhaustion in {:?}", ended.result));
    assert!(
        exhaustion.message.contains("rate limit"),
        "exhaustion message: {:?}",
        exhaustion.message
    );
}

#[test]
fn a_rejected_api_key_is_misconfiguration_naming_authentication() {
    let attempt = Attempt::new("locked-out");
    let fake = FakeAnthropic::start(Script::new().task(
        "locked-out",
        [Turn::error(
            401,
            "authentication_error",
            "invalid x-api-key",
        )],
    ))
    .expect("start the fake Anthropic API");

    let ended = attempt.run(&fake);

    ended.assert_exit(EXIT_MISCONFIGURED);
    ended.assert_outcome(OutcomeClass::Misconfigured);
    let problem = ended
        .result
        .misconfiguration
        .clone()
        .unwrap_or_else(|| panic!("no misconfiguration in {:?}", ended.result));
    assert!(
        problem.problem.contains("needs authentication"),
        "problem: {problem:?}"
    );
}
