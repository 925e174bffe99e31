//! Errors of the DAG layer: what is wrong with a set of tasks, and refused phase changes.

use std::fmt;

use super::TaskPhase;

/// One problem in a set of tasks. Each names the task(s) involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DagError {
    /// Two or more tasks share a name.
    #[error("duplicate task name \"{name}\" ({count} tasks)")]
    DuplicateName {
        /// The repeated name.
        name: String,
        /// How many tasks carry it.
        count: usize,
    },
    /// A dependency names no task.
    #[error("task \"{task}\" depends on unknown task \"{dependency}\"")]
    UnknownDependency {
        /// The task declaring the dependency.
        task: String,
        /// The name that matches no task.
        dependency: String,
    },
    /// A task lists itself as a dependency.
    #[error("task \"{task}\" depends on itself")]
    SelfDependency {
        /// The task.
        task: String,
    },
    /// A task waits, through its dependencies and subtasks, on itself.
    #[error("dependency cycle: {}", display_cycle(start, steps))]
    DependencyCycle {
        /// Where the cycle is reported to start (and end).
        start: String,
        /// Each following task in the cycle and how the previous one waits on it.
        steps: Vec<CycleStep>,
    },
    /// A parent names no task.
    #[error("task \"{task}\" has unknown parent \"{parent}\"")]
    UnknownParent {
        /// The subtask.
        task: String,
        /// The name that matches no task.
        parent: String,
    },
    /// A task is its own parent.
    #[error("task \"{task}\" is its own parent")]
    SelfParent {
        /// The task.
        task: String,
    },
    /// Following parents leads back to the start (`a -> b -> a`: a's parent is b, b's is a).
    #[error("parent cycle: {}", path.join(" -> "))]
    ParentCycle {
        /// The tasks of the cycle, the first repeated at the end.
        path: Vec<String>,
    },
    /// A subtask depends on a task that contains it; neither could ever finish.
    #[error(
        "task \"{task}\" depends on \"{ancestor}\", which contains it and cannot finish before it"
    )]
    DependsOnAncestor {
        /// The subtask.
        task: String,
        /// Its parent or a further ancestor.
        ancestor: String,
    },
    /// A parent depends on a task inside it; that subtask would wait for itself.
    #[error(
        "task \"{task}\" depends on its own subtask \"{descendant}\", which waits for the dependencies of \"{task}\""
    )]
    DependsOnDescendant {
        /// The parent.
        task: String,
        /// Its child or a further descendant.
        descendant: String,
    },
}

/// One hop of a [`DagError::DependencyCycle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleStep {
    /// How the previous task waits on `task`.
    pub link: CycleLink,
    /// The task reached.
    pub task: String,
}

/// How one task of a cycle waits on the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleLink {
    /// The previous task depends on this one (`a -> b`).
    DependsOn,
    /// The previous task is a parent waiting for this subtask (`p -> subtask c`).
    Subtask,
    /// The previous task waits for the dependencies of this parent (`c -> parent p`).
    Parent,
}

fn display_cycle(start: &str, steps: &[CycleStep]) -> String {
    let mut out = start.to_owned();
    for step in steps {
        out.push_str(match step.link {
            CycleLink::DependsOn => " -> ",
            CycleLink::Subtask => " -> subtask ",
            CycleLink::Parent => " -> parent ",
        });
        out.push_str(&step.task);
    }
    out
}

/// Every problem found in a set of tasks, in a stable order; displayed one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DagErrors(pub Vec<DagError>);

impl fmt::Display for DagErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_one_per_line(f, &self.0)
    }
}

/// Writes `items` one per line (no newline after the last): how a list of problems reads.
pub fn write_one_per_line(f: &mut fmt::Formatter<'_>, items: &[impl fmt::Display]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            writeln!(f)?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

impl std::error::Error for DagErrors {}

/// A phase change [`Dag::set_phase`](super::Dag::set_phase) refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhaseError {
    /// No task has that name.
    #[error("unknown task \"{task}\"")]
    UnknownTask {
        /// The name given.
        task: String,
    },
    /// Parent phases follow their subtasks and are never set directly.
    #[error("task \"{task}\" has subtasks; its phase follows them and cannot be set to {phase:?}")]
    ParentTask {
        /// The parent task.
        task: String,
        /// The phase asked for.
        phase: TaskPhase,
    },
    /// Blocked is decided by the DAG from failed prerequisites.
    #[error(
        "task \"{task}\" cannot be set to Blocked; the DAG blocks tasks whose prerequisites failed"
    )]
    BlockedIsDerived {
        /// The task.
        task: String,
    },
}
