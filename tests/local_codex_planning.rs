//! `ralph run` planning a Feature with the real codex-acp (Codex over ACP), offline: the
//! scripted fake OpenAI Responses API has the planner write the task list file with Codex's
//! `apply_patch` tool, then has each planned task done. The agent is installed by
//! `scripts/install-agents`; this test fails, not skips, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use ralph::engine::dag::TaskPhase;
use real_agents::fake_model::{Script, Turn};
use real_agents::fake_openai::{FakeOpenAi, codex};
use real_agents::local_run::Project;
use real_agents::scenario::ralph_run_to_success;

const FEATURE: &str = "apiVersion: ralph.dev/v1alpha1
kind: Feature
metadata:
  name: counter
spec:
  context:
    spec:
      inline: Write greeting.txt, then review it.
  planning:
    maxTasks: 5
  agent:
    command: [unused-agent]
";

const PLAN: &str = "tasks:
  - name: write-greeting
    title: Write the greeting
    description: Write greeting.txt saying Hello, world!
    acceptance: [greeting.txt holds the greeting]
  - name: review-greeting
    dependsOn: [write-greeting]
    acceptance: [the greeting is right]
";

#[test]
fn codex_acp_plans_a_feature_with_a_file_and_builds_it() {
    let project = Project::new(FEATURE, "");
    let answer = project.path(".ralph-planning/tasks.yaml");
    let done = |name: &str| {
        Turn::text(format!(
            "Task {name} is done.\n<task-done>{name}</task-done>"
        ))
    };
    let script = Script::new()
        .task(
            "planning",
            [
                FakeOpenAi::add_file_patch(&answer, PLAN),
                Turn::text("The task list is written."),
            ],
        )
        .task(
            "write-greeting",
            [
                FakeOpenAi::shell("echo 'Hello, world!' > greeting.txt"),
                done("write-greeting"),
            ],
        )
        .task("review-greeting", [done("review-greeting")]);
    let home = project.path("home");
    std::fs::create_dir(&home).unwrap();
    let (fake, launch) = codex(script, &home);

    ralph_run_to_success(&project.path("feature.yaml"), &launch, &fake);
    assert_eq!(
        project.started_order(),
        ["planning", "write-greeting", "review-greeting"]
    );
    let tasks = project.store().tasks().unwrap();
    assert!(
        tasks.iter().all(|t| t.phase == TaskPhase::Done),
        "{tasks:?}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path("greeting.txt")).unwrap(),
        "Hello, world!\n"
    );
}
