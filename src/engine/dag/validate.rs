//! Structural validation: resolves names to positions and reports every problem at once.

use std::collections::HashMap;

use super::TaskNode;
use super::cycle::EventGraph;
use super::error::{DagError, DagErrors};
use super::graph::{Adjacency, Graph};

/// Checks a set of tasks without building a [`Dag`](super::Dag): duplicate names, unknown or
/// self dependencies, bad parents, dependencies on an ancestor or descendant, and cycles.
pub fn validate(nodes: &[TaskNode]) -> Result<(), DagErrors> {
    resolve(nodes).map(|_| ())
}

/// Resolves `nodes` into a [`Graph`], or returns every problem found.
pub(crate) fn resolve(nodes: &[TaskNode]) -> Result<Graph, DagErrors> {
    let mut errors = Vec::new();
    let index = index_names(nodes, &mut errors);
    let deps = resolve_dependencies(nodes, &index, &mut errors);
    let mut parent = resolve_parents(nodes, &index, &mut errors);
    break_parent_cycles(nodes, &mut parent, &mut errors);

    let n = nodes.len();
    let child_edges: Vec<(u32, u32)> = (0..n as u32)
        .filter_map(|c| parent[c as usize].map(|p| (p, c)))
        .collect();
    let children = Adjacency::from_edges(n, &child_edges);
    let deps = drop_hierarchy_dependencies(nodes, deps, &children, &parent, &mut errors);

    let dep_edges: Vec<(u32, u32)> = deps
        .iter()
        .enumerate()
        .flat_map(|(t, ds)| ds.iter().map(move |&d| (t as u32, d)))
        .collect();
    let deps = Adjacency::from_edges(n, &dep_edges);
    let names: Vec<String> = nodes.iter().map(|node| node.name.clone()).collect();
    errors.extend(
        EventGraph {
            names: &names,
            deps: &deps,
            parent: &parent,
            children: &children,
        }
        .cycles(),
    );
    if !errors.is_empty() {
        return Err(DagErrors(errors));
    }

    let reversed: Vec<(u32, u32)> = dep_edges.iter().map(|&(t, d)| (d, t)).collect();
    Ok(Graph {
        names,
        index,
        deps,
        dependents: Adjacency::from_edges(n, &reversed),
        parent,
        children,
        priority: nodes.iter().map(|node| node.priority).collect(),
        order: nodes.iter().map(|node| node.order).collect(),
    })
}

/// Maps each name to its first position; reports names used more than once.
fn index_names(nodes: &[TaskNode], errors: &mut Vec<DagError>) -> HashMap<String, u32> {
    let mut index = HashMap::with_capacity(nodes.len());
    let mut repeats: Vec<(u32, usize)> = Vec::new();
    let mut repeat_of: HashMap<u32, usize> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let first = *index.entry(node.name.clone()).or_insert(i as u32);
        if first != i as u32 {
            let slot = *repeat_of.entry(first).or_insert_with(|| {
                repeats.push((first, 1));
                repeats.len() - 1
            });
            repeats[slot].1 += 1;
        }
    }
    errors.extend(
        repeats
            .into_iter()
            .map(|(first, count)| DagError::DuplicateName {
                name: nodes[first as usize].name.clone(),
                count,
            }),
    );
    index
}

/// Resolved, deduplicated dependencies per task; reports unknown names and self edges.
fn resolve_dependencies(
    nodes: &[TaskNode],
    index: &HashMap<String, u32>,
    errors: &mut Vec<DagError>,
) -> Vec<Vec<u32>> {
    let mut seen_for = vec![u32::MAX; nodes.len()];
    nodes
        .iter()
        .enumerate()
        .map(|(t, node)| {
            let mut resolved = Vec::with_capacity(node.depends_on.len());
            let mut self_reported = false;
            for name in &node.depends_on {
                match index.get(name) {
                    None => errors.push(DagError::UnknownDependency {
                        task: node.name.clone(),
                        dependency: name.clone(),
                    }),
                    Some(_) if *name == node.name => {
                        if !self_reported {
                            self_reported = true;
                            errors.push(DagError::SelfDependency {
                                task: node.name.clone(),
                            });
                        }
                    }
                    Some(&d) => {
                        if seen_for[d as usize] != t as u32 {
                            seen_for[d as usize] = t as u32;
                            resolved.push(d);
                        }
                    }
                }
            }
            resolved
        })
        .collect()
}

/// Resolved parent per task; unknown and self parents are reported and dropped.
fn resolve_parents(
    nodes: &[TaskNode],
    index: &HashMap<String, u32>,
    errors: &mut Vec<DagError>,
) -> Vec<Option<u32>> {
    nodes
        .iter()
        .map(|node| {
            let name = node.parent.as_ref()?;
            if *name == node.name {
                errors.push(DagError::SelfParent {
                    task: node.name.clone(),
                });
                return None;
            }
            let found = index.get(name).copied();
            if found.is_none() {
                errors.push(DagError::UnknownParent {
                    task: node.name.clone(),
                    parent: name.clone(),
                });
            }
            found
        })
        .collect()
}

/// Reports each parent cycle once (from its first task) and detaches its tasks.
fn break_parent_cycles(nodes: &[TaskNode], parent: &mut [Option<u32>], errors: &mut Vec<DagError>) {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![NEW; nodes.len()];
    let mut cycles: Vec<Vec<u32>> = Vec::new();
    let mut path = Vec::new();
    for root in 0..nodes.len() {
        let mut at = Some(root as u32);
        while let Some(t) = at {
            match state[t as usize] {
                NEW => {
                    state[t as usize] = ON_PATH;
                    path.push(t);
                    at = parent[t as usize];
                }
                ON_PATH => {
                    let from = path.iter().position(|&p| p == t).unwrap_or(0);
                    cycles.push(path[from..].to_vec());
                    break;
                }
                _ => break,
            }
        }
        for t in path.drain(..) {
            state[t as usize] = DONE;
        }
    }
    for cycle in &mut cycles {
        let first = cycle
            .iter()
            .enumerate()
            .min_by_key(|&(_, &t)| t)
            .map_or(0, |(i, _)| i);
        cycle.rotate_left(first);
    }
    cycles.sort();
    for cycle in cycles {
        let mut names: Vec<String> = cycle
            .iter()
            .map(|&t| nodes[t as usize].name.clone())
            .collect();
        names.push(names[0].clone());
        errors.push(DagError::ParentCycle { path: names });
        for t in cycle {
            parent[t as usize] = None;
        }
    }
}

/// Removes (and reports) dependencies on a task's own ancestor or descendant.
fn drop_hierarchy_dependencies(
    nodes: &[TaskNode],
    mut deps: Vec<Vec<u32>>,
    children: &Adjacency,
    parent: &[Option<u32>],
    errors: &mut Vec<DagError>,
) -> Vec<Vec<u32>> {
    let (enter, leave) = euler_tour(children, parent);
    let contains = |outer: u32, inner: u32| {
        enter[outer as usize] < enter[inner as usize]
            && leave[inner as usize] <= leave[outer as usize]
    };
    for (t, ds) in deps.iter_mut().enumerate() {
        let t = t as u32;
        ds.retain(|&d| {
            let name = || nodes[t as usize].name.clone();
            if contains(d, t) {
                errors.push(DagError::DependsOnAncestor {
                    task: name(),
                    ancestor: nodes[d as usize].name.clone(),
                });
                false
            } else if contains(t, d) {
                errors.push(DagError::DependsOnDescendant {
                    task: name(),
                    descendant: nodes[d as usize].name.clone(),
                });
                false
            } else {
                true
            }
        });
    }
    deps
}

/// Pre-order enter and leave times over the parent forest (iterative: hierarchies may be deep).
fn euler_tour(children: &Adjacency, parent: &[Option<u32>]) -> (Vec<u32>, Vec<u32>) {
    let n = parent.len();
    let mut enter = vec![0u32; n];
    let mut leave = vec![0u32; n];
    let mut clock = 0u32;
    let mut frames: Vec<(u32, usize)> = Vec::new();
    for root in (0..n as u32).filter(|&t| parent[t as usize].is_none()) {
        enter[root as usize] = clock;
        clock += 1;
        frames.push((root, 0));
        while let Some(frame) = frames.last_mut() {
            let (t, k) = *frame;
            match children.of(t).get(k) {
                Some(&c) => {
                    frame.1 += 1;
                    enter[c as usize] = clock;
                    clock += 1;
                    frames.push((c, 0));
                }
                None => {
                    leave[t as usize] = clock;
                    frames.pop();
                }
            }
        }
    }
    (enter, leave)
}
