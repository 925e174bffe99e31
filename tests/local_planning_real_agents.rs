//! `ralph run` planning a Feature with real ACP agents, offline: a scripted fake model API
//! has the planner write the task list file with the agent's own tool (claude-agent-acp:
//! Claude Code's Write tool; codex-acp: Codex's `apply_patch`), then has each planned task
//! done. The agents are installed by `scripts/install-agents`; these tests fail, not skip,
//! without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crate::support::real_agents;

use ralph::engine::dag::TaskPhase;
use real_agents::fake_anthropic::{FakeAnthropic, claude};
use real_agents::fake_model::{ModelServer, Script, Turn};
use real_agents::fake_openai::{FakeOpenAi, codex};
use real_agents::local_run::Project;
use real_agents::real_agent::AgentLaunch;
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

/// The agent's own turns: the planner writing [`PLAN`] to the answer file, the worker
/// writing greeting.txt.
struct Tools {
    write_plan: Turn,
    write_greeting: Turn,
}

/// Plans and builds [`FEATURE`] in `project` with the agent `start` launches against the
/// fake model API it starts with a script: the planner writes the plan with the agent's
/// tool, the workers do the tasks.
fn plans_and_builds<M>(
    project: &Project,
    tools: Tools,
    start: impl FnOnce(Script, &Path) -> (M, AgentLaunch),
) where
    M: std::ops::Deref<Target = ModelServer>,
{
    let done = |name: &str| {
        Turn::text(format!(
            "Task {name} is done.\n<task-done>{name}</task-done>"
        ))
    };
    let script = Script::new()
        .task(
            "planning",
            [tools.write_plan, Turn::text("The task list is written.")],
        )
        .task(
            "write-greeting",
            [tools.write_greeting, done("write-greeting")],
        )
        .task("review-greeting", [done("review-greeting")]);
    let home = project.path("home");
    std::fs::create_dir(&home).unwrap();
    let (fake, launch) = start(script, &home);

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

#[test]
fn claude_agent_acp_plans_a_feature_with_a_file_and_builds_it() {
    let project = Project::new(FEATURE, "");
    let tools = Tools {
        write_plan: FakeAnthropic::write_file(&project.path(".ralph-planning/tasks.yaml"), PLAN),
        write_greeting: FakeAnthropic::write_file(&project.path("greeting.txt"), "Hello, world!\n"),
    };
    plans_and_builds(&project, tools, claude);
}

#[test]
fn codex_acp_plans_a_feature_with_a_file_and_builds_it() {
    let project = Project::new(FEATURE, "");
    let tools = Tools {
        write_plan: FakeOpenAi::add_file_patch(&project.path(".ralph-planning/tasks.yaml"), PLAN),
        write_greeting: FakeOpenAi::shell("echo 'Hello, world!' > greeting.txt"),
    };
    plans_and_builds(&project, tools, codex);
}
