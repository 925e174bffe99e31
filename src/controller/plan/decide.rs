//! The pure half of a Feature reconcile: from the Feature, its Tasks, their Leases and Pods
//! (plain values) and the time, what every task must do next.
//!
//! One reconcile covers a whole feature: readiness comes from the feature's DAG, and the
//! parallelism limit is handed out in ready order, both without races because kube-runtime
//! never reconciles the same Feature twice at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;

use super::problem::Problem;
use super::run_view::{claim_view, run_view};
use crate::api::{Feature, conditions};
use crate::controller::plan::cached::{CachedPod, CachedTask};
use crate::engine::budget::BudgetSpent;
use crate::engine::conclusion::Gate;
use crate::engine::dag::{
    Dag, DagErrors, FeatureOutcome, OutcomeInputs, PhaseCounts, Shape, TaskPhase,
};
use crate::engine::feature_plan::{self, Slots};
use crate::engine::lifecycle::{
    Action, AttemptView, ClaimView, FeatureGate, RunView, TaskView, attempt_id,
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
    pub tasks: &'a [Arc<CachedTask>],
    /// Claim Leases by name (a task's Lease is named like the Task).
    pub leases: &'a BTreeMap<String, Arc<Lease>>,
    /// Agent Pods by name (`<task>-a<N>`).
    pub pods: &'a BTreeMap<String, Arc<CachedPod>>,
    /// The current time, Unix ms.
    pub now_ms: i64,
    /// At most this many new attempts may be claimed (0 while the feature's configuration
    /// keeps any Pod from existing, 1 to probe whether it was fixed).
    pub start_limit: usize,
    /// Agents resting after exhausting their quota, by identity (the namespace's).
    pub rests: &'a Rests,
    /// While set, only this Task (the Feature's planning Task) may start: the Feature's
    /// plan is not approved, or its Tasks do not all exist yet (`super::planning::Stage`).
    pub planning_only: Option<&'a str>,
    /// While set, the Feature's outcome waits for its plan: it ends only when this Task (the
    /// planning Task) fails for good (`super::planning::Stage::holds_outcome`).
    pub plan_waits: Option<&'a str>,
}

/// What one task must do.
#[derive(Clone, Debug)]
pub struct TaskPlan {
    /// The Task.
    pub task: Arc<CachedTask>,
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
    /// The agent and model of the attempt it starts now (ready, pending tasks handed a
    /// slot), or the wait while every agent of the pool rests (every ready, pending task).
    pub selection: Option<Selection>,
}

/// What the whole feature must do.
#[derive(Clone, Debug)]
pub struct FeaturePlan {
    /// Why the plan cannot run (the DAG is invalid); nothing runs while set.
    pub invalid: Option<Problem>,
    /// The plans of the tasks that must act (an action, or a derived phase to record) and
    /// of the first `parallelism` ready Pending tasks, in DAG ready order first, then the
    /// rest in plan order. The other tasks need nothing; [`FeaturePlan::counts`] counts all.
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
pub fn task_id(task: &CachedTask) -> String {
    task.origin()
        .template
        .map_or_else(|| task.name_any(), str::to_owned)
}

/// The index key of a Feature's objects: `namespace/feature`.
pub fn feature_key(namespace: &str, feature: &str) -> String {
    format!("{namespace}/{feature}")
}

/// Attempts started by `task`.
pub fn attempt_count(task: &CachedTask) -> u32 {
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

/// Plans the feature's tasks (laying them out and validating their DAG afresh).
pub fn plan(snapshot: &Snapshot<'_>) -> FeaturePlan {
    let templates = TemplatePositions::of(snapshot.feature);
    plan_laid_out(snapshot, lay_out(&templates, snapshot.tasks))
}

/// A feature's tasks laid out for its DAG: the validated shape, its positions in plan
/// order, and the index in the snapshot's tasks of the Task at each position.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The validated structure.
    pub shape: Shape,
    /// `tasks[task_at[position]]` is the Task at `position`.
    pub task_at: Vec<u32>,
}

/// The spec position of each template of a Feature, for the plan order of its Tasks.
pub struct TemplatePositions<'f> {
    feature_uid: Option<&'f str>,
    positions: HashMap<&'f str, usize>,
}

impl<'f> TemplatePositions<'f> {
    /// The template positions of `feature` (the first of a repeated name).
    pub fn of(feature: &'f Feature) -> Self {
        TemplatePositions {
            feature_uid: feature.metadata.uid.as_deref(),
            positions: feature
                .spec
                .tasks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.as_str(), i))
                .rev()
                .collect(),
        }
    }

    /// The position of the template `task` was made from, when the Feature owns it.
    pub fn index_of(&self, task: &CachedTask) -> Option<usize> {
        let origin = task.origin();
        let owned = origin.feature_uid.is_some() && origin.feature_uid == self.feature_uid;
        owned.then(|| self.positions.get(origin.template?).copied())?
    }
}

/// Lays `tasks` out in plan order (templates in spec order, then standalone Tasks by
/// creation time and name) and validates their DAG.
pub fn lay_out(
    templates: &TemplatePositions<'_>,
    tasks: &[Arc<CachedTask>],
) -> Result<Layout, DagErrors> {
    let mut keyed: Vec<_> = tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let key = (
                templates.index_of(task).unwrap_or(usize::MAX),
                task.creation_timestamp().map(|t| t.0),
                task.name_any_ref(),
            );
            (key, u32::try_from(i).unwrap_or(u32::MAX))
        })
        .collect();
    keyed.sort_unstable();
    let nodes: Vec<_> = keyed
        .iter()
        .enumerate()
        .filter_map(|(order, (_, i))| Some(tasks.get(*i as usize)?.task_node(order as u64)))
        .collect();
    let shape = Shape::new(&nodes)?;
    Ok(Layout {
        shape,
        task_at: keyed.into_iter().map(|(_, i)| i).collect(),
    })
}

pub(crate) fn plan_laid_out(
    snapshot: &Snapshot<'_>,
    layout: Result<Layout, DagErrors>,
) -> FeaturePlan {
    let feature = snapshot.feature;
    let iterations: u32 = snapshot.tasks.iter().map(|t| attempt_count(t)).sum();
    let Layout { shape, task_at } = match layout {
        Ok(layout) => layout,
        Err(errors) => {
            let problem = Problem {
                reason: conditions::REASON_INVALID_PLAN,
                message: errors.to_string(),
            };
            return refused(problem, iterations);
        }
    };
    let task_of = |position: usize| {
        task_at
            .get(position)
            .and_then(|&i| snapshot.tasks.get(i as usize))
    };
    let dag = Dag::from_shape(
        &shape,
        (0..shape.len()).map(|p| task_of(p).map(|t| recorded_phase(t)).unwrap_or_default()),
    );
    let spec = &feature.spec;
    let max_iterations = spec.max_iterations.map(u64::from);
    let budget_spent = super::budget::budget_spent(feature, snapshot.tasks, snapshot.pods);
    let limits = feature_gate(snapshot, &dag, iterations, budget_spent.is_some());
    let mut pass = TaskPass::new(snapshot, Slots::new(limits, snapshot.start_limit));
    let mut tasks = Vec::new();
    for (position, ready) in feature_plan::ready_first(&dag) {
        let Some(task) = task_of(position) else {
            continue;
        };
        let phase = dag.phase_at(position).unwrap_or_default();
        tasks.extend(pass.plan_task(task, phase, ready));
    }
    let outcome = dag.outcome(OutcomeInputs {
        suspended: spec.suspend,
        iterations_used: u64::from(iterations),
        max_iterations,
        budget_reached: budget_spent.is_some(),
    });
    let outcome = match snapshot.plan_waits {
        Some(planner) => outcome_while_planning(outcome, snapshot.tasks, planner),
        None => outcome,
    };
    FeaturePlan {
        invalid: None,
        tasks,
        counts: dag.counts(),
        outcome,
        iterations,
        budget_spent,
        pool_resting: pass.pool_rest.flatten(),
    }
}

/// The outcome of a Feature whose tasks wait for its plan: Failed when planning failed for
/// good; never Complete, NoPlan, Blocked or Failed by its tasks (the plan's tasks are still
/// to come, or a revision replaces the failed ones).
fn outcome_while_planning(
    outcome: Option<FeatureOutcome>,
    tasks: &[Arc<CachedTask>],
    planner: &str,
) -> Option<FeatureOutcome> {
    let planning_failed = tasks
        .iter()
        .find(|t| t.name_any_ref() == planner)
        .is_some_and(|t| recorded_phase(t) == TaskPhase::Failed);
    match outcome {
        _ if planning_failed => Some(FeatureOutcome::Failed),
        Some(
            FeatureOutcome::Complete
            | FeatureOutcome::NoPlan
            | FeatureOutcome::Blocked
            | FeatureOutcome::Failed,
        ) => None,
        other => other,
    }
}

/// The plan of a Feature that cannot run as written: nothing starts, and `problem` is its
/// `Valid=False` condition.
fn refused(problem: Problem, iterations: u32) -> FeaturePlan {
    FeaturePlan {
        invalid: Some(problem),
        tasks: Vec::new(),
        counts: PhaseCounts::default(),
        outcome: None,
        iterations,
        budget_spent: None,
        pool_resting: None,
    }
}

/// What the feature lets start: suspend, stop, parallelism, `maxIterations`, the budget.
fn feature_gate(snapshot: &Snapshot<'_>, dag: &Dag, iterations: u32, budget_spent: bool) -> Gate {
    let feature = snapshot.feature;
    let spec = &feature.spec;
    Gate {
        suspended: spec.suspend,
        stopped: is_stopped(feature),
        parallelism: usize::try_from(spec.parallelism).unwrap_or(usize::MAX),
        running: dag.counts().running,
        iterations_used: u64::from(iterations),
        max_iterations: spec.max_iterations.map(u64::from),
        budget_spent: budget_spent
            || super::budget_share::budget_leased_out(feature, snapshot.tasks, snapshot.pods),
    }
}

/// One pass over a feature's tasks, ready ones first: hands out the free attempt slots,
/// asks the pool once whether every agent rests, and decides each task's actions.
struct TaskPass<'s> {
    snapshot: &'s Snapshot<'s>,
    /// The feature's attempt slots, under the controller-wide start limit.
    slots: Slots,
    start_timeout_ms: Option<i64>,
    pool: super::selection::FeaturePool<'s>,
    /// Whether every agent of the pool rests does not depend on the task
    /// (`engine::selection::select`): asked of the first ready task, then reused.
    pool_rest: Option<Option<(i64, String)>>,
    /// Ready, pending tasks seen so far.
    ready_seen: usize,
    /// One view, its name buffer reused: most tasks of a large feature need nothing.
    view: TaskView,
}

impl<'s> TaskPass<'s> {
    fn new(snapshot: &'s Snapshot<'s>, slots: Slots) -> Self {
        let spec = &snapshot.feature.spec;
        TaskPass {
            snapshot,
            start_timeout_ms: Some(i64::from(spec.pod_start_timeout_seconds) * 1000),
            pool: super::selection::FeaturePool::of(snapshot.feature),
            pool_rest: None,
            ready_seen: 0,
            view: TaskView {
                name: String::new(),
                phase: TaskPhase::Pending,
                ready: false,
                generation: 0,
                next_attempt_after_ms: None,
                attempt: None,
                gate: slots.standing(),
            },
            slots,
        }
    }

    /// The plan of `task` (its phase after the DAG's derivations, and whether it is ready),
    /// or `None` when it needs nothing and is not among the first ready tasks.
    fn plan_task(
        &mut self,
        task: &Arc<CachedTask>,
        phase: TaskPhase,
        ready: bool,
    ) -> Option<TaskPlan> {
        let now_ms = self.snapshot.now_ms;
        let name = task.name_any_ref();
        let pending_ready = phase == TaskPhase::Pending && ready;
        let first_selection = self.ask_pool(task, pending_ready);
        let next_attempt_after_ms = self.next_attempt_after(task, pending_ready);
        let may_start = feature_plan::may_start(phase, ready, next_attempt_after_ms, now_ms);
        // A task that waits for the Feature's plan is at capacity: it starts nothing.
        let held = self
            .snapshot
            .planning_only
            .is_some_and(|planner| planner != name);
        let gate = match held {
            true => FeatureGate::AtCapacity,
            false => self.slots.offer(may_start),
        };
        let view = &mut self.view;
        view.name.clear();
        view.name.push_str(name);
        view.phase = phase;
        view.ready = ready;
        view.generation = task.metadata.generation.unwrap_or(0);
        view.next_attempt_after_ms = next_attempt_after_ms;
        view.attempt = last_attempt(task);
        view.gate = gate;
        let claim = self.snapshot.leases.get(name).and_then(|l| claim_view(l));
        let pod = (view.attempt.as_ref())
            .and_then(|a| self.snapshot.pods.get(&attempt_id(name, a.number)))
            .map(|p| p.as_ref());
        let run = run_view(pod, view.attempt.is_some(), self.start_timeout_ms);
        let run = super::pod_start::with_start_problem(pod, run, now_ms);
        // A slot counts only when the task starts: not when someone else holds its claim.
        let mut actions = self.slots.decide(view, claim.as_ref(), &run, now_ms);
        let ruling = pod.and_then(|p| super::pod_start::ruling_due(p, now_ms));
        actions.extend(ruling.map(Action::RequeueAt));
        let derived_phase = (phase != recorded_phase(task)).then_some(phase);
        self.ready_seen += usize::from(pending_ready);
        let among_first_ready = pending_ready && self.ready_seen <= self.slots.gate().parallelism;
        if actions.is_empty() && derived_phase.is_none() && !among_first_ready {
            return None;
        }
        let selection = self.selection(task, pending_ready, gate, first_selection);
        Some(TaskPlan {
            task_id: task_id(task),
            task: Arc::clone(task),
            derived_phase,
            view: self.view.clone(),
            claim,
            run,
            actions,
            selection,
        })
    }

    /// Asks the pool for the first ready, pending task whether every agent rests; the
    /// selection made for it.
    fn ask_pool(&mut self, task: &CachedTask, pending_ready: bool) -> Option<Selection> {
        if !pending_ready || self.pool_rest.is_some() {
            return None;
        }
        let selection = self
            .pool
            .select(task, self.snapshot.rests, self.snapshot.now_ms);
        self.pool_rest = Some(match &selection {
            Selection::Wait { until_ms, message } => Some((*until_ms, message.clone())),
            Selection::Run(_) => None,
        });
        Some(selection)
    }

    /// When `task` may start its next attempt: its backoff, or the pool's rest.
    fn next_attempt_after(&self, task: &CachedTask, pending_ready: bool) -> Option<i64> {
        let pool_wait = match &self.pool_rest {
            Some(Some((until_ms, _))) if pending_ready => Some(*until_ms),
            _ => None,
        };
        task.status
            .as_ref()
            .and_then(|s| s.next_attempt_after.as_ref())
            .map(|t| t.0.as_millisecond())
            .max(pool_wait)
    }

    /// Which agent and model would run the task; every agent of the pool resting makes it
    /// wait.
    fn selection(
        &self,
        task: &CachedTask,
        pending_ready: bool,
        gate: FeatureGate,
        first_selection: Option<Selection>,
    ) -> Option<Selection> {
        match &self.pool_rest {
            _ if !pending_ready => None,
            Some(Some((until_ms, message))) => Some(Selection::Wait {
                until_ms: *until_ms,
                message: message.clone(),
            }),
            _ if gate != FeatureGate::Open => None,
            _ => Some(first_selection.unwrap_or_else(|| {
                (self.pool).select(task, self.snapshot.rests, self.snapshot.now_ms)
            })),
        }
    }
}

/// The phase a Task's status records (Pending without one).
fn recorded_phase(task: &CachedTask) -> TaskPhase {
    task.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn last_attempt(task: &CachedTask) -> Option<AttemptView> {
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

impl NameRef for CachedTask {
    fn name_any_ref(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
