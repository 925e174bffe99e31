//! Confinement with the real agents, offline against the fake model APIs
//! (docs/security.md): the runner puts each agent in the mode where it asks before it acts
//! (a verifier in its read-only mode), and Landlock keeps whatever the agent runs inside its
//! workspace, HOME and temp directory. The agents are installed by `scripts/install-agents`
//! and the kernel must have Landlock (this machine's has ABI 7): these tests fail, not
//! skip, without either.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use std::path::{Path, PathBuf};

use ralph::engine::attempt::LandlockState;
use ralph::engine::sigils::Verdict;
use real_agents::fake_anthropic::{FakeAnthropic, claude, claude_in_mode};
use real_agents::fake_gemini::{FakeGemini, gemini};
use real_agents::fake_model::{Script, Turn};
use real_agents::fake_openai::{FakeOpenAi, codex};
use real_agents::real_agent::{AgentLaunch, Attempt, Ended};
use real_agents::scenario::{self, StartAgent};

/// claude-agent-acp whose settings say `bypassPermissions`: left alone, it runs every tool
/// without asking.
fn claude_bypassing(script: Script, home: &Path) -> (FakeAnthropic, AgentLaunch) {
    claude_in_mode(script, home, "bypassPermissions")
}

/// A file in a directory outside the attempt's workspace, HOME and temp directory.
struct Outside {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("escaped.txt");
        Outside { _dir: dir, file }
    }

    /// A shell command writing the file.
    fn shell_write(&self) -> String {
        format!("echo gotcha > '{}'", self.file.display())
    }

    /// Runs task `escape` on `agent`, the model first calling `write` (for the file).
    fn attempt<F>(&self, agent: impl StartAgent<F>, write: Turn) -> (Ended, F) {
        let tried = Turn::text("Tried.\n<task-failed>escape</task-failed>");
        scenario::run_task(agent, "escape", vec![write, tried])
    }

    #[track_caller]
    fn assert_not_written(&self, ended: &Ended) {
        assert!(
            !self.file.exists(),
            "the agent wrote outside the workspace\n{}",
            ended.explain("")
        );
    }
}

/// Asserts that Landlock confined the agent and that it ran in `mode`.
#[track_caller]
fn assert_confined_in_mode(ended: &Ended, mode: &str) {
    let confinement = ended.result.confinement.clone().unwrap_or_default();
    assert_eq!(
        (
            confinement.landlock,
            ended.result.ran_by.agent_mode.as_deref()
        ),
        (LandlockState::Enforced, Some(mode)),
        "{}",
        ended.explain("")
    );
}

#[test]
fn claude_with_default_settings_cannot_write_outside_the_workspace_with_bash() {
    let outside = Outside::new();
    let (ended, _fake) = outside.attempt(claude, FakeAnthropic::bash(&outside.shell_write()));

    outside.assert_not_written(&ended);
    assert_confined_in_mode(&ended, "default");
}

#[test]
fn claude_set_to_bypass_permissions_is_made_to_ask_and_refused_a_write_outside() {
    let outside = Outside::new();
    let (ended, _fake) = outside.attempt(
        claude_bypassing,
        FakeAnthropic::write_file(&outside.file, "gotcha\n"),
    );

    outside.assert_not_written(&ended);
    assert_eq!(
        ended.permission_decisions(),
        [false],
        "{}",
        ended.explain("")
    );
    assert_confined_in_mode(&ended, "default");
}

#[test]
fn codex_with_approval_never_cannot_write_outside_with_a_shell_command() {
    let outside = Outside::new();
    let (ended, fake) = outside.attempt(codex, FakeOpenAi::shell(&outside.shell_write()));

    outside.assert_not_written(&ended);
    assert!(
        !fake.main_requests("escape").is_empty(),
        "{}",
        fake.traffic()
    );
    assert_confined_in_mode(&ended, "agent-full-access");
}

#[test]
fn claude_as_verifier_cannot_write_the_workspace_and_still_gives_its_verdict() {
    let attempt = Attempt::new("check").with_runner_args(&["--read-only"]);
    let (ended, _fake) = scenario::run(
        claude,
        &attempt,
        vec![
            FakeAnthropic::bash("echo tampered > tampered.txt"),
            FakeAnthropic::write_file(&attempt.workspace().join("fixed.txt"), "fixed\n"),
            Turn::text("The work holds up.\n\n<verify-pass>check</verify-pass>"),
        ],
    );

    for file in ["tampered.txt", "fixed.txt"] {
        assert!(
            !attempt.workspace().join(file).exists(),
            "the verifier wrote {file}\n{}",
            ended.explain("")
        );
    }
    assert_eq!(
        ended.result.sigils.verdict,
        Some(Verdict::Pass("check".into()))
    );
    assert_confined_in_mode(&ended, "plan");
}

#[test]
fn gemini_still_writes_inside_the_workspace() {
    let (ended, _fake) = scenario::a_new_file_the_agent_writes_lands_in_the_workspace(
        gemini,
        FakeGemini::write_file,
    );

    assert_confined_in_mode(&ended, "default");
}

#[test]
fn codex_still_runs_a_shell_command_writing_inside_the_workspace() {
    let attempt = Attempt::new("greet");
    let (ended, fake) = scenario::run(
        codex,
        &attempt,
        vec![
            FakeOpenAi::shell("echo hello > greeting.txt"),
            Turn::text("Wrote it.\n<task-done>greet</task-done>"),
        ],
    );

    let written = std::fs::read_to_string(attempt.workspace().join("greeting.txt"));
    assert_eq!(
        written.ok().as_deref(),
        Some("hello\n"),
        "{}",
        ended.explain(&fake.traffic())
    );
    assert_confined_in_mode(&ended, "agent-full-access");
}

#[test]
fn codex_as_verifier_cannot_write_the_workspace() {
    let attempt = Attempt::new("check").with_runner_args(&["--read-only"]);
    let (ended, _fake) = scenario::run(
        codex,
        &attempt,
        vec![
            FakeOpenAi::shell("echo tampered > tampered.txt"),
            Turn::text("The work holds up.\n\n<verify-pass>check</verify-pass>"),
        ],
    );

    assert!(
        !attempt.workspace().join("tampered.txt").exists(),
        "{}",
        ended.explain("")
    );
    assert_eq!(
        ended.result.sigils.verdict,
        Some(Verdict::Pass("check".into()))
    );
    assert_confined_in_mode(&ended, "agent-full-access");
}
