//! Unit tests of the DAG rules, one behaviour each.

mod loading;
mod outcome;
mod ready;
mod transitions;
mod validation;

use super::{AutoTransition, Dag, TaskNode, TaskPhase, TransitionReason};

/// A Pending task with no dependencies, parent, priority or order.
fn task(name: &str) -> TaskNode {
    TaskNode {
        name: name.to_owned(),
        depends_on: Vec::new(),
        parent: None,
        priority: 0,
        order: 0,
        phase: TaskPhase::Pending,
    }
}

/// Builder steps on a [`TaskNode`].
trait Build {
    fn after(self, deps: &[&str]) -> Self;
    fn under(self, parent: &str) -> Self;
    fn priority(self, priority: i32) -> Self;
    fn order(self, order: u64) -> Self;
    fn phase(self, phase: TaskPhase) -> Self;
}

impl Build for TaskNode {
    fn after(mut self, deps: &[&str]) -> Self {
        self.depends_on = deps.iter().map(|d| (*d).to_owned()).collect();
        self
    }
    fn under(mut self, parent: &str) -> Self {
        self.parent = Some(parent.to_owned());
        self
    }
    fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    fn order(mut self, order: u64) -> Self {
        self.order = order;
        self
    }
    fn phase(mut self, phase: TaskPhase) -> Self {
        self.phase = phase;
        self
    }
}

fn dag(nodes: Vec<TaskNode>) -> Dag {
    match Dag::new(nodes) {
        Ok(dag) => dag,
        Err(errors) => panic!("expected a valid DAG, got:\n{errors}"),
    }
}

/// Subtask `c` of parent `p`, which depends on `x`.
fn subtask_of_a_dependent_parent() -> Dag {
    dag(vec![
        task("x"),
        task("p").after(&["x"]),
        task("c").under("p"),
    ])
}

/// The error messages `Dag::new` reports, in order.
fn messages(nodes: Vec<TaskNode>) -> Vec<String> {
    match Dag::new(nodes) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

fn ready(dag: &Dag) -> Vec<&str> {
    dag.ready().collect()
}

fn set(dag: &mut Dag, name: &str, phase: TaskPhase) -> Vec<AutoTransition> {
    match dag.set_phase(name, phase) {
        Ok(transitions) => transitions,
        Err(error) => panic!("set_phase({name}, {phase:?}) failed: {error}"),
    }
}

/// `task` blocked from `from` because the task it needs, `prerequisite`, failed.
fn blocked_by(task: &str, from: TaskPhase, prerequisite: &str) -> AutoTransition {
    let reason = TransitionReason::PrerequisiteFailed {
        prerequisite: prerequisite.to_owned(),
    };
    moved(task, from, TaskPhase::Blocked, reason)
}

fn moved(task: &str, from: TaskPhase, to: TaskPhase, reason: TransitionReason) -> AutoTransition {
    AutoTransition {
        task: task.to_owned(),
        from,
        to,
        reason,
    }
}
