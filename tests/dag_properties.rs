//! Property tests of the task DAG: validation, readiness, incremental updates and outcomes,
//! checked against a direct (non-incremental) reading of the rules stated in
//! `src/engine/dag/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::sample::Index;
use ralph::engine::dag::{
    CycleLink, Dag, DagError, FeatureOutcome, OutcomeInputs, TaskNode, TaskPhase,
};

/// A feature's shape by position: task `i` is named `t{i}`.
/// A test case failure carrying `error`'s message.
fn failure(error: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

#[derive(Clone, Debug)]
struct Feature {
    deps: Vec<Vec<usize>>,
    parent: Vec<Option<usize>>,
    priority: Vec<i32>,
    order: Vec<u64>,
}

fn name(i: usize) -> String {
    format!("t{i}")
}

impl Feature {
    fn len(&self) -> usize {
        self.deps.len()
    }

    fn children(&self, t: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter(move |&c| self.parent[c] == Some(t))
    }

    fn is_leaf(&self, t: usize) -> bool {
        self.children(t).next().is_none()
    }

    fn leaves(&self) -> Vec<usize> {
        (0..self.len()).filter(|&t| self.is_leaf(t)).collect()
    }

    /// `t` and its ancestors, nearest first.
    fn lineage(&self, t: usize) -> Vec<usize> {
        let mut chain = vec![t];
        while let Some(p) = chain.last().and_then(|&c| self.parent[c]) {
            chain.push(p);
        }
        chain
    }

    fn nodes(&self, phases: &[TaskPhase]) -> Vec<TaskNode> {
        (0..self.len())
            .map(|i| TaskNode {
                name: name(i),
                depends_on: self.deps[i].iter().map(|&d| name(d)).collect(),
                parent: self.parent[i].map(name),
                priority: self.priority[i],
                order: self.order[i],
                phase: phases[i],
            })
            .collect()
    }

    /// The DAG of this feature, every task pending.
    fn pending_dag(&self) -> Result<Dag, TestCaseError> {
        Dag::new(self.pending_nodes()).map_err(failure)
    }

    /// The DAG of this feature, its leaves in the first of `phases`.
    fn dag_with(&self, phases: &[TaskPhase]) -> Result<Dag, TestCaseError> {
        Dag::new(self.nodes(&phases[..self.len()])).map_err(failure)
    }

    fn pending_nodes(&self) -> Vec<TaskNode> {
        self.nodes(&vec![TaskPhase::Pending; self.len()])
    }

    /// Whether the start/end event graph (end waits for start and for the children's ends;
    /// start waits for the dependencies' ends and the parent's start) is acyclic (Kahn).
    fn events_acyclic(&self) -> bool {
        let n = self.len();
        let (start, end) = (|t: usize| 2 * t, |t: usize| 2 * t + 1);
        let mut edges = Vec::new();
        for t in 0..n {
            edges.push((end(t), start(t)));
            edges.extend(self.deps[t].iter().map(|&d| (start(t), end(d))));
            if let Some(p) = self.parent[t] {
                edges.push((start(t), start(p)));
                edges.push((end(p), end(t)));
            }
        }
        let mut waiting = vec![0usize; 2 * n];
        for &(from, _) in &edges {
            waiting[from] += 1;
        }
        let mut free: Vec<usize> = (0..2 * n).filter(|&e| waiting[e] == 0).collect();
        let mut seen = 0;
        while let Some(e) = free.pop() {
            seen += 1;
            for &(from, to) in &edges {
                if to == e {
                    waiting[from] -= 1;
                    if waiting[from] == 0 {
                        free.push(from);
                    }
                }
            }
        }
        seen == 2 * n
    }
}

/// The phases and ready list the rules give, computed from scratch by (memoised) recursion.
struct Rules<'a> {
    feature: &'a Feature,
    /// Caller-owned phase of each leaf (Blocked read as Pending).
    base: Vec<TaskPhase>,
    blocked_memo: RefCell<Vec<Option<bool>>>,
}

impl<'a> Rules<'a> {
    fn new(feature: &'a Feature, base: Vec<TaskPhase>) -> Self {
        let blocked_memo = RefCell::new(vec![None; feature.len()]);
        Rules {
            feature,
            base,
            blocked_memo,
        }
    }

    fn failed(&self, t: usize) -> bool {
        if self.feature.is_leaf(t) {
            self.base[t] == TaskPhase::Failed
        } else {
            self.feature.children(t).any(|c| self.failed(c))
        }
    }

    fn done(&self, t: usize) -> bool {
        if self.feature.is_leaf(t) {
            self.base[t] == TaskPhase::Done
        } else {
            self.feature.children(t).all(|c| self.done(c))
        }
    }

    fn blocked(&self, t: usize) -> bool {
        if let Some(known) = self.blocked_memo.borrow()[t] {
            return known;
        }
        let blocked = self.blocked_uncached(t);
        self.blocked_memo.borrow_mut()[t] = Some(blocked);
        blocked
    }

    fn blocked_uncached(&self, t: usize) -> bool {
        if self.feature.is_leaf(t) {
            let lineage = self.feature.lineage(t);
            let prerequisite_broken = lineage.iter().any(|&a| {
                self.feature.deps[a]
                    .iter()
                    .any(|&d| self.failed(d) || self.blocked(d))
            });
            let ancestor_failed = lineage[1..].iter().any(|&a| self.failed(a));
            self.base[t] == TaskPhase::Pending && (prerequisite_broken || ancestor_failed)
        } else {
            !self.failed(t)
                && !self.done(t)
                && self
                    .feature
                    .children(t)
                    .all(|c| self.done(c) || self.failed(c) || self.blocked(c))
        }
    }

    fn phase(&self, t: usize) -> TaskPhase {
        if self.failed(t) {
            TaskPhase::Failed
        } else if self.done(t) {
            TaskPhase::Done
        } else if self.blocked(t) {
            TaskPhase::Blocked
        } else if self.feature.is_leaf(t) {
            self.base[t]
        } else {
            TaskPhase::Pending
        }
    }

    /// Ready: Pending, no children, every dependency (own and ancestors') Done, and no
    /// ancestor Failed or Blocked; by priority, then order, then position.
    fn ready(&self) -> Vec<String> {
        let f = self.feature;
        let mut ready: Vec<usize> = (0..f.len())
            .filter(|&t| {
                let lineage = f.lineage(t);
                f.is_leaf(t)
                    && self.phase(t) == TaskPhase::Pending
                    && lineage
                        .iter()
                        .all(|&a| f.deps[a].iter().all(|&d| self.done(d)))
                    && lineage[1..]
                        .iter()
                        .all(|&a| !matches!(self.phase(a), TaskPhase::Failed | TaskPhase::Blocked))
            })
            .collect();
        ready.sort_by_key(|&t| (f.priority[t], f.order[t], t));
        ready.into_iter().map(name).collect()
    }
}

fn phases_of(dag: &Dag, feature: &Feature) -> Vec<TaskPhase> {
    (0..feature.len())
        .map(|t| dag.phase(&name(t)).unwrap_or(TaskPhase::Pending))
        .collect()
}

/// The incremental state equals the rules applied from scratch, and reloading it changes nothing.
fn check_against_rules(feature: &Feature, dag: &Dag) -> Result<(), TestCaseError> {
    let phases = phases_of(dag, feature);
    let base = phases
        .iter()
        .map(|&p| match p {
            TaskPhase::Blocked => TaskPhase::Pending,
            other => other,
        })
        .collect();
    let rules = Rules::new(feature, base);
    let expected: Vec<TaskPhase> = (0..feature.len()).map(|t| rules.phase(t)).collect();
    prop_assert_eq!(&phases, &expected);
    let ready: Vec<String> = dag.ready().map(str::to_owned).collect();
    prop_assert_eq!(&ready, &rules.ready());

    let reloaded = Dag::new(feature.nodes(&phases)).map_err(failure)?;
    prop_assert_eq!(reloaded.loaded_transitions(), &[][..]);
    prop_assert_eq!(
        reloaded.ready().collect::<Vec<_>>(),
        dag.ready().collect::<Vec<_>>()
    );
    Ok(())
}

/// Pre-order enter and post-order leave times of the parent forest (children by position).
fn euler_times(parent: &[Option<usize>]) -> (Vec<usize>, Vec<usize>) {
    fn visit(
        t: usize,
        parent: &[Option<usize>],
        clock: &mut usize,
        enter: &mut [usize],
        leave: &mut [usize],
    ) {
        enter[t] = *clock;
        *clock += 1;
        for c in (0..parent.len()).filter(|&c| parent[c] == Some(t)) {
            visit(c, parent, clock, enter, leave);
        }
        leave[t] = *clock;
        *clock += 1;
    }
    let n = parent.len();
    let (mut enter, mut leave, mut clock) = (vec![0; n], vec![0; n], 0);
    for root in (0..n).filter(|&t| parent[t].is_none()) {
        visit(root, parent, &mut clock, &mut enter, &mut leave);
    }
    (enter, leave)
}

/// Random parents (always an earlier task) and random candidate dependency pairs.
fn raw_feature(
    max: usize,
    with_parents: bool,
) -> impl Strategy<Value = (Feature, Vec<(usize, usize)>)> {
    (1..=max).prop_flat_map(move |n| {
        (
            prop::collection::vec(prop::option::weighted(0.5, any::<Index>()), n),
            prop::collection::vec((any::<Index>(), any::<Index>()), 0..=2 * n),
            prop::collection::vec(-2i32..3, n),
            prop::collection::vec(0u64..4, n),
        )
            .prop_map(move |(parents, pairs, priority, order)| {
                let parent = (0..n)
                    .map(|i| {
                        if i == 0 || !with_parents {
                            None
                        } else {
                            parents[i].map(|ix| ix.index(i))
                        }
                    })
                    .collect();
                let pairs = pairs
                    .iter()
                    .map(|(a, b)| (a.index(n), b.index(n)))
                    .collect();
                let feature = Feature {
                    deps: vec![Vec::new(); n],
                    parent,
                    priority,
                    order,
                };
                (feature, pairs)
            })
    })
}

/// Features acyclic by construction: a task depends only on tasks whose whole subtree ends
/// before its own subtree starts (in a depth-first layout of the parent forest).
fn acyclic_feature(max: usize) -> impl Strategy<Value = Feature> {
    raw_feature(max, true).prop_map(|(mut feature, pairs)| {
        let (enter, leave) = euler_times(&feature.parent);
        for (t, d) in pairs {
            if leave[d] < enter[t] && !feature.deps[t].contains(&d) {
                feature.deps[t].push(d);
            }
        }
        feature
    })
}

/// Features with arbitrary dependencies between distinct tasks: often cyclic.
fn any_feature(max: usize, with_parents: bool) -> impl Strategy<Value = Feature> {
    raw_feature(max, with_parents).prop_map(|(mut feature, pairs)| {
        for (t, d) in pairs {
            if t != d && !feature.deps[t].contains(&d) {
                feature.deps[t].push(d);
            }
        }
        feature
    })
}

/// The `changes` of leaf tasks (picked among the feature's leaves) a test can set directly:
/// every phase but Blocked, which only derivation sets.
fn leaf_changes(
    feature: &Feature,
    changes: Vec<(Index, TaskPhase)>,
) -> impl Iterator<Item = (String, TaskPhase)> {
    let leaves = feature.leaves();
    changes
        .into_iter()
        .filter(|(_, phase)| *phase != TaskPhase::Blocked)
        .map(move |(pick, phase)| (name(leaves[pick.index(leaves.len())]), phase))
}

fn leaf_phase() -> impl Strategy<Value = TaskPhase> {
    prop::sample::select(vec![
        TaskPhase::Pending,
        TaskPhase::Running,
        TaskPhase::Done,
        TaskPhase::Failed,
        TaskPhase::Blocked,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn validation_accepts_every_feature_acyclic_by_construction(feature in acyclic_feature(30)) {
        let result = Dag::new(feature.pending_nodes());
        prop_assert!(result.is_ok(), "rejected: {}", result.err().map(|e| e.to_string()).unwrap_or_default());
    }

    #[test]
    fn validation_accepts_exactly_the_features_without_a_wait_cycle(feature in any_feature(10, true)) {
        prop_assert_eq!(Dag::new(feature.pending_nodes()).is_ok(), feature.events_acyclic());
    }

    #[test]
    fn every_reported_dependency_cycle_follows_declared_edges(feature in any_feature(10, false)) {
        let Err(errors) = Dag::new(feature.pending_nodes()) else {
            return Ok(());
        };
        for error in &errors.0 {
            let DagError::DependencyCycle { start, steps } = error else {
                return Err(TestCaseError::fail(format!("unexpected error: {error}")));
            };
            let mut at = start.clone();
            for step in steps {
                prop_assert_eq!(step.link, CycleLink::DependsOn);
                let from: usize = at[1..].parse().map_err(|_| TestCaseError::fail("bad name"))?;
                prop_assert!(feature.deps[from].iter().any(|&d| name(d) == step.task));
                at = step.task.clone();
            }
            prop_assert_eq!(&at, start);
        }
    }

    #[test]
    fn a_ready_task_has_no_unfinished_dependency_and_no_children(
        feature in acyclic_feature(30),
        phases in prop::collection::vec(leaf_phase(), 30),
    ) {
        let dag = feature.dag_with(&phases)?;
        for ready in dag.ready() {
            let t: usize = ready[1..].parse().map_err(|_| TestCaseError::fail("bad name"))?;
            prop_assert!(feature.is_leaf(t));
            prop_assert_eq!(dag.phase(ready), Some(TaskPhase::Pending));
            for &d in &feature.deps[t] {
                prop_assert_eq!(dag.phase(&name(d)), Some(TaskPhase::Done));
            }
        }
    }

    #[test]
    fn loading_any_phases_gives_the_state_the_rules_derive(
        feature in acyclic_feature(30),
        phases in prop::collection::vec(leaf_phase(), 30),
    ) {
        let dag = feature.dag_with(&phases)?;
        check_against_rules(&feature, &dag)?;
    }

    #[test]
    fn a_run_of_done_or_failed_ready_tasks_reaches_an_outcome_within_n_steps(
        feature in acyclic_feature(40),
        choices in prop::collection::vec((prop::bool::weighted(0.2), any::<Index>()), 40),
    ) {
        let mut dag = feature.pending_dag()?;
        let leaves = feature.leaves().len();
        let mut steps = 0;
        let mut any_failed = false;
        let outcome = loop {
            if let Some(outcome) = dag.outcome(OutcomeInputs::default()) {
                break outcome;
            }
            prop_assert!(steps < leaves, "no outcome after {} steps", steps);
            let ready: Vec<String> = dag.ready().map(str::to_owned).collect();
            prop_assert!(!ready.is_empty(), "no outcome, yet nothing is ready or running");
            let (fail, pick) = choices[steps];
            let phase = if fail { TaskPhase::Failed } else { TaskPhase::Done };
            any_failed |= fail;
            dag.set_phase(&ready[pick.index(ready.len())], phase)
                .map_err(failure)?;
            check_against_rules(&feature, &dag)?;
            steps += 1;
        };
        let expected = if any_failed { FeatureOutcome::Failed } else { FeatureOutcome::Complete };
        prop_assert_eq!(outcome, expected);
    }

    #[test]
    fn after_any_changes_incremental_state_equals_a_recomputation(
        feature in acyclic_feature(25),
        changes in prop::collection::vec((any::<Index>(), leaf_phase()), 0..60),
    ) {
        let mut dag = feature.pending_dag()?;
        for (task, phase) in leaf_changes(&feature, changes) {
            dag.set_phase(&task, phase).map_err(failure)?;
            check_against_rules(&feature, &dag)?;
        }
    }

    #[test]
    fn returned_transitions_describe_every_derived_change(
        feature in acyclic_feature(25),
        changes in prop::collection::vec((any::<Index>(), leaf_phase()), 0..40),
    ) {
        let mut dag = feature.pending_dag()?;
        for (task, phase) in leaf_changes(&feature, changes) {
            let mut before = phases_of(&dag, &feature);
            let transitions = dag.set_phase(&task, phase).map_err(failure)?;
            let t: usize = task[1..].parse().map_err(|_| TestCaseError::fail("bad name"))?;
            before[t] = phase;
            for transition in &transitions {
                let i: usize = transition.task[1..].parse().map_err(|_| TestCaseError::fail("bad name"))?;
                prop_assert_eq!(before[i], transition.from);
                prop_assert_ne!(transition.from, transition.to);
                before[i] = transition.to;
            }
            prop_assert_eq!(before, phases_of(&dag, &feature));
        }
    }
}
