//! A validated task set's structure without phases, so that a caller that sees the same
//! tasks again (a controller reconciling a large feature) validates them once and builds a
//! [`Dag`](super::Dag) of the current phases from it in linear time.

use std::sync::Arc;

use super::TaskNode;
use super::error::DagErrors;
use super::graph::Graph;
use super::validate::resolve;

/// Names, dependency edges, hierarchy and run order of a valid task set, addressed by input
/// position. Cheap to clone (shared). Build a [`Dag`](super::Dag) from it with
/// [`Dag::from_shape`](super::Dag::from_shape).
#[derive(Clone, Debug)]
pub struct Shape(pub(super) Arc<Graph>);

impl Shape {
    /// Validates `nodes` (reporting every problem, as [`Dag::new`](super::Dag::new) does);
    /// their phases are not part of the shape.
    pub fn new(nodes: &[TaskNode]) -> Result<Shape, DagErrors> {
        resolve(nodes).map(|graph| Shape(Arc::new(graph)))
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set has no tasks.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// Input position of the named task.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.0.index.get(name).map(|&p| p as usize)
    }

    /// Whether `other` is this very shape (kept and shared), not merely an equal one.
    pub fn is_same(&self, other: &Shape) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Name of the task at input position `position`.
    pub fn name(&self, position: usize) -> Option<&str> {
        self.0.names.get(position).map(String::as_str)
    }
}
