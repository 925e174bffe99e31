//! The pure half of a Feature reconcile: from the Feature, its Tasks, their Leases and Pods
//! (plain values) and the time, what every task must do next.
//!
//! One reconcile covers a whole feature: readiness comes from the feature's DAG, and the
//! parallelism limit is handed out in ready order, both without races because kube-runtime
//! never reconciles the same Feature twice at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::claim::claim_view;
use super::run_view::run_view;
use crate::api::{Feature, TASK_LABEL, Task, conditions};
use crate::engine::budget::BudgetSpent;
use crate::engine::conclusion::Gate;
use crate::engine::dag::{Dag, FeatureOutcome, OutcomeInputs, PhaseCounts, TaskPhase};
use crate::engine::lifecycle::{
    self, Action, AttemptView, ClaimView, FeatureGate, RunView, TaskView, attempt_id,
};
use crate::engine::selection::{Rests, Selection};

/// Condition type set when an agent promised FAILURE: the feature stopped for good.
pub const STOPPED: &str = "Stopped";

/// Everything one Feature reconcile decides on.
#[derive(Clone, Debug)]
pub struct Snapshot<'a> {
    /// The Feature.
    pub feature: &'a Feature,
    /// Its Task objects (templated and standalone).
    pub tasks: &'a [Arc<Task>],
    /// Claim Leases by name (a task's Lease is named like the Task).
    pub leases: &'a BTreeMap<String, Arc<Lease>>,
    /// Agent Pods by name (`<task>-a<N>`).
    pub pods: &'a BTreeMap<String, Arc<Pod>>,
    /// The current time, Unix ms.
    pub now_ms: i64,
    /// At most this many new attempts may be claimed (0 while the feature's configuration
    /// keeps any Pod from existing, 1 to probe whether it was fixed).
    pub start_limit: usize,
    /// Agents resting after exhausting their quota, by identity (the namespace's).
    pub rests: &'a Rests,
}

/// Something the user must fix: a reason for a condition and a message naming the object
/// and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The condition reason (CamelCase), e.g. `InvalidPlan`.
    pub reason: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// What one task must do.
#[derive(Clone, Debug)]
pub struct TaskPlan {
    /// The Task.
    pub task: Arc<Task>,
    /// The id the agent reports sigils for (template name, or the object name).
    pub task_id: String,
    /// The task as the lifecycle saw it (phase after the DAG's derivations).
    pub view: TaskView,
    /// Its claim.
    pub claim: Option<ClaimView>,
    /// Its last attempt's run.
    pub run: RunView,
    /// A phase the DAG derived that the status does not record yet.
    pub derived_phase: Option<TaskPhase>,
    /// The steps, in order.
    pub actions: Vec<Action>,
    /// The agent and model of the attempt it would start now (ready, pending tasks only).
    pub selection: Option<Selection>,
}

/// What the whole feature must do.
#[derive(Clone, Debug)]
pub struct FeaturePlan {
    /// Why the plan cannot run (the DAG is invalid); nothing runs while set.
    pub invalid: Option<Problem>,
    /// Per-task plans, in DAG ready order first, then the rest by name.
    pub tasks: Vec<TaskPlan>,
    /// Task counts by phase (after derivations).
    pub counts: PhaseCounts,
    /// The feature's outcome, when it has one.
    pub outcome: Option<FeatureOutcome>,
    /// Attempts started over all tasks.
    pub iterations: u32,
    /// The budget the feature spent, when it did: no attempt starts.
    pub budget_spent: Option<BudgetSpent>,
    /// Set while ready tasks wait because every agent of the pool rests: until when, and why.
    pub pool_resting: Option<(i64, String)>,
}

impl FeaturePlan {
    /// The earliest time a task asked to be looked at again, Unix ms.
    pub fn requeue_at(&self) -> Option<i64> {
        self.tasks
            .iter()
            .flat_map(|t| &t.actions)
            .filter_map(|a| match a {
                Action::RequeueAt(at) => Some(*at),
                _ => None,
            })
            .min()
    }
}

/// The id an agent reports sigils for: the template name of a templated Task (so the same
/// agent script works locally and on a cluster), the object name of a standalone one.
pub fn task_id(task: &Task) -> String {
    task.labels()
        .get(TASK_LABEL)
        .cloned()
        .unwrap_or_else(|| task.name_any())
}

/// Attempts started by `task`.
pub fn attempt_count(task: &Task) -> u32 {
    task.status.as_ref().map_or(0, |s| s.attempt_count)
}

/// True when an agent promised FAILURE for this feature (sticky).
pub fn is_stopped(feature: &Feature) -> bool {
    feature
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, STOPPED))
        .is_some_and(|c| c.status == conditions::STATUS_TRUE)
}

/// Plans every task of the feature.
pub fn plan(snapshot: &Snapshot<'_>) -> FeaturePlan {
    let feature = snapshot.feature;
    let iterations: u32 = snapshot.tasks.iter().map(|t| attempt_count(t)).sum();
    let ordered = in_plan_order(feature, snapshot.tasks);
    let dag = match Dag::new(
        ordered
            .iter()
            .map(|(order, t)| t.task_node(*order))
            .collect(),
    ) {
        Ok(dag) => dag,
        Err(errors) => {
            return FeaturePlan {
                invalid: Some(Problem {
                    reason: conditions::REASON_INVALID_PLAN,
                    message: errors.to_string(),
                }),
                tasks: Vec::new(),
                counts: PhaseCounts::default(),
                outcome: None,
                iterations,
                budget_spent: None,
                pool_resting: None,
            };
        }
    };
    let spec = &feature.spec;
    let max_iterations = spec.max_iterations.map(u64::from);
    let budget_spent = super::budget::budget_spent(feature, snapshot.tasks, snapshot.pods);
    let limits = Gate {
        suspended: spec.suspend,
        stopped: is_stopped(feature),
        parallelism: usize::try_from(spec.parallelism).unwrap_or(usize::MAX),
        running: dag.counts().running,
        iterations_used: u64::from(iterations),
        max_iterations,
        budget_spent: budget_spent.is_some(),
    };
    let mut handed_out = 0;
    let mut pool_resting = None;
    let pool = super::selection::FeaturePool::of(feature);

    let mut tasks = Vec::with_capacity(ordered.len());
    // Ready tasks first, in run order, so the free slots go to them.
    let ready: Vec<&str> = dag.ready().collect();
    let by_name: BTreeMap<&str, &Arc<Task>> = ordered
        .iter()
        .map(|(_, t)| (t.name_any_ref(), *t))
        .collect();
    let mut visit: Vec<&Arc<Task>> = ready
        .iter()
        .filter_map(|n| by_name.get(n).copied())
        .collect();
    visit.extend(
        ordered
            .iter()
            .map(|(_, t)| *t)
            .filter(|t| !dag.is_ready(t.name_any_ref())),
    );
    for task in visit {
        let name = task.name_any();
        let phase = dag.phase(&name).unwrap_or_default();
        let recorded = task.status.as_ref().map(|s| s.phase).unwrap_or_default();
        let ready = dag.is_ready(&name);
        // Which agent and model would run it; every agent of the pool resting makes it wait.
        let selection = (phase == TaskPhase::Pending && ready)
            .then(|| pool.select(task, snapshot.rests, snapshot.now_ms));
        let pool_wait = match &selection {
            Some(Selection::Wait { until_ms, message }) => {
                pool_resting.get_or_insert((*until_ms, message.clone()));
                Some(*until_ms)
            }
            _ => None,
        };
        let next_attempt_after_ms = task
            .status
            .as_ref()
            .and_then(|s| s.next_attempt_after.as_ref())
            .map(|t| t.0.as_millisecond())
            .max(pool_wait);
        let waiting = next_attempt_after_ms.is_some_and(|at| snapshot.now_ms < at);
        let gate = if phase == TaskPhase::Pending && ready && !waiting {
            // The controller-wide limit on attempts (derived from live claims) caps this pass too.
            let gate = match limits.next(handed_out) {
                FeatureGate::Open if handed_out >= snapshot.start_limit => FeatureGate::AtCapacity,
                gate => gate,
            };
            if gate == FeatureGate::Open {
                handed_out += 1;
            }
            gate
        } else {
            limits.standing()
        };
        let view = TaskView {
            name: name.clone(),
            phase,
            ready,
            generation: task.metadata.generation.unwrap_or(0),
            next_attempt_after_ms,
            attempt: last_attempt(task),
            gate,
        };
        let claim = snapshot.leases.get(&name).and_then(|l| claim_view(l));
        let pod = view
            .attempt
            .as_ref()
            .and_then(|a| snapshot.pods.get(&attempt_id(&name, a.number)));
        let run = run_view(pod.map(|p| p.as_ref()), view.attempt.is_some());
        let run =
            super::pod_start::with_start_problem(pod.map(|p| p.as_ref()), run, snapshot.now_ms);
        let mut actions = lifecycle::decide(&view, claim.as_ref(), &run, snapshot.now_ms);
        let ruling = pod.and_then(|p| super::pod_start::ruling_due(p, snapshot.now_ms));
        actions.extend(ruling.map(Action::RequeueAt));
        tasks.push(TaskPlan {
            task_id: task_id(task),
            task: Arc::clone(task),
            derived_phase: (phase != recorded).then_some(phase),
            view,
            claim,
            run,
            actions,
            selection,
        });
    }
    let outcome = dag.outcome(OutcomeInputs {
        suspended: spec.suspend,
        iterations_used: u64::from(iterations),
        max_iterations,
        budget_reached: budget_spent.is_some(),
    });
    FeaturePlan {
        invalid: None,
        tasks,
        counts: dag.counts(),
        outcome,
        iterations,
        budget_spent,
        pool_resting,
    }
}

/// The tasks with their DAG order: templates in spec order, then standalone Tasks by
/// creation time and name.
fn in_plan_order<'t>(feature: &Feature, tasks: &'t [Arc<Task>]) -> Vec<(u64, &'t Arc<Task>)> {
    let positions: std::collections::HashMap<&str, usize> = feature
        .spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .rev()
        .collect();
    let template_index = |task: &Task| {
        let template = task.labels().get(TASK_LABEL)?;
        let owned = task
            .owner_references()
            .iter()
            .any(|o| o.kind == "Feature" && Some(&o.uid) == feature.metadata.uid.as_ref());
        owned.then(|| positions.get(template.as_str()).copied())?
    };
    let mut keyed: Vec<_> = tasks
        .iter()
        .map(|task| {
            let key = (
                template_index(task).unwrap_or(usize::MAX),
                task.creation_timestamp().map(|t| t.0),
                task.name_any(),
            );
            (key, task)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed
        .into_iter()
        .enumerate()
        .map(|(i, (_, task))| (i as u64, task))
        .collect()
}

fn last_attempt(task: &Task) -> Option<AttemptView> {
    let status = task.status.as_ref()?;
    if status.attempt_count == 0 {
        return None;
    }
    let generation = status
        .attempts
        .iter()
        .rev()
        .find(|a| a.number == status.attempt_count)
        .and_then(|a| a.generation)
        .or(task.metadata.generation)
        .unwrap_or(0);
    Some(AttemptView {
        number: status.attempt_count,
        generation,
    })
}

/// `name_any` without allocating, for lookups.
trait NameRef {
    fn name_any_ref(&self) -> &str;
}

impl NameRef for Task {
    fn name_any_ref(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
