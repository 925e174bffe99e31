//! The resolved, index-based shape of a validated task set.

use std::collections::HashMap;

/// Compressed adjacency lists: the neighbours of node `i` are `targets[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Adjacency {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Adjacency {
    /// Builds the lists of `nodes` nodes from `(from, to)` edges, keeping edge order per node.
    pub(crate) fn from_edges(nodes: usize, edges: &[(u32, u32)]) -> Self {
        let mut offsets = vec![0u32; nodes + 1];
        for &(from, _) in edges {
            offsets[from as usize + 1] += 1;
        }
        for i in 0..nodes {
            offsets[i + 1] += offsets[i];
        }
        let mut next = offsets.clone();
        let mut targets = vec![0u32; edges.len()];
        for &(from, to) in edges {
            let slot = &mut next[from as usize];
            targets[*slot as usize] = to;
            *slot += 1;
        }
        Adjacency { offsets, targets }
    }

    /// The neighbours of `node`.
    pub(crate) fn of(&self, node: u32) -> &[u32] {
        let node = node as usize;
        &self.targets[self.offsets[node] as usize..self.offsets[node + 1] as usize]
    }
}

/// Names, edges and ordering keys of a valid task set, addressed by input position.
#[derive(Clone, Debug, Default)]
pub(crate) struct Graph {
    pub(crate) names: Vec<String>,
    pub(crate) index: HashMap<String, u32>,
    /// Dependencies of each task, deduplicated, in declaration order.
    pub(crate) deps: Adjacency,
    /// Tasks depending on each task.
    pub(crate) dependents: Adjacency,
    pub(crate) parent: Vec<Option<u32>>,
    pub(crate) children: Adjacency,
    pub(crate) priority: Vec<i32>,
    pub(crate) order: Vec<u64>,
}

impl Graph {
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn is_parent(&self, task: u32) -> bool {
        !self.children.of(task).is_empty()
    }

    pub(crate) fn name(&self, task: u32) -> &str {
        &self.names[task as usize]
    }
}
