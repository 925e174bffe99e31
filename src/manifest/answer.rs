//! A planner's answer (docs/planning.md): a YAML task list in the form of a Feature's
//! `spec.tasks`, plus per task the check that proves it (`acceptance`, `verify.command`).
//! It is checked by the rules a hand-written Feature gets (names, limits, cycles, unknown
//! dependencies, parents), all problems at once, plus the plan's own: not empty, at most
//! `maxTasks`, no name of a hand-written task or of the planning attempts.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::api::memory::{MAX_TAG_LEN, MAX_TAGS};
use crate::api::names::{check_dns_label, check_dns_subdomain};
use crate::api::template::{
    MAX_DEPENDENCIES, MAX_DESCRIPTION_LEN, MAX_PRIORITY, MAX_RETRIES_LIMIT, MAX_TITLE_LEN,
    MIN_PRIORITY,
};
use crate::api::{TaskFields, TaskTemplate};
use crate::engine::dag::{Dag, TaskNode, TaskPhase};
use crate::engine::planning::PLANNING_TASK;

/// One task of a planner's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnswerTask {
    /// Unique name, a DNS label.
    pub name: String,
    /// One-line title.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// What to do.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Tasks that must be done first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// The parent task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Lower runs first among ready tasks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    /// Retries of this task (overrides the Feature's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Tags that pick knowledge for its prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// What proves it done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance: Vec<String>,
    /// The command that proves it done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<AnswerVerify>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// A planned task's check command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerVerify {
    /// Run in the workspace; exit 0 proves the task done.
    pub command: String,
}

/// The whole answer, as written and as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The tasks, in the planner's order.
    pub tasks: Vec<AnswerTask>,
}

impl Answer {
    /// The canonical text of the tasks (what the plan's hash covers).
    pub fn canonical(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// The tasks as templates: acceptance criteria and the check command are added to the
    /// description, so the agent doing a task sees how it is judged.
    pub fn templates(&self) -> Vec<TaskTemplate> {
        self.tasks.iter().map(AnswerTask::template).collect()
    }
}

impl AnswerTask {
    /// The task as a template (see [`Answer::templates`]).
    pub fn template(&self) -> TaskTemplate {
        let mut description = self.description.trim_end().to_owned();
        if !self.acceptance.is_empty() {
            description.push_str("\n\nDone when:\n");
            for criterion in &self.acceptance {
                description.push_str(&format!("- {criterion}\n"));
            }
        }
        if let Some(verify) = &self.verify {
            description.push_str(&format!(
                "\n\nCheck it with `{}` (it must exit 0).\n",
                verify.command
            ));
        }
        TaskTemplate {
            name: self.name.clone(),
            fields: TaskFields {
                title: if self.title.is_empty() {
                    self.name.clone()
                } else {
                    self.title.clone()
                },
                description: description.trim_start().to_owned(),
                depends_on: self.depends_on.clone(),
                parent: self.parent.clone(),
                priority: self.priority,
                max_retries: self.max_retries,
                tags: self.tags.clone(),
            },
        }
    }
}

/// One problem of an answer: the task it is about (when one) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerProblem {
    /// The task, when the problem is about one.
    pub task: Option<String>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for AnswerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.task {
            Some(task) => write!(f, "task {task}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Every problem of a refused answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct AnswerProblems(pub Vec<AnswerProblem>);

impl AnswerProblems {
    /// The problems, one sentence each.
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

/// What an answer is checked against.
#[derive(Clone, Copy, Debug)]
pub struct AnswerLimits<'a> {
    /// Most tasks (`spec.planning.maxTasks`).
    pub max_tasks: u32,
    /// The Feature's other tasks: hand-written ones, and planned ones kept (done) when a
    /// plan is revised. Planned tasks may depend on them, never share their names.
    pub existing: &'a [TaskTemplate],
}

fn problem(task: Option<&str>, message: impl Into<String>) -> AnswerProblem {
    AnswerProblem {
        task: task.map(str::to_owned),
        message: message.into(),
    }
}

/// Parses and checks an answer; every problem found is returned.
pub fn check_answer(text: &str, limits: AnswerLimits<'_>) -> Result<Answer, AnswerProblems> {
    let items = parse(text).map_err(|p| AnswerProblems(vec![p]))?;
    let mut problems = Vec::new();
    let count = items.len();
    let mut tasks = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        match serde_yaml_ng::from_value::<AnswerTask>(item.clone()) {
            Ok(task) => tasks.push(task),
            Err(error) => {
                let name = item.get("name").and_then(|n| n.as_str()).map(str::to_owned);
                let label = name.unwrap_or_else(|| format!("#{}", index + 1));
                problems.push(problem(Some(&label), format!("cannot be read: {error}")));
            }
        }
    }
    if tasks.is_empty() && problems.is_empty() {
        problems.push(problem(
            None,
            "the plan holds no task: write at least one under `tasks:`",
        ));
    }
    if count > limits.max_tasks as usize {
        problems.push(problem(
            None,
            format!(
                "the plan holds {count} tasks, more than maxTasks ({}): merge tasks into \
                 larger ones, or raise spec.planning.maxTasks",
                limits.max_tasks
            ),
        ));
    }
    let existing: HashSet<&str> = limits.existing.iter().map(|t| t.name.as_str()).collect();
    for task in &tasks {
        task_rules(task, &existing, &mut problems);
    }
    dag_rules(&tasks, limits.existing, &existing, &mut problems);
    if problems.is_empty() {
        Ok(Answer { tasks })
    } else {
        Err(AnswerProblems(problems))
    }
}

/// The task list of an answer, each task still unread.
fn parse(text: &str) -> Result<Vec<serde_yaml_ng::Value>, AnswerProblem> {
    use serde_yaml_ng::Value;
    let not_a_list = |what: &str| {
        problem(
            None,
            format!(
                "the answer is {what}, not a task list: write YAML with a `tasks:` list \
                 (see the format in the prompt)"
            ),
        )
    };
    if text.trim().is_empty() {
        return Err(problem(
            None,
            "the answer file is empty: write the task list under `tasks:`",
        ));
    }
    let value: Value = serde_yaml_ng::from_str(text).map_err(|error| {
        problem(
            None,
            format!("the answer is not valid YAML ({error}): write a `tasks:` list"),
        )
    })?;
    match value {
        Value::Sequence(items) => Ok(items),
        Value::Mapping(mut map) => {
            let tasks = map.remove("tasks");
            if let Some(key) = map.keys().next() {
                let key = serde_yaml_ng::to_string(key).unwrap_or_default();
                return Err(problem(
                    None,
                    format!(
                        "unknown field {:?} at the top of the answer: only `tasks` is read",
                        key.trim()
                    ),
                ));
            }
            match tasks {
                Some(Value::Sequence(items)) => Ok(items),
                Some(Value::Null) | None => Err(problem(
                    None,
                    "the plan holds no task: write at least one under `tasks:`",
                )),
                Some(_) => Err(not_a_list("a `tasks:` that is not a list")),
            }
        }
        Value::String(_) => Err(not_a_list("prose")),
        _ => Err(not_a_list("a single value")),
    }
}

/// The rules of a planned task's `dependsOn`: its length, names, no name twice.
fn dependency_rules(task: &AnswerTask, out: &mut Vec<AnswerProblem>) {
    let name = Some(task.name.as_str());
    if task.depends_on.len() > MAX_DEPENDENCIES {
        out.push(problem(
            name,
            format!("dependsOn names more than {MAX_DEPENDENCIES} tasks"),
        ));
    }
    for (index, dependency) in task.depends_on.iter().enumerate() {
        if let Err(why) = check_dns_subdomain(dependency) {
            out.push(problem(name, format!("dependsOn {dependency:?} {why}")));
        }
        if task.depends_on[..index].contains(dependency) {
            out.push(problem(
                name,
                format!("dependsOn names {dependency:?} twice"),
            ));
        }
    }
}

fn task_rules(task: &AnswerTask, existing: &HashSet<&str>, out: &mut Vec<AnswerProblem>) {
    let name = Some(task.name.as_str());
    if let Err(why) = check_dns_label(&task.name) {
        out.push(problem(name, format!("name {:?} {why}", task.name)));
    }
    if task.name == PLANNING_TASK {
        out.push(problem(
            name,
            format!("the name {PLANNING_TASK} is the planning attempts': choose another"),
        ));
    }
    if existing.contains(task.name.as_str()) {
        out.push(problem(
            name,
            "a hand-written task has this name: depend on it instead of repeating it, or \
             choose another name",
        ));
    }
    if task.title.len() > MAX_TITLE_LEN {
        out.push(problem(
            name,
            format!("the title is longer than {MAX_TITLE_LEN} bytes"),
        ));
    }
    let description = task.template().fields.description;
    if description.len() > MAX_DESCRIPTION_LEN {
        out.push(problem(
            name,
            format!("the description (with its checks) is longer than {MAX_DESCRIPTION_LEN} bytes"),
        ));
    }
    dependency_rules(task, out);
    if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&task.priority) {
        out.push(problem(
            name,
            format!("priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}"),
        ));
    }
    if task.max_retries.is_some_and(|n| n > MAX_RETRIES_LIMIT) {
        out.push(problem(
            name,
            format!("maxRetries must be at most {MAX_RETRIES_LIMIT}"),
        ));
    }
    if task.tags.len() > MAX_TAGS
        || task
            .tags
            .iter()
            .any(|t| t.is_empty() || t.len() > MAX_TAG_LEN)
    {
        out.push(problem(
            name,
            format!("at most {MAX_TAGS} tags of 1 to {MAX_TAG_LEN} characters"),
        ));
    }
    let has_check = task.acceptance.iter().any(|c| !c.trim().is_empty())
        || task
            .verify
            .as_ref()
            .is_some_and(|v| !v.command.trim().is_empty());
    if !has_check {
        out.push(problem(
            name,
            "names no check: give `acceptance` (what proves it done) or `verify.command`",
        ));
    }
}

/// The DAG rules over the existing tasks and the planned ones together.
/// A planned task named like an existing one is reported once, by [`task_rules`].
fn dag_rules(
    tasks: &[AnswerTask],
    existing: &[TaskTemplate],
    existing_names: &HashSet<&str>,
    out: &mut Vec<AnswerProblem>,
) {
    let nodes = existing
        .iter()
        .map(|t| {
            (
                &t.name,
                &t.fields.depends_on,
                &t.fields.parent,
                t.fields.priority,
            )
        })
        .chain(
            tasks
                .iter()
                .map(|t| (&t.name, &t.depends_on, &t.parent, t.priority)),
        )
        .enumerate()
        .map(|(order, (name, depends_on, parent, priority))| TaskNode {
            name: name.clone(),
            depends_on: depends_on.clone(),
            parent: parent.clone(),
            priority,
            order: order as u64,
            phase: TaskPhase::Pending,
        })
        .collect();
    if let Err(errors) = Dag::new(nodes) {
        for error in errors.0 {
            if let crate::engine::dag::DagError::DuplicateName { name, .. } = &error
                && existing_names.contains(name.as_str())
            {
                continue;
            }
            let task = super::plan::task_of(&error).map(str::to_owned);
            out.push(AnswerProblem {
                task,
                message: error.to_string(),
            });
        }
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
