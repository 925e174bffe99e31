//! Budgets in `ralph run`: the real binary, the real runner and the scripted ACP agent,
//! scripted to report tokens and cost.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{
    Project, assert_mentions, describe, exit_code, feature_yaml, independent, json_events,
    one_task_feature, stdout, task,
};

/// Every attempt reports `input` + `output` tokens (and `cost` dollars when given), then
/// says its task is done.
fn spending(input: u64, output: u64, cost: Option<f64>) -> String {
    let cost = cost.map_or(String::new(), |c| format!(", cost_usd: {c}"));
    format!(
        "default:\n  - usage: {{input_tokens: {input}, output_tokens: {output}{cost}}}\n  \
         - text: \"<task-done>{{task}}</task-done>\"\n"
    )
}

/// Three independent tasks with `budget` (YAML lines under `budget:`), one at a time.
fn three_tasks(budget: &str, parallelism: u32) -> String {
    feature_yaml(
        "budgeted",
        &format!("  parallelism: {parallelism}\n  budget:\n{budget}"),
        &independent(&["a", "b", "c"]),
    )
}

/// The summary event the run printed last.
fn summary(output: &std::process::Output) -> serde_json::Value {
    json_events(output)
        .into_iter()
        .rev()
        .find(|e| e["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary event:\n{}", describe(output)))
}

/// Three tasks with a budget of 100 tokens, spent by a first run (exit 5) that did `a`.
fn spent_by_a_first_run() -> Project {
    let project = Project::new(
        &three_tasks("    maxTokens: 100\n", 1),
        &spending(100, 20, None),
    );
    project.run_exiting(&[], 5);
    project
}

#[test]
fn a_spent_token_budget_stops_the_run_limit_reached_with_exit_5() {
    let project = Project::new(
        &three_tasks("    maxTokens: 150\n", 1),
        &spending(100, 20, None),
    );
    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 5, "{}", describe(&output));
    assert_eq!(project.started_order(), ["a", "b"]);
    assert!(
        stdout(&output).contains(
            "the token budget is spent: 240 tokens reported of maxTokens 150; no new attempt \
             starts; 2 of 3 tasks done"
        ),
        "{}",
        describe(&output)
    );
    assert_eq!(summary(&output)["usage"]["inputTokens"], 200);
}

#[test]
fn a_spent_cost_budget_stops_the_run_with_the_exact_reported_cost() {
    let project = Project::new(
        &three_tasks("    maxCostUSD: \"0.50\"\n", 1),
        &spending(10, 10, Some(0.3)),
    );
    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 5, "{}", describe(&output));
    assert_eq!(project.started_order(), ["a", "b"]);
    assert!(
        stdout(&output).contains("the cost budget is spent: $0.60 reported of maxCostUSD $0.50"),
        "{}",
        describe(&output)
    );
    assert_eq!(summary(&output)["usage"]["costUSD"], "0.60");
}

#[test]
fn an_attempt_running_when_the_budget_is_spent_finishes_and_is_counted() {
    let script = "tasks:\n  a:\n    - [ {usage: {input_tokens: 100, output_tokens: 0}}, \
                  {text: \"<task-done>{task}</task-done>\"} ]\n  \
                  b:\n    - [ {delay: 2s}, {usage: {input_tokens: 40, output_tokens: 0}}, \
                  {text: \"<task-done>{task}</task-done>\"} ]\n";
    let project = Project::new(&three_tasks("    maxTokens: 100\n", 2), script);
    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 5, "{}", describe(&output));
    assert_eq!(project.started_order(), ["a", "b"], "c never starts");
    assert!(
        stdout(&output).contains("the 1 running attempt finishes and is counted"),
        "{}",
        describe(&output)
    );
    let usage = &summary(&output)["usage"];
    assert_eq!(usage["inputTokens"], 140, "{usage}");
    assert_eq!(project.task("b").phase, ralph::engine::dag::TaskPhase::Done);
}

#[test]
fn a_cost_the_agent_does_not_report_is_unknown_not_zero_and_warned_about() {
    let manifest = one_task_feature("codexish", "  budget:\n    maxCostUSD: \"5\"\n", "a");
    let project = Project::new(&manifest, &spending(100, 20, None));
    let output = project.run(&[]);

    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert!(
        stdout(&output).contains("1 attempt reported no cost"),
        "{}",
        describe(&output)
    );
    let usage = &summary(&output)["usage"];
    assert!(usage.get("costUSD").is_none(), "{usage}");
    assert_eq!(usage["attemptsWithUnknownCost"], 1);
    let status = stdout(&project.ralph(&["status"]));
    assert_mentions(
        &status,
        &[
            "usage: 120 tokens (input 100, output 20, cache read 0, cache write 0); cost unknown (1 attempt)",
            "budget: cost unknown (1 attempt) of $5.00",
        ],
    );
    let show = stdout(&project.ralph(&["task", "show", "a"]));
    assert_mentions(&show, &["cost unknown (1 attempt)"]);
}

#[test]
fn costs_and_tokens_show_per_task_in_status_and_task_list() {
    let manifest = feature_yaml("priced", "", &[task("a", &[]), task("b", &["a"])]);
    let project = Project::run_ok(&manifest, &spending(100, 20, Some(0.25)));

    let status = stdout(&project.ralph(&["status"]));
    assert_mentions(&status, &["usage: 240 tokens", "cost $0.50"]);
    let list = stdout(&project.ralph(&["task", "list"]));
    let a = list
        .lines()
        .find(|l| l.starts_with("a "))
        .unwrap_or_default();
    assert!(a.contains("120") && a.contains("$0.25"), "{list}");
}

#[test]
fn a_second_run_over_a_spent_budget_starts_nothing_and_says_why() {
    let project = spent_by_a_first_run();

    let again = project.run_exiting(&[], 5);
    assert_eq!(project.started_order(), ["a"], "nothing more started");
    assert!(
        stdout(&again).contains("raise spec.budget to go on"),
        "{}",
        describe(&again)
    );
}

#[test]
fn an_unquoted_or_zero_cost_is_refused_naming_the_field() {
    for budget in [
        "    maxCostUSD: 0.5\n",
        "    maxCostUSD: \"0\"\n",
        "    {}\n",
    ] {
        let manifest = three_tasks(budget, 1).replace("budget:\n    {}", "budget: {}");
        let project = Project::new(&manifest, &spending(1, 1, None));
        let output = project.run(&[]);
        assert_eq!(exit_code(&output), 3, "{budget}: {}", describe(&output));
        let text = format!(
            "{}{}",
            stdout(&output),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(text.contains("spec.budget"), "{budget}: {text}");
    }
}

#[test]
fn a_raised_budget_lets_the_next_run_go_on() {
    let project = spent_by_a_first_run();

    project.write_manifest(&three_tasks("    maxTokens: 1000\n", 1));
    let again = project.run(&[]);

    assert_eq!(exit_code(&again), 0, "{}", describe(&again));
    assert_eq!(project.started_order(), ["a", "b", "c"]);
    assert_eq!(summary(&again)["usage"]["inputTokens"], 300);
}

#[test]
fn status_shows_the_budget_as_used_of_limit() {
    let budget = "  budget:\n    maxCostUSD: \"5\"\n    maxTokens: 1000\n";
    let manifest = one_task_feature("spent", budget, "a");
    let project = Project::run_ok(&manifest, &spending(100, 20, Some(0.05)));
    let status = stdout(&project.ralph(&["status"]));
    assert_mentions(
        &status,
        &["budget: cost $0.05 of $5.00, tokens 120 of 1000"],
    );
}

#[test]
fn tokens_the_agent_does_not_report_are_warned_about_under_max_tokens() {
    let manifest = one_task_feature("tokenless", "  budget:\n    maxTokens: 1000\n", "a");
    let project = Project::new(
        &manifest,
        "default:\n  - text: \"<task-done>{task}</task-done>\"\n",
    );
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert_mentions(
        &stdout(&output),
        &[
            "1 attempt answered without reporting tokens",
            "maxTokens (1000) counts only reported tokens",
        ],
    );
}

#[test]
fn a_crash_without_a_token_count_is_not_warned_about_under_max_tokens() {
    let manifest = one_task_feature("crashy", "  budget:\n    maxTokens: 1000\n", "a");
    let script = "tasks:\n  a:\n    - [ {stderr: \"Error: reset\"}, {exit: 1} ]\n    \
                  - [ {usage: {input_tokens: 10, output_tokens: 2}}, \
                  {text: \"<task-done>a</task-done>\"} ]\n";
    let project = Project::new(&manifest, script);
    let output = project.run(&[]);
    assert_eq!(exit_code(&output), 0, "{}", describe(&output));
    assert!(
        !stdout(&output).contains("without reporting tokens"),
        "{}",
        describe(&output)
    );
}
