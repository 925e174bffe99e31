//! `ralph plan show`: a plan's document and its DAG, level by level. One rendering for a
//! local run's plan and for a Feature's plan in a cluster.

use std::collections::HashMap;
use std::fmt::Write;

use crate::api::TaskTemplate;
use crate::engine::dag::TaskPhase;

use super::StoredPlan;

/// The plan as a person reads it before approving: hash, document, then its tasks by
/// level (a task's level is one more than its deepest dependency's; level 1 can start at
/// once), each with its title and what it waits for. Hand-written tasks are level 0.
pub(crate) fn render_plan(plan: &StoredPlan, hand_written: &[TaskTemplate]) -> String {
    render_plan_with_phases(plan, hand_written, &HashMap::new())
}

/// [`render_plan`], each task followed by its phase when `phases` (by task name) has one.
pub(crate) fn render_plan_with_phases(
    plan: &StoredPlan,
    hand_written: &[TaskTemplate],
    phases: &HashMap<String, TaskPhase>,
) -> String {
    let mut out = String::new();
    let tasks = plan.templates();
    let _ = writeln!(out, "plan {} ({} tasks)", plan.hash, tasks.len());
    if let Some(document) = &plan.document {
        let _ = writeln!(out, "\n{}\n", document.trim_end());
    }
    let levels = levels(hand_written, &tasks);
    let deepest = tasks
        .iter()
        .filter_map(|t| levels.get(t.name.as_str()))
        .max();
    for level in 1..=deepest.copied().unwrap_or(0) {
        let _ = writeln!(out, "\nlevel {level}:");
        for task in tasks
            .iter()
            .filter(|t| levels.get(t.name.as_str()) == Some(&level))
        {
            let _ = write!(out, "  {} — {}", task.name, task.fields.title);
            if !task.fields.depends_on.is_empty() {
                let _ = write!(out, "  (after {})", task.fields.depends_on.join(", "));
            }
            if let Some(parent) = &task.fields.parent {
                let _ = write!(out, "  [part of {parent}]");
            }
            if let Some(phase) = phases.get(&task.name) {
                let _ = write!(out, "  [{phase:?}]");
            }
            out.push('\n');
        }
    }
    out
}

/// Each planned task's level (see [`render_plan`]); the plan is valid, so acyclic.
fn levels<'a>(
    hand_written: &'a [TaskTemplate],
    tasks: &'a [TaskTemplate],
) -> HashMap<&'a str, usize> {
    let mut levels: HashMap<&str, usize> =
        hand_written.iter().map(|t| (t.name.as_str(), 0)).collect();
    let mut left: Vec<&TaskTemplate> = tasks.iter().collect();
    while !left.is_empty() {
        let before = left.len();
        left.retain(|task| {
            let deps: Option<Vec<usize>> = task
                .fields
                .depends_on
                .iter()
                .map(|d| levels.get(d.as_str()).copied())
                .collect();
            match deps {
                Some(deps) => {
                    levels.insert(&task.name, deps.into_iter().max().unwrap_or(0) + 1);
                    false
                }
                None => true,
            }
        });
        if left.len() == before {
            break;
        }
    }
    levels
}
