//! Finds every way a task could wait on itself.
//!
//! Each task has two events: *start* (its gate opens) and *end* (it is resolved). A task's
//! end waits for its start and for the ends of its children; its start waits for the ends
//! of its dependencies and for its parent's start (subtasks inherit the parent's
//! dependencies). The tasks are runnable exactly when this event graph is acyclic; each
//! strongly connected component of it is reported once, as its shortest cycle through the
//! first task (by input position) whose end lies in it.

use std::collections::VecDeque;

use super::error::{CycleLink, CycleStep, DagError};
use super::graph::Adjacency;

const UNSEEN: u32 = u32::MAX;

/// The hierarchy and dependency edges the cycle search walks.
pub(crate) struct EventGraph<'a> {
    pub(crate) names: &'a [String],
    pub(crate) deps: &'a Adjacency,
    pub(crate) parent: &'a [Option<u32>],
    pub(crate) children: &'a Adjacency,
}

fn start(task: u32) -> u32 {
    2 * task
}

fn end(task: u32) -> u32 {
    2 * task + 1
}

fn task_of(event: u32) -> u32 {
    event / 2
}

fn is_end(event: u32) -> bool {
    event % 2 == 1
}

impl EventGraph<'_> {
    /// The `k`-th event that `event` waits for.
    fn successor(&self, event: u32, k: usize) -> Option<u32> {
        let task = task_of(event);
        if is_end(event) {
            if k == 0 {
                return Some(start(task));
            }
            self.children.of(task).get(k - 1).map(|&c| end(c))
        } else {
            let deps = self.deps.of(task);
            match deps.get(k) {
                Some(&d) => Some(end(d)),
                None if k == deps.len() => self.parent[task as usize].map(start),
                None => None,
            }
        }
    }

    /// One [`DagError::DependencyCycle`] per cycle-carrying component, by first task.
    pub(crate) fn cycles(&self) -> Vec<DagError> {
        let components = self.cyclic_components();
        let mut previous = vec![UNSEEN; 2 * self.names.len()];
        components
            .into_iter()
            .map(|(first, members)| self.shortest_cycle(first, &members, &mut previous))
            .collect()
    }

    /// Components with more than one event: (first task with its end inside, the events).
    fn cyclic_components(&self) -> Vec<(u32, Vec<u32>)> {
        let events = 2 * self.names.len();
        let mut index = vec![UNSEEN; events];
        let mut low = vec![0u32; events];
        let mut on_stack = vec![false; events];
        let mut stack: Vec<u32> = Vec::new();
        let mut frames: Vec<(u32, usize)> = Vec::new();
        let mut counter = 0u32;
        let mut found = Vec::new();

        for root in 0..events as u32 {
            if index[root as usize] != UNSEEN {
                continue;
            }
            index[root as usize] = counter;
            low[root as usize] = counter;
            counter += 1;
            stack.push(root);
            on_stack[root as usize] = true;
            frames.push((root, 0));
            while let Some(frame) = frames.last_mut() {
                let v = frame.0;
                if let Some(w) = self.successor(v, frame.1) {
                    frame.1 += 1;
                    let w_us = w as usize;
                    if index[w_us] == UNSEEN {
                        index[w_us] = counter;
                        low[w_us] = counter;
                        counter += 1;
                        stack.push(w);
                        on_stack[w_us] = true;
                        frames.push((w, 0));
                    } else if on_stack[w_us] {
                        low[v as usize] = low[v as usize].min(index[w_us]);
                    }
                    continue;
                }
                frames.pop();
                if let Some(&(u, _)) = frames.last() {
                    low[u as usize] = low[u as usize].min(low[v as usize]);
                }
                if low[v as usize] != index[v as usize] {
                    continue;
                }
                let mut members = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w as usize] = false;
                    members.push(w);
                    if w == v {
                        break;
                    }
                }
                if members.len() > 1 {
                    let first = members
                        .iter()
                        .filter(|&&e| is_end(e))
                        .map(|&e| task_of(e))
                        .min()
                        .unwrap_or_else(|| task_of(v));
                    found.push((first, members));
                }
            }
        }
        found.sort_by_key(|(first, _)| *first);
        found
    }

    /// The shortest cycle from `first`'s end back to it inside one component.
    fn shortest_cycle(&self, first: u32, members: &[u32], previous: &mut [u32]) -> DagError {
        let mut inside = std::collections::HashSet::with_capacity(members.len());
        inside.extend(members.iter().copied());
        let origin = end(first);
        let mut queue = VecDeque::from([origin]);
        let mut visited = vec![origin];
        'search: while let Some(v) = queue.pop_front() {
            let mut k = 0;
            while let Some(w) = self.successor(v, k) {
                k += 1;
                if !inside.contains(&w) {
                    continue;
                }
                if w == origin {
                    previous[origin as usize] = v;
                    break 'search;
                }
                if previous[w as usize] == UNSEEN {
                    previous[w as usize] = v;
                    visited.push(w);
                    queue.push_back(w);
                }
            }
        }
        let mut path = vec![origin];
        let mut at = previous[origin as usize];
        while at != origin && at != UNSEEN {
            path.push(at);
            at = previous[at as usize];
        }
        path.push(origin);
        path.reverse();
        for v in visited {
            previous[v as usize] = UNSEEN;
        }
        DagError::DependencyCycle {
            start: self.names[first as usize].clone(),
            steps: path
                .windows(2)
                .filter_map(|w| self.step(w[0], w[1]))
                .collect(),
        }
    }

    /// The visible hop for one event edge (an end waiting for its own start is not one).
    fn step(&self, from: u32, to: u32) -> Option<CycleStep> {
        let link = match (is_end(from), is_end(to)) {
            (true, false) => return None,
            (true, true) => CycleLink::Subtask,
            (false, true) => CycleLink::DependsOn,
            (false, false) => CycleLink::Parent,
        };
        Some(CycleStep {
            link,
            task: self.names[task_of(to) as usize].clone(),
        })
    }
}
