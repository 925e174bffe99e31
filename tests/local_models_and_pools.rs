//! `ralph run` with models and agent pools, driving the scripted agent through the real
//! runner: escalation after a failure, `<next-model>` honoured and refused, the model
//! recorded, and an exhausted agent handing the task to the next agent of the pool (its
//! rest kept in the store). The return after the reset time is covered with injected time
//! by the planner and selection tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, describe, exit_code, feature_yaml, one_task_feature, task};
use std::process::Output;

/// The model each attempt asked for, in order (from the runner's results in the store).
fn requested_models(project: &Project) -> Vec<Option<String>> {
    project
        .attempts()
        .iter()
        .map(|a| a.details.reported().and_then(|r| r.ran_by.requested_model))
        .collect()
}

fn model_feature(strategy: &str) -> String {
    feature_yaml(
        "models",
        &format!("  model:\n    strategy: {strategy}\n    models: [small, large]\n"),
        &[task("a", &[])],
    )
}

/// Runs the task `a` of a Feature choosing models by `strategy` among `small` and `large`:
/// its first attempt answers `first`, the next one is done. Returns the project and the models
/// the attempts asked for.
fn run_models(strategy: &str, first: &str) -> (Project, Output, Vec<Option<String>>) {
    let script = format!(
        "models: [small, large]\ntasks:\n  a:\n    - [{{text: \"{first}\"}}]\n    \
         - [{{text: \"Done. <task-done>a</task-done>\"}}]\n"
    );
    let project = Project::new(&model_feature(strategy), &script);
    let output = project.run_to_success(&[]);
    let models = requested_models(&project);
    (project, output, models)
}

fn models(names: [&str; 2]) -> Vec<Option<String>> {
    names.iter().map(|name| Some((*name).to_owned())).collect()
}

#[test]
fn escalation_gives_the_attempt_after_a_failure_the_next_model() {
    let (_, _, requested) = run_models("escalate", "Too hard for me. <task-failed>a</task-failed>");
    assert_eq!(requested, models(["small", "large"]));
}

#[test]
fn the_agents_next_model_is_honoured_when_listed() {
    let first = "I need a bigger model.\\n<next-model>large</next-model>";
    let (_, _, requested) = run_models("fixed", first);
    assert_eq!(requested, models(["small", "large"]));
}

#[test]
fn a_next_model_not_listed_is_refused_with_a_warning() {
    let first = "I need a bigger model.\\n<next-model>huge</next-model>";
    let (_, output, requested) = run_models("fixed", first);
    assert_eq!(requested, models(["small", "small"]));
    let warned = local_run::json_events(&output).iter().any(|e| {
        e["event"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("\"huge\"") && m.contains("spec.models"))
    });
    assert!(warned, "{}", describe(&output));
}

#[test]
fn an_exhausted_agent_hands_the_task_to_the_next_agent_of_the_pool() {
    let manifest = one_task_feature(
        "pool",
        "  fallbackAgents:\n    - name: spare\n      command: [ralph, agent, script, spare.yaml]\n",
        "a",
    );
    let project = Project::new(
        &manifest,
        r#"default: [{system_error: "{\"type\":\"usage_limit_reached\",\"resets_in_seconds\":3600}"}]"#,
    );
    std::fs::write(
        project.path("spare.yaml"),
        "default: [{text: \"Done. <task-done>a</task-done>\"}]\n",
    )
    .expect("write the spare agent's script");
    let output = project
        .command(&[])
        .current_dir(project.dir.path())
        .output()
        .expect("ralph run starts");
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    let outcomes: Vec<Option<String>> = project
        .attempts()
        .iter()
        .map(|a| a.outcome.clone())
        .collect();
    assert_eq!(
        outcomes,
        [Some("exhausted".to_owned()), Some("done".to_owned())]
    );
    let selected: Vec<String> = project
        .events()
        .iter()
        .filter(|e| e.kind == "selected")
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(
        selected,
        [
            "agent primary, model (the agent's default)",
            "agent spare, model (the agent's default)"
        ]
    );
    let rests = project
        .store()
        .meta(ralph::local::selection::AGENT_RESTS)
        .expect("read the store");
    assert!(
        rests.is_some_and(|json| json.contains("untilMs")),
        "the primary agent's rest is kept for later runs"
    );
}

#[test]
fn the_prompt_says_a_model_hint_is_for_this_tasks_next_attempt() {
    let script =
        "models: [small, large]\ndefault:\n  - text: \"Done. <task-done>{task}</task-done>\"\n";
    let project = Project::run_ok(&model_feature("fixed"), script);
    let prompt = project
        .prompt("a-a1")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        prompt.contains(
            "`<next-model>{MODEL}</next-model>`: the model better suited to this task's next \
             attempt, when this one does not finish it"
        ),
        "{prompt}"
    );
}

#[test]
fn a_model_hint_given_with_task_done_is_said_to_be_unused() {
    let script = "models: [small, large]\ndefault:\n  \
                  - text: \"Done. <next-model>large</next-model> <task-done>{task}</task-done>\"\n";
    let project = Project::new(&model_feature("fixed"), script);
    let output = project.run_to_success(&[]);
    let warned = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("\"warning\""))
        .any(|line| line.contains("<next-model>large</next-model> came with the task done"));
    assert!(warned, "{}", describe(&output));
}
