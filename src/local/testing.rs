//! Fixtures for tests of the local mode (unit and integration tests).

use std::time::Duration;

use crate::api::TaskFields;
use crate::engine::attempt::Usage;
use crate::engine::dag::TaskPhase;
use crate::local::feature::{LocalFeature, LocalTask};
use crate::local::store::{AttemptRow, EndDetails, TaskRow};

/// Task `name` depending on `depends_on`, with a title and description derived from it.
pub fn task(name: &str, depends_on: &[&str]) -> LocalTask {
    LocalTask {
        name: name.to_owned(),
        fields: TaskFields {
            title: format!("Title of {name}"),
            description: format!("Do {name}"),
            depends_on: depends_on.iter().map(|d| (*d).to_owned()).collect(),
            ..TaskFields::default()
        },
    }
}

/// Feature `demo` with these tasks: one attempt at a time, 2 retries, 10 s base backoff
/// capped at 10 min, agent command `agent`.
pub fn feature(tasks: Vec<LocalTask>) -> LocalFeature {
    LocalFeature {
        name: "demo".to_owned(),
        agent_command: vec!["agent".to_owned()],
        agent_env: Vec::new(),
        fallback_agents: Vec::new(),
        model: None,
        parallelism: 1,
        max_iterations: None,
        budget: crate::engine::budget::Budget::default(),
        max_retries: 2,
        backoff_base: Duration::from_secs(10),
        backoff_max: Duration::from_secs(600),
        verify: crate::api::VerifySpec::default(),
        suspend: false,
        spec_text: None,
        plan_text: None,
        memory: crate::api::MemorySpec::default(),
        tasks,
    }
}

/// The stored row of task `name` at generation 1, in `phase`, nothing used yet.
pub fn row(name: &str, phase: TaskPhase) -> TaskRow {
    TaskRow {
        spec: task(name, &[]),
        order: 0,
        generation: 1,
        phase,
        retry_count: 0,
        attempt_count: 0,
        next_attempt_after_ms: None,
        previous_attempt: None,
        usage: Usage::default(),
        removed: false,
    }
}

/// Attempt `number` of `task`, ended with `outcome` (its stored name), from 0 to 1 ms.
pub fn attempt(task: &str, number: u32, outcome: &str) -> AttemptRow {
    AttemptRow {
        kind: Default::default(),
        id: format!("{task}-a{number}"),
        task: task.to_owned(),
        number,
        generation: 1,
        started_at_ms: 0,
        ended_at_ms: Some(1),
        outcome: Some(outcome.to_owned()),
        details: EndDetails::default(),
    }
}

/// Run options for planner tests: `parallel` attempts at once, no limit, 30 s claims,
/// runner `ralph` with agent `agent` in `.`, no worktrees.
pub fn run_options(parallel: usize) -> crate::local::scheduler::RunOptions {
    crate::local::scheduler::RunOptions {
        parallel,
        limit: None,
        claim_duration: Duration::from_secs(30),
        runner: runner_command(),
        worktrees: None,
    }
}

/// Runner `ralph` with agent `agent` in `.`, no extra options.
pub fn runner_command() -> crate::local::executor::RunnerCommand {
    crate::local::executor::RunnerCommand {
        program: "ralph".into(),
        agent: vec!["agent".into()],
        workspace: ".".into(),
        runner_args: Vec::new(),
        env: Vec::new(),
    }
}
