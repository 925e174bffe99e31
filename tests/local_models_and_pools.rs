//! `ralph run` with models and agent pools, driving the scripted agent through the real
//! runner: escalation after a failure, `<next-model>` honoured and refused, the model
//! recorded, and an exhausted agent handing the task to the next agent of the pool (its
//! rest kept in the store). The return after the reset time is covered with injected time
//! by the planner and selection tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/local_run.rs"]
mod local_run;

use local_run::{Project, describe, exit_code, feature_yaml, task};
use ralph::engine::attempt::AttemptResult;

/// The model each attempt asked for, in order (from the runner's results in the store).
fn requested_models(project: &Project) -> Vec<Option<String>> {
    project
        .attempts()
        .iter()
        .map(|a| {
            a.result
                .as_deref()
                .and_then(|json| serde_json::from_str::<AttemptResult>(json).ok())
                .and_then(|r| r.requested_model)
        })
        .collect()
}

fn model_feature(strategy: &str) -> String {
    feature_yaml(
        "models",
        &format!("  model:\n    strategy: {strategy}\n    models: [small, large]\n"),
        &[task("a", &[])],
    )
}

#[test]
fn escalation_gives_the_attempt_after_a_failure_the_next_model() {
    let project = Project::new(
        &model_feature("escalate"),
        r#"
models: [small, large]
tasks:
  a:
    - [{text: "Too hard for me. <task-failed>a</task-failed>"}]
    - [{text: "Done. <task-done>a</task-done>"}]
"#,
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        requested_models(&project),
        [Some("small".to_owned()), Some("large".to_owned())]
    );
}

#[test]
fn the_agents_next_model_is_honoured_when_listed() {
    let project = Project::new(
        &model_feature("fixed"),
        r#"
models: [small, large]
tasks:
  a:
    - [{text: "I need a bigger model.\n<next-model>large</next-model>"}]
    - [{text: "Done. <task-done>a</task-done>"}]
"#,
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        requested_models(&project),
        [Some("small".to_owned()), Some("large".to_owned())]
    );
}

#[test]
fn a_next_model_not_listed_is_refused_with_a_warning() {
    let project = Project::new(
        &model_feature("fixed"),
        r#"
models: [small, large]
tasks:
  a:
    - [{text: "I need a bigger model.\n<next-model>huge</next-model>"}]
    - [{text: "Done. <task-done>a</task-done>"}]
"#,
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_eq!(
        requested_models(&project),
        [Some("small".to_owned()), Some("small".to_owned())]
    );
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
    let manifest = feature_yaml(
        "pool",
        "  fallbackAgents:\n    - name: spare\n      command: [ralph, agent, script, spare.yaml]\n",
        &[task("a", &[])],
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
