//! `ralph run` completing a small feature with the real claude-agent-acp (Claude Code over
//! ACP), offline: the agent talks to the scripted fake Anthropic API on 127.0.0.1. The
//! agent is installed by `scripts/install-agents`; this test fails, not skips, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "support/local_run.rs"]
mod local_run;

use std::process::{Command, Stdio};

use fake_anthropic::{FakeAnthropic, Script, Turn, claude_agent_acp_bin};
use local_run::{Project, describe, exit_code, feature_yaml, task};
use ralph::engine::dag::TaskPhase;

#[test]
fn claude_agent_acp_completes_a_two_task_feature() {
    let agent = claude_agent_acp_bin().unwrap_or_else(|message| panic!("{message}"));
    // The dependent's ID is the longer one: its prompt also names the task it depends on,
    // and the fake answers the longest ID it finds.
    let manifest = feature_yaml(
        "greeting",
        "",
        &[
            task("write-greeting", &[]),
            task("review-the-greeting", &["write-greeting"]),
        ],
    );
    let project = Project::new(&manifest, "");
    let greeting = project.path("greeting.txt");
    let fake = FakeAnthropic::start(
        Script::new()
            .task(
                "write-greeting",
                [
                    Turn::write_file(&greeting, "Hello, world!\n"),
                    Turn::text("Wrote greeting.txt. <task-done>write-greeting</task-done>"),
                ],
            )
            .task(
                "review-the-greeting",
                [Turn::text(
                    "The greeting is fine. <task-done>review-the-greeting</task-done>",
                )],
            ),
    )
    .expect("fake Anthropic API starts");
    let home = project.path("home");
    std::fs::create_dir(&home).expect("home");
    let mut command = Command::new(env!("CARGO_BIN_EXE_ralph"));
    command
        .arg("run")
        .arg(project.path("feature.yaml"))
        .arg("--agent")
        .arg(agent)
        .args(["--json", "--idle-timeout", "60s", "--total-timeout", "180s"])
        .stdin(Stdio::null());
    fake.configure_agent(&mut command, &home);
    let output = command.output().expect("ralph run starts");

    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        std::fs::read_to_string(&greeting).expect("the agent wrote the file"),
        "Hello, world!\n"
    );
    let store = project.store();
    let tasks = store.tasks().expect("tasks");
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    assert_eq!(
        project.started_order(),
        ["write-greeting", "review-the-greeting"]
    );
}
