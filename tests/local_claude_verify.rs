//! `ralph run` with the real claude-agent-acp doing the work and then verifying it, offline
//! against the scripted fake Anthropic API: the verification is a fresh session whose edits
//! are refused (read-only), and its `<verify-pass>` makes the task done. The agent is
//! installed by `scripts/install-agents`; this test fails, not skips, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use std::process::{Command, Stdio};

use ralph::engine::dag::TaskPhase;
use ralph::engine::verification::AttemptKind;
use real_agents::fake_anthropic::{FakeAnthropic, claude};
use real_agents::fake_model::{Script, Turn};
use real_agents::local_run::{Project, describe, exit_code, one_task_feature};

#[test]
fn claude_agent_acp_does_the_work_and_a_read_only_claude_session_verifies_it() {
    let manifest = one_task_feature(
        "greeting",
        "  verify:\n    agent: true\n    command: \"grep -q Hello greeting.txt\"\n",
        "write-greeting",
    );
    let project = Project::new(&manifest, "");
    let greeting = project.path("greeting.txt");
    let home = project.path("home");
    std::fs::create_dir(&home).expect("home");
    let (fake, agent) = claude(
        Script::new().task(
            "write-greeting",
            [
                // the work attempt
                FakeAnthropic::write_file(&greeting, "Hello, world!\n"),
                Turn::text("Wrote greeting.txt.\n\n<task-done>write-greeting</task-done>"),
                // the verification attempt: its edit is refused, then it reads and passes
                FakeAnthropic::write_file(&greeting, "Tampered\n"),
                FakeAnthropic::bash("cat greeting.txt"),
                Turn::text(
                    "greeting.txt says Hello, world!\n\n<verify-pass>write-greeting</verify-pass>",
                ),
            ],
        ),
        &home,
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
    command
        .arg("run")
        .arg(project.path("feature.yaml"))
        .arg("--agent")
        .arg(&agent.program)
        .args(["--json", "--idle-timeout", "60s", "--total-timeout", "180s"])
        .stdin(Stdio::null());
    agent.configure(&mut command);
    let output = command.output().expect("ralph run starts");

    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        std::fs::read_to_string(&greeting).expect("the agent wrote the file"),
        "Hello, world!\n",
        "the verifier's edit must be refused"
    );
    let attempts: Vec<_> = project
        .attempts()
        .into_iter()
        .map(|a| (a.kind, a.outcome.unwrap_or_default()))
        .collect();
    assert_eq!(
        attempts,
        [
            (AttemptKind::Work, "done".to_owned()),
            (AttemptKind::Verify, "done".to_owned())
        ]
    );
    let tasks = project.store().tasks().expect("tasks");
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    let refused = fake
        .main_requests("write-greeting")
        .iter()
        .flat_map(|r| r.tool_results())
        .any(|result| result.is_error);
    assert!(
        refused,
        "the verifier's write was refused with an error result"
    );
}
