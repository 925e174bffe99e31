//! Read-only views of a [`Dag`]: phases, the ready set and the task tree.

use super::TaskPhase;
use super::state::Dag;
use super::transition::AutoTransition;

impl Dag {
    /// Changes the DAG made while loading: phases the given ones implied (a parent whose
    /// subtasks are all Done, a task whose prerequisite failed, ...). Persist them.
    pub fn loaded_transitions(&self) -> &[AutoTransition] {
        &self.loaded
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    /// Whether the feature has no tasks.
    pub fn is_empty(&self) -> bool {
        self.graph.len() == 0
    }

    /// Names of the ready tasks, in the order they should run.
    pub fn ready(&self) -> impl Iterator<Item = &str> + '_ {
        self.ready.iter().map(|&(_, _, t)| self.graph.name(t))
    }

    /// Input positions of the ready tasks, in the order they should run.
    pub fn ready_positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.ready.iter().map(|&(_, _, t)| t as usize)
    }

    /// Whether the task at input position `position` is ready.
    pub fn is_ready_at(&self, position: usize) -> bool {
        self.tasks.get(position).is_some_and(|t| t.in_ready)
    }

    /// Current phase of the task at input position `position`.
    pub fn phase_at(&self, position: usize) -> Option<TaskPhase> {
        self.tasks.get(position).map(|t| t.phase)
    }

    /// Number of ready tasks.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// Whether the named task is ready.
    pub fn is_ready(&self, name: &str) -> bool {
        self.position(name)
            .is_some_and(|t| self.tasks[t as usize].in_ready)
    }

    /// Current phase of the named task.
    pub fn phase(&self, name: &str) -> Option<TaskPhase> {
        self.position(name).map(|t| self.tasks[t as usize].phase)
    }

    /// Every task's name and phase, in input order.
    pub fn tasks(&self) -> impl Iterator<Item = (&str, TaskPhase)> + '_ {
        self.graph
            .names
            .iter()
            .zip(&self.tasks)
            .map(|(name, state)| (name.as_str(), state.phase))
    }

    /// Tasks without a parent, in input order.
    pub fn roots(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.graph.len() as u32)
            .filter(|&t| self.graph.parent[t as usize].is_none())
            .map(|t| self.graph.name(t))
    }

    /// Parent of the named task.
    pub fn parent(&self, name: &str) -> Option<&str> {
        let t = self.position(name)?;
        self.graph.parent[t as usize].map(|p| self.graph.name(p))
    }

    /// Subtasks of the named task in input order (`None` for an unknown name).
    pub fn children(&self, name: &str) -> Option<impl Iterator<Item = &str> + '_> {
        let t = self.position(name)?;
        Some(
            self.graph
                .children
                .of(t)
                .iter()
                .map(|&c| self.graph.name(c)),
        )
    }

    /// Dependencies of the named task, deduplicated, in declaration order.
    pub fn dependencies(&self, name: &str) -> Option<impl Iterator<Item = &str> + '_> {
        let t = self.position(name)?;
        Some(self.graph.deps.of(t).iter().map(|&d| self.graph.name(d)))
    }
}
