//! Property: every plan the validator accepts runs to Complete under the scripted agent
//! (the real binary, runner and agent; a few cases, each a whole `ralph run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::local_run;

use local_run::{Project, describe, exit_code};
use proptest::prelude::*;
use ralph::engine::dag::TaskPhase;
use ralph::manifest::answer::{AnswerLimits, check_answer};

/// A random answer of `n` tasks: each may depend on earlier tasks and may name any task
/// as its parent (so some answers are invalid: a parent cycle, a dependency on an ancestor).
fn answers() -> impl Strategy<Value = String> {
    (1usize..8).prop_flat_map(|n| {
        let deps = proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), n);
        let parents = proptest::collection::vec(proptest::option::weighted(0.2, 0..n), n);
        let priorities = proptest::collection::vec(-2i32..3, n);
        (deps, parents, priorities).prop_map(move |(deps, parents, priorities)| {
            let mut yaml = String::from("tasks:\n");
            for i in 0..n {
                let after: Vec<String> = (0..i)
                    .filter(|&j| deps[i][j])
                    .map(|j| format!("t{j}"))
                    .collect();
                yaml.push_str(&format!(
                    "  - name: t{i}\n    dependsOn: [{}]\n    priority: {}\n    acceptance: [x]\n",
                    after.join(", "),
                    priorities[i]
                ));
                if let Some(parent) = parents[i] {
                    yaml.push_str(&format!("    parent: t{parent}\n"));
                }
            }
            yaml
        })
    })
}

const FEATURE: &str = "apiVersion: ralph.dev/v1alpha1
kind: Feature
metadata:
  name: prop
spec:
  context:
    spec:
      inline: Anything.
  planning:
    maxTasks: 10
    maxInvalidAnswers: 0
  agent:
    command: [unused-agent]
  parallelism: 3
";

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn every_accepted_plan_runs_to_complete(answer in answers()) {
        let limits = AnswerLimits { max_tasks: 10, existing: &[] };
        let Ok(accepted) = check_answer(&answer, limits) else {
            return Ok(());
        };
        let script = format!(
            "default:\n  - text: \"<task-done>{{task}}</task-done>\"\ntasks:\n  planning:\n    \
             - tool: {{path: .ralph-planning/tasks.yaml, write: {}}}\n    - text: written\n",
            serde_json::to_string(&answer).unwrap()
        );
        let project = Project::new(FEATURE, &script);
        let output = project.run(&[]);
        prop_assert_eq!(exit_code(&output), 0, "{}\n{}", answer, describe(&output));
        let tasks = project.store().tasks().unwrap();
        prop_assert_eq!(tasks.len(), accepted.tasks.len());
        prop_assert!(tasks.iter().all(|t| t.phase == TaskPhase::Done), "{:?}", tasks);
    }
}
