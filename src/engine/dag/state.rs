//! The live DAG: phases, incremental readiness and derived transitions.
//!
//! Every task keeps counters over its neighbours (unfinished and failed dependencies,
//! done/failed/resolved children) and two flags inherited down the hierarchy (its *gate*:
//! are all its and its ancestors' dependencies Done / has one of them failed). A phase change
//! adjusts the counters of the task's dependents and parent and re-derives only the tasks
//! whose inputs changed, so one change costs O(affected tasks · degree · log n).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::error::{DagErrors, PhaseError};
use super::graph::Graph;
use super::shape::Shape;
use super::transition::{AutoTransition, TransitionReason};
use super::{TaskNode, TaskPhase};

/// Ordering key of the ready set: priority, creation order, input position.
type ReadyKey = (i32, u64, u32);

const NO_SLOT: u32 = u32::MAX;

/// A validated feature's tasks with their phases and ready set. Build with [`Dag::new`].
#[derive(Clone, Debug)]
pub struct Dag {
    pub(super) graph: Arc<Graph>,
    pub(super) tasks: Vec<TaskState>,
    pub(super) ready: BTreeSet<ReadyKey>,
    pub(super) phase_counts: [usize; 5],
    queue: VecDeque<u32>,
    queued: Vec<bool>,
    /// Derived changes of the current update: (task, phase before, latest reason).
    journal: Vec<(u32, TaskPhase, TransitionReason)>,
    journal_slot: Vec<u32>,
    pub(super) loaded: Vec<AutoTransition>,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TaskState {
    pub(super) phase: TaskPhase,
    deps_unfinished: u32,
    deps_broken: u32,
    children_done: u32,
    children_failed: u32,
    children_resolved: u32,
    /// Its and its ancestors' dependencies are all Done.
    gate_open: bool,
    /// One of its or its ancestors' dependencies Failed or is Blocked.
    gate_broken: bool,
    ancestor_failed: bool,
    pub(super) in_ready: bool,
}

impl TaskState {
    /// Whether this task stops its subtasks from running (it, or an ancestor, Failed).
    fn holds_children(&self) -> bool {
        self.phase == TaskPhase::Failed || self.ancestor_failed
    }
}

pub(super) fn phase_slot(phase: TaskPhase) -> usize {
    match phase {
        TaskPhase::Pending => 0,
        TaskPhase::Running => 1,
        TaskPhase::Done => 2,
        TaskPhase::Failed => 3,
        TaskPhase::Blocked => 4,
    }
}

pub(super) fn is_broken(phase: TaskPhase) -> bool {
    matches!(phase, TaskPhase::Failed | TaskPhase::Blocked)
}

fn is_resolved(phase: TaskPhase) -> bool {
    matches!(
        phase,
        TaskPhase::Done | TaskPhase::Failed | TaskPhase::Blocked
    )
}

impl Dag {
    /// Validates `nodes` (reporting every problem) and derives the phases the rules imply
    /// from the given ones; the changes this made are in [`Dag::loaded_transitions`].
    pub fn new(nodes: Vec<TaskNode>) -> Result<Dag, DagErrors> {
        let shape = Shape::new(&nodes)?;
        Ok(Dag::from_shape(&shape, nodes.iter().map(|node| node.phase)))
    }

    /// The tasks of an already validated `shape` in `phases` (by input position; missing
    /// ones Pending), with the phases the rules imply derived as [`Dag::new`] does. Linear
    /// in the number of tasks and edges: no validation.
    pub fn from_shape(shape: &Shape, phases: impl IntoIterator<Item = TaskPhase>) -> Dag {
        let graph = Arc::clone(&shape.0);
        let n = graph.len();
        let mut tasks = vec![TaskState::default(); n];
        for (state, phase) in tasks.iter_mut().zip(phases) {
            state.phase = phase;
        }
        let mut phase_counts = [0usize; 5];
        for t in 0..n as u32 {
            let phase = tasks[t as usize].phase;
            phase_counts[phase_slot(phase)] += 1;
            for &dependent in graph.dependents.of(t) {
                let state = &mut tasks[dependent as usize];
                state.deps_unfinished += u32::from(phase != TaskPhase::Done);
                state.deps_broken += u32::from(is_broken(phase));
            }
            if let Some(p) = graph.parent[t as usize] {
                let state = &mut tasks[p as usize];
                state.children_done += u32::from(phase == TaskPhase::Done);
                state.children_failed += u32::from(phase == TaskPhase::Failed);
                state.children_resolved += u32::from(is_resolved(phase));
            }
        }
        let mut dag = Dag {
            graph,
            tasks,
            ready: BTreeSet::new(),
            phase_counts,
            queue: (0..n as u32).collect(),
            queued: vec![true; n],
            journal: Vec::new(),
            journal_slot: vec![NO_SLOT; n],
            loaded: Vec::new(),
        };
        dag.loaded = dag.settle();
        dag
    }

    /// Records that a task (not a parent) is now in `phase`, as a runner or user decided,
    /// and returns the phase changes this implies for other tasks (and for this one, when
    /// it is set Pending while a prerequisite is still failed).
    pub fn set_phase(
        &mut self,
        name: &str,
        phase: TaskPhase,
    ) -> Result<Vec<AutoTransition>, PhaseError> {
        let task = self.position(name).ok_or_else(|| PhaseError::UnknownTask {
            task: name.to_owned(),
        })?;
        if self.graph.is_parent(task) {
            return Err(PhaseError::ParentTask {
                task: name.to_owned(),
                phase,
            });
        }
        if phase == TaskPhase::Blocked {
            return Err(PhaseError::BlockedIsDerived {
                task: name.to_owned(),
            });
        }
        if self.tasks[task as usize].phase == phase {
            return Ok(Vec::new());
        }
        self.apply_phase(task, phase);
        self.enqueue(task);
        Ok(self.settle())
    }

    pub(super) fn position(&self, name: &str) -> Option<u32> {
        self.graph.index.get(name).copied()
    }

    fn enqueue(&mut self, task: u32) {
        if !self.queued[task as usize] {
            self.queued[task as usize] = true;
            self.queue.push_back(task);
        }
    }

    /// Re-derives queued tasks until nothing changes; returns the net derived changes.
    fn settle(&mut self) -> Vec<AutoTransition> {
        while let Some(task) = self.queue.pop_front() {
            self.queued[task as usize] = false;
            self.rederive(task);
        }
        let journal = std::mem::take(&mut self.journal);
        journal
            .into_iter()
            .filter_map(|(t, from, reason)| {
                self.journal_slot[t as usize] = NO_SLOT;
                let to = self.tasks[t as usize].phase;
                (to != from).then(|| AutoTransition {
                    task: self.graph.name(t).to_owned(),
                    from,
                    to,
                    reason,
                })
            })
            .collect()
    }

    /// Recomputes one task's gate flags and derived phase from its counters and parent.
    fn rederive(&mut self, task: u32) {
        let parent = self.graph.parent[task as usize].map(|p| self.tasks[p as usize]);
        let state = &mut self.tasks[task as usize];
        let before = (state.gate_open, state.gate_broken, state.ancestor_failed);
        state.gate_open = state.deps_unfinished == 0 && parent.is_none_or(|p| p.gate_open);
        state.gate_broken = state.deps_broken > 0 || parent.is_some_and(|p| p.gate_broken);
        state.ancestor_failed = parent.is_some_and(|p| p.holds_children());
        let after = (state.gate_open, state.gate_broken, state.ancestor_failed);
        if before != after {
            self.enqueue_children(task);
        }
        let derived = self.derived_phase(task);
        let current = self.tasks[task as usize].phase;
        if derived != current {
            let reason = self.reason(task, derived);
            let slot = self.journal_slot[task as usize];
            if slot == NO_SLOT {
                self.journal_slot[task as usize] = self.journal.len() as u32;
                self.journal.push((task, current, reason));
            } else {
                self.journal[slot as usize].2 = reason;
            }
            self.apply_phase(task, derived);
        }
        self.sync_ready(task);
    }

    fn derived_phase(&self, task: u32) -> TaskPhase {
        let state = &self.tasks[task as usize];
        let children = self.graph.children.of(task).len() as u32;
        if children > 0 {
            return if state.children_failed > 0 {
                TaskPhase::Failed
            } else if state.children_done == children {
                TaskPhase::Done
            } else if state.children_resolved == children {
                TaskPhase::Blocked
            } else {
                TaskPhase::Pending
            };
        }
        match state.phase {
            TaskPhase::Pending | TaskPhase::Blocked
                if state.gate_broken || state.ancestor_failed =>
            {
                TaskPhase::Blocked
            }
            TaskPhase::Pending | TaskPhase::Blocked => TaskPhase::Pending,
            other => other,
        }
    }

    /// Sets a phase and updates the counters of everything that reads it.
    fn apply_phase(&mut self, task: u32, phase: TaskPhase) {
        let state = &mut self.tasks[task as usize];
        let old = state.phase;
        state.phase = phase;
        let held_changed = (old == TaskPhase::Failed) != (phase == TaskPhase::Failed);
        self.phase_counts[phase_slot(old)] -= 1;
        self.phase_counts[phase_slot(phase)] += 1;

        let done_delta = i64::from(phase == TaskPhase::Done) - i64::from(old == TaskPhase::Done);
        let broken_delta = i64::from(is_broken(phase)) - i64::from(is_broken(old));
        if done_delta != 0 || broken_delta != 0 {
            for i in 0..self.graph.dependents.of(task).len() {
                let dependent = self.graph.dependents.of(task)[i];
                let state = &mut self.tasks[dependent as usize];
                state.deps_unfinished = adjust(state.deps_unfinished, -done_delta);
                state.deps_broken = adjust(state.deps_broken, broken_delta);
                self.enqueue(dependent);
            }
        }
        if let Some(p) = self.graph.parent[task as usize] {
            let failed_delta =
                i64::from(phase == TaskPhase::Failed) - i64::from(old == TaskPhase::Failed);
            let resolved_delta = i64::from(is_resolved(phase)) - i64::from(is_resolved(old));
            let state = &mut self.tasks[p as usize];
            state.children_done = adjust(state.children_done, done_delta);
            state.children_failed = adjust(state.children_failed, failed_delta);
            state.children_resolved = adjust(state.children_resolved, resolved_delta);
            self.enqueue(p);
        }
        if held_changed {
            self.enqueue_children(task);
        }
        self.sync_ready(task);
    }

    fn enqueue_children(&mut self, task: u32) {
        for i in 0..self.graph.children.of(task).len() {
            let child = self.graph.children.of(task)[i];
            self.enqueue(child);
        }
    }

    fn sync_ready(&mut self, task: u32) {
        let state = &self.tasks[task as usize];
        let ready = state.phase == TaskPhase::Pending
            && state.gate_open
            && !state.ancestor_failed
            && !self.graph.is_parent(task);
        if ready == state.in_ready {
            return;
        }
        self.tasks[task as usize].in_ready = ready;
        let key = (
            self.graph.priority[task as usize],
            self.graph.order[task as usize],
            task,
        );
        if ready {
            self.ready.insert(key);
        } else {
            self.ready.remove(&key);
        }
    }
}

/// Applies a signed change to a counter that the bookkeeping keeps non-negative.
fn adjust(count: u32, delta: i64) -> u32 {
    u32::try_from(i64::from(count) + delta).unwrap_or(0)
}
