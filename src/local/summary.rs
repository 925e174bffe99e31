//! The final summary of a local run: per task outcome, attempts, duration, tokens and cost.

use serde::Serialize;

use crate::engine::budget::UsageTotals;
use crate::engine::dag::{FeatureOutcome, TaskPhase};
use crate::local::store::{AttemptRow, TaskRow};
use crate::local::table::{
    Column::{Left, Right},
    Table,
};

/// One task's line of the summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Task ID.
    pub task: String,
    /// Final phase.
    pub phase: TaskPhase,
    /// Attempts started.
    pub attempts: u32,
    /// Outcome of the last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<String>,
    /// Time spent in attempts, ms.
    pub duration_ms: i64,
    /// Tokens and cost over all ended attempts (unknown costs counted apart).
    pub usage: UsageTotals,
}

/// The whole run's summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Feature name.
    pub feature: String,
    /// The feature's outcome, `None` when the run was interrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<FeatureOutcome>,
    /// Tasks in creation order.
    pub tasks: Vec<TaskSummary>,
    /// Attempts over all tasks.
    pub attempts: u32,
    /// Usage over all tasks.
    pub usage: UsageTotals,
    /// The run stopped because an agent cannot run as configured (no outcome then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub halted: bool,
}

impl Summary {
    /// Builds the summary from the stored tasks and attempts.
    pub fn build(
        feature: &str,
        outcome: Option<FeatureOutcome>,
        tasks: &[TaskRow],
        attempts: &[AttemptRow],
    ) -> Summary {
        let planning = planning_line(attempts);
        let tasks: Vec<TaskSummary> = planning
            .into_iter()
            .chain(tasks.iter().map(|task| {
                let mine: Vec<&AttemptRow> =
                    attempts.iter().filter(|a| a.task == task.name()).collect();
                let usage = crate::local::budget::attempt_totals(mine.iter().copied());
                TaskSummary {
                    task: task.name().to_string(),
                    phase: task.phase,
                    attempts: u32::try_from(mine.len()).unwrap_or(u32::MAX),
                    last_outcome: mine.last().and_then(|a| a.outcome.clone()),
                    duration_ms: mine
                        .iter()
                        .filter_map(|a| a.ended_at_ms.map(|end| end - a.started_at_ms))
                        .sum(),
                    usage,
                }
            }))
            .collect();
        let mut usage = UsageTotals::default();
        for task in &tasks {
            usage.add(&task.usage);
        }
        Summary {
            feature: feature.to_string(),
            outcome,
            attempts: tasks.iter().map(|t| t.attempts).sum(),
            tasks,
            usage,
            halted: false,
        }
    }

    /// The summary as a text table.
    pub fn render(&self) -> String {
        let mut table = Table::of_tasks(
            self.tasks.iter().map(|t| t.task.as_str()),
            &[Left(8), Right(8), Left(13), Right(9), Right(10)],
        );
        let outcome = match (self.outcome, self.halted) {
            (Some(outcome), _) => format!("{outcome:?}"),
            (None, true) => "Halted".to_owned(),
            (None, false) => "interrupted".to_owned(),
        };
        table.line(&format!("feature {}: {outcome}", self.feature));
        table.row(&[
            &"TASK",
            &"PHASE",
            &"ATTEMPTS",
            &"LAST",
            &"DURATION",
            &"TOKENS",
            &"COST",
        ]);
        for task in &self.tasks {
            table.row(&[
                &task.task,
                &format!("{:?}", task.phase),
                &task.attempts,
                &task.last_outcome.as_deref().unwrap_or("-"),
                &seconds(task.duration_ms),
                &task.usage.tokens(),
                &task.usage.cost_text(),
            ]);
        }
        table.row(&[
            &"total",
            &"",
            &self.attempts,
            &"",
            &seconds(self.tasks.iter().map(|t| t.duration_ms).sum()),
            &self.usage.tokens(),
            &self.usage.cost_text(),
        ]);
        table.render()
    }
}

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// The line of the planning attempts (docs/planning.md), when there were any: Done once
/// one of them planned.
fn planning_line(attempts: &[AttemptRow]) -> Option<TaskSummary> {
    let task = crate::engine::planning::PLANNING_TASK;
    let mine: Vec<&AttemptRow> = attempts.iter().filter(|a| a.task == task).collect();
    let last = mine.last()?;
    let planned = mine.iter().any(|a| a.outcome.as_deref() == Some("planned"));
    Some(TaskSummary {
        task: task.to_owned(),
        phase: if planned {
            TaskPhase::Done
        } else {
            TaskPhase::Pending
        },
        attempts: u32::try_from(mine.len()).unwrap_or(u32::MAX),
        last_outcome: last.outcome.clone(),
        duration_ms: mine
            .iter()
            .filter_map(|a| a.ended_at_ms.map(|end| end - a.started_at_ms))
            .sum(),
        usage: crate::local::budget::attempt_totals(mine.iter().copied()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::{Tokens, Usage};
    use crate::local::store::EndDetails;
    use crate::local::testing;

    fn task(name: &str, phase: TaskPhase) -> TaskRow {
        let mut row = testing::row(name, phase);
        row.spec.fields.title.clear();
        row.spec.fields.description.clear();
        row
    }

    fn attempt(task: &str, number: u32, ms: (i64, i64), outcome: &str, tokens: u64) -> AttemptRow {
        AttemptRow {
            started_at_ms: ms.0,
            ended_at_ms: Some(ms.1),
            details: EndDetails {
                usage: Usage {
                    tokens: Tokens::new(tokens, 0),
                    cost_usd: Some(0.5),
                },
                result: Some("{}".to_owned()),
                ..EndDetails::default()
            },
            ..testing::attempt(task, number, outcome)
        }
    }

    #[test]
    fn attempts_durations_and_usage_are_summed_per_task() {
        let tasks = [task("a", TaskPhase::Done), task("b", TaskPhase::Pending)];
        let attempts = [
            attempt("a", 1, (0, 1000), "crashed", 10),
            attempt("a", 2, (2000, 2500), "done", 5),
        ];
        let summary = Summary::build("f", Some(FeatureOutcome::Complete), &tasks, &attempts);
        let a = &summary.tasks[0];
        assert_eq!(
            (a.attempts, a.duration_ms, a.usage.tokens.input),
            (2, 1500, 15)
        );
        assert_eq!(a.last_outcome.as_deref(), Some("done"));
        assert_eq!(a.usage.cost_text(), "$1.00");
        assert_eq!(summary.tasks[1].attempts, 0);
        assert_eq!((summary.attempts, summary.usage.tokens.input), (2, 15));
    }

    #[test]
    fn the_text_table_has_one_line_per_task_and_a_total() {
        let tasks = [task("write-greeting", TaskPhase::Done)];
        let attempts = [attempt("write-greeting", 1, (0, 1200), "done", 42)];
        let text =
            Summary::build("hello", Some(FeatureOutcome::Complete), &tasks, &attempts).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "feature hello: Complete");
        assert!(lines[2].starts_with("write-greeting  Done"), "{text}");
        assert!(
            lines[2].contains("1.2s") && lines[2].ends_with("$0.50"),
            "{text}"
        );
        assert!(lines[3].starts_with("total"), "{text}");
    }

    #[test]
    fn a_cost_no_attempt_reported_is_shown_unknown_not_zero() {
        let tasks = [task("a", TaskPhase::Done)];
        let attempts = [AttemptRow {
            details: EndDetails {
                usage: Usage {
                    tokens: Tokens::new(7, 0),
                    ..Usage::default()
                },
                ..EndDetails::default()
            },
            ..attempt("a", 1, (0, 10), "done", 7)
        }];
        let text = Summary::build("f", Some(FeatureOutcome::Complete), &tasks, &attempts).render();
        let total = text.lines().last().unwrap_or_default();
        assert!(total.ends_with("unknown (1 attempt)"), "{text}");
    }
}
