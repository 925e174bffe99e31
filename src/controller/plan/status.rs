//! Task and Feature status, computed (pure) from the old status and what happened.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decide::{FeaturePlan, STOPPED};
use super::planning::Stage;
use super::problem::Problem;
use super::time::time;
use crate::api::conditions::{
    self, COMPLETE, CONFIGURED, FAILED, PROGRESSING, STATUS_FALSE, STATUS_TRUE, VALID,
};
use crate::api::{
    AttemptOutcome, AttemptRecord, ClaimStatus, Feature, FeaturePhase, FeatureStatus, TaskCounts,
    TaskStatus,
};
use crate::controller::plan::cached::CachedTask;
use crate::engine::attempt::AttemptResult;
use crate::engine::conclusion;
use crate::engine::dag::{FeatureOutcome, PhaseCounts, TaskPhase};
use crate::engine::policy::{Decision, PreviousAttempt};

fn current(task: &CachedTask) -> TaskStatus {
    task.status.clone().unwrap_or_default()
}

/// The status once attempt `number` started in `pod`, built for the Task's `generation`:
/// Running, with its record and claim.
pub fn started(
    task: &CachedTask,
    number: u32,
    pod: &str,
    generation: Option<i64>,
    claim: ClaimStatus,
    now_ms: i64,
) -> TaskStatus {
    let mut status = current(task);
    status.phase = TaskPhase::Running;
    status.ready = false;
    status.attempt_count = number;
    status.next_attempt_after = None;
    status.observed_generation = task.metadata.generation;
    status.message = Some(format!("attempt {number} running in Pod {pod}"));
    status.claim = Some(Box::new(claim));
    if conditions::find(&status.conditions, CONFIGURED).is_some() {
        let c = conditions::condition(
            CONFIGURED,
            STATUS_TRUE,
            "PodCreated",
            format!("agent Pod {pod} was created"),
            task.metadata.generation,
            time(now_ms),
        );
        conditions::set_condition(&mut status.conditions, c);
    }
    status.push_attempt(AttemptRecord {
        number,
        pod: Some(pod.to_owned()),
        generation,
        started_at: Some(time(now_ms)),
        ..AttemptRecord::default()
    });
    status
}

/// How an ended attempt is recorded.
#[derive(Clone, Debug)]
pub struct Ingestion<'a> {
    /// The policy's decision.
    pub decision: &'a Decision,
    /// The runner's result, when there was one.
    pub result: Option<&'a AttemptResult>,
    /// When the next attempt may start, Unix ms.
    pub next_attempt_after_ms: Option<i64>,
    /// The current time, Unix ms.
    pub now_ms: i64,
}

/// The status once the current attempt ended.
pub fn ingested(task: &CachedTask, ingestion: &Ingestion<'_>) -> TaskStatus {
    let decision = ingestion.decision;
    let mut status = current(task);
    status.phase = conclusion::phase_after(decision.phase);
    status.claim = None;
    status.observed_generation = task.metadata.generation;
    if let Some(retry) = decision.retry {
        status.retry_count = retry;
    }
    status.next_attempt_after = ingestion.next_attempt_after_ms.map(time);
    status.message = Some(decision.event.message.clone());
    if let Some(previous) = &decision.previous_attempt {
        status.last_failure = Some(previous.to_string());
    }
    let number = status.attempt_count;
    let record = match status
        .attempts
        .iter_mut()
        .rev()
        .find(|a| a.number == number)
    {
        Some(record) => record,
        None => {
            status.push_attempt(AttemptRecord {
                number,
                ..AttemptRecord::default()
            });
            let last = status.attempts.len() - 1;
            &mut status.attempts[last]
        }
    };
    // An attempt is counted once: a replayed ingest finds its record ended already.
    let first_ingest = record.outcome.is_none();
    record.ended_at = Some(time(ingestion.now_ms));
    record.outcome = Some(decision.outcome);
    match &decision.previous_attempt {
        Some(PreviousAttempt::Crashed { summary }) => record.crash = Some(summary.clone()),
        Some(PreviousAttempt::Failed { reason }) => record.reason = reason.clone(),
        _ => {}
    }
    if let Some(result) = ingestion.result {
        record.ran_by.agent = result.ran_by.agent.clone();
        record.ran_by.model = result.ran_by.model.clone();
        record.ran_by.agent_mode = result.ran_by.agent_mode.clone();
        if let Some(report) = &result.confinement {
            let confined = crate::api::conditions::confined(
                report,
                task.metadata.generation,
                time(ingestion.now_ms),
            );
            crate::api::conditions::set_condition(&mut status.conditions, confined);
        }
        record.stop_reason = result.stop_reason.as_ref().map(|r| r.as_str().to_owned());
        record.exit_code = result.exit_code;
        record.sigils = result.sigils.clone();
        record.check = result.check.clone().map(Box::new);
        record.usage = result.usage.clone();
        if record.crash.is_none() {
            record.crash = result.crash.clone();
        }
    }
    if first_ingest {
        status
            .usage
            .add_attempt(ingestion.result.map(|result| &result.usage));
    }
    status
}

/// The status with a phase the DAG derived (parent done or failed, dependents blocked or
/// unblocked).
pub fn with_phase(task: &CachedTask, phase: TaskPhase) -> TaskStatus {
    let mut status = current(task);
    status.phase = phase;
    status.observed_generation = task.metadata.generation;
    status
}

/// The status with `Configured=False` for `problem`; no attempt may start before
/// `retry_after_ms` (when set). `None` when the status already says so.
pub fn misconfigured(
    task: &CachedTask,
    problem: &Problem,
    retry_after_ms: Option<i64>,
    now_ms: i64,
) -> Option<TaskStatus> {
    let mut status = current(task);
    let c = conditions::condition(
        CONFIGURED,
        STATUS_FALSE,
        problem.reason,
        problem.message.clone(),
        task.metadata.generation,
        time(now_ms),
    );
    let changed = conditions::set_condition(&mut status.conditions, c);
    let retry_after = retry_after_ms.map(time);
    if !changed && (retry_after.is_none() || status.next_attempt_after == retry_after) {
        return None;
    }
    if retry_after.is_some() {
        status.next_attempt_after = retry_after;
    }
    Some(status)
}

/// The problems of an agent Pod that could not be created (the API server refused it, or
/// would refuse its prompt): shown until a Pod is created.
pub const POD_REFUSED_REASONS: [&str; 2] = [
    conditions::REASON_POD_REJECTED,
    conditions::REASON_PROMPT_TOO_LARGE,
];

/// The configuration problem the Feature's status records and that still holds: an agent
/// that reported itself misconfigured for this generation of the spec, or a refused Pod
/// ([`POD_REFUSED_REASONS`]).
/// An agent Pod that could not start is judged from its Task
/// ([`super::pod_start::halt_shown_by_tasks`]): the Feature's condition shows it within its
/// grace too, and only the Task records whether the attempt was ruled.
pub fn recorded_misconfiguration(feature: &Feature) -> Option<Problem> {
    let status = feature.status.as_ref()?;
    let c = conditions::find(&status.conditions, CONFIGURED)?;
    if c.status != STATUS_FALSE {
        return None;
    }
    let reason = std::iter::once(conditions::REASON_AGENT_MISCONFIGURED)
        .chain(POD_REFUSED_REASONS)
        .find(|r| *r == c.reason)?;
    let halted_for_this_spec = !super::pod_start::halts_until_spec_changes(reason)
        || c.observed_generation == feature.metadata.generation;
    halted_for_this_spec.then(|| Problem {
        reason,
        message: c.message.clone(),
    })
}

/// What the next prompt says about the task's last attempt.
pub fn previous_attempt(task: &CachedTask) -> Option<PreviousAttempt> {
    let status = task.status.as_ref()?;
    let last = status.attempts.last()?;
    match last.outcome? {
        AttemptOutcome::Crashed => Some(PreviousAttempt::Crashed {
            summary: last
                .crash
                .clone()
                .unwrap_or_else(|| "no details".to_owned()),
        }),
        AttemptOutcome::Failed => Some(PreviousAttempt::Failed {
            reason: last
                .reason
                .clone()
                .or_else(|| last.sigils.task_failed_reason.clone()),
        }),
        AttemptOutcome::Lost => Some(PreviousAttempt::Lost),
        AttemptOutcome::Conflict => {
            let report = last.workspace.clone();
            Some(PreviousAttempt::Conflict {
                files: report
                    .as_ref()
                    .map(|r| r.conflict_files.clone())
                    .unwrap_or_default(),
                tasks: report.map(|r| r.conflicting_tasks).unwrap_or_default(),
            })
        }
        _ => None,
    }
}

/// What a Feature whose tasks wait for its plan says.
fn plan_wait_message(feature: &Feature, stage: &Stage, events: &FeatureEvents) -> Option<String> {
    let planning = events.planning.as_ref()?;
    let name = feature.metadata.name.as_deref().unwrap_or_default();
    let hash = planning.dag_hash.as_deref().unwrap_or_default();
    let waits = match stage {
        Stage::NoPlanningTask | Stage::Planning | Stage::PlanToRead { .. } => format!(
            "planning: the tasks wait for the plan of Task {name}-planning ({} attempts so far)",
            planning.attempts
        ),
        Stage::AwaitingApproval { .. } => format!(
            "plan {hash} of {} tasks waits for approval: `ralph plan show feature/{name}`, \
             then `ralph plan approve feature/{name} --hash {hash}` or `ralph plan reject \
             feature/{name} --comment ...`",
            planning.tasks
        ),
        Stage::Creating { .. } => format!("creating the {} Tasks of plan {hash}", planning.tasks),
        Stage::NotPlanning | Stage::Running => return None,
    };
    Some(match &planning.message {
        Some(note) => format!("{waits} ({note})"),
        None => waits,
    })
}

/// What the attempts of this reconcile said about the whole feature.
#[derive(Clone, Debug, Default)]
pub struct FeatureEvents {
    /// An agent promised FAILURE with this reason.
    pub stop_reason: Option<String>,
    /// An attempt ended misconfigured (the feature halts until its spec changes): the
    /// condition reason, and what is wrong and how to fix it.
    pub halt: Option<Problem>,
    /// The API server refused an agent Pod for a reason the user must fix.
    pub pod_rejected: Option<Problem>,
    /// An agent Pod waits for a start problem within its grace ([`super::pod_start`]).
    pub pod_start: Option<Problem>,
    /// An agent Pod was created.
    pub started: bool,
    /// A ready task found every controller-wide attempt slot in use.
    pub waiting_for_slot: bool,
    /// The configuration problem the Feature's status must show (set by the reconcile from
    /// the above, the spec and the recorded status).
    pub misconfiguration: Option<Problem>,
    /// `status.planning` of a Feature that plans (set by the reconcile).
    pub planning: Option<crate::api::planning::PlanningStatus>,
    /// Where planning stands while the Feature's tasks wait for its plan (set by the
    /// reconcile).
    pub(crate) plan_stage: Option<super::planning::Stage>,
}

impl FeatureEvents {
    /// Keeps the first of each kind of report.
    pub fn merge(&mut self, other: FeatureEvents) {
        if self.stop_reason.is_none() {
            self.stop_reason = other.stop_reason;
        }
        if self.halt.is_none() {
            self.halt = other.halt;
        }
        if self.pod_rejected.is_none() {
            self.pod_rejected = other.pod_rejected;
        }
        if self.pod_start.is_none() {
            self.pod_start = other.pod_start;
        }
        self.started |= other.started;
        self.waiting_for_slot |= other.waiting_for_slot;
    }
}

/// The Feature's status after this reconcile.
pub fn feature_status(
    feature: &Feature,
    plan: &FeaturePlan,
    tasks: &[std::sync::Arc<CachedTask>],
    events: &FeatureEvents,
    now_ms: i64,
) -> FeatureStatus {
    let old = feature.status.clone().unwrap_or_default();
    let generation = feature.metadata.generation;
    let now = time(now_ms);
    let mut status = FeatureStatus {
        conditions: old.conditions.clone(),
        observed_generation: generation,
        iterations: plan.iterations,
        planning: events.planning.clone(),
        ..FeatureStatus::default()
    };
    let set = FeatureConditions {
        generation,
        now: now.clone(),
    };
    if let Some(invalid) = &plan.invalid {
        status.phase = FeaturePhase::Invalid;
        status.message = Some(invalid.message.clone());
        set.set(&mut status, VALID, false, invalid.reason, &invalid.message);
        let why = "the plan is invalid";
        set.set(&mut status, PROGRESSING, false, invalid.reason, why);
        return status;
    }
    set_configured(&mut status, &set, events.misconfiguration.as_ref());
    status.usage = super::budget::recorded(tasks);
    super::budget::set_cost_condition(feature, &status.usage, &mut status.conditions, now.clone());
    super::pod_gateway::set_gateway_condition(feature, &mut status.conditions, now.clone());
    status.git = super::git::branch_status(feature, tasks);
    let c = &plan.counts;
    status.counts = TaskCounts::from(*c);
    let stop_reason = events.stop_reason.clone().or_else(|| {
        conditions::find(&old.conditions, STOPPED)
            .filter(|c| c.status == STATUS_TRUE)
            .map(|c| c.message.clone())
    });
    let outcome = match &stop_reason {
        Some(_) => Some(FeatureOutcome::Failed),
        None => plan.outcome,
    };
    if let Some(reason) = &stop_reason {
        set.set(&mut status, STOPPED, true, "AgentPromisedFailure", reason);
    }
    status.outcome = outcome;
    status.phase = match outcome {
        Some(outcome) => outcome.into(),
        None if c.running == 0 && events.misconfiguration.is_some() => FeaturePhase::Halted,
        None if c.running == 0
            && matches!(events.plan_stage, Some(Stage::AwaitingApproval { .. })) =>
        {
            FeaturePhase::AwaitingApproval
        }
        None if c.running > 0 || plan.iterations > 0 => FeaturePhase::Running,
        None => FeaturePhase::Pending,
    };
    status.message = match (&events.plan_stage, outcome) {
        (Some(stage), None) => plan_wait_message(feature, stage, events),
        _ => None,
    }
    .or_else(|| feature_message(plan, events, stop_reason.as_deref(), outcome));
    super::selection::set_pool_condition(
        &mut status,
        plan.pool_resting.as_ref(),
        generation,
        now_ms,
    );
    set_outcome_conditions(&mut status, &set, outcome, c);
    set_confined(&mut status, tasks, generation, now);
    status
}

/// `Configured` (false with the misconfiguration, when there is one) and `Valid`.
fn set_configured(status: &mut FeatureStatus, set: &FeatureConditions, problem: Option<&Problem>) {
    match problem {
        Some(problem) => set.set(status, CONFIGURED, false, problem.reason, &problem.message),
        None => set.set(
            status,
            CONFIGURED,
            true,
            "Configured",
            "agent Pods can be created",
        ),
    }
    set.set(status, VALID, true, "PlanValid", "the task DAG is valid");
}

/// The Feature's `Confined` condition, from its Tasks'.
fn set_confined(
    status: &mut FeatureStatus,
    tasks: &[std::sync::Arc<CachedTask>],
    generation: Option<i64>,
    now: Time,
) {
    let tasks_confined = tasks.iter().filter_map(|task| {
        let confined = conditions::find(&task.status.as_ref()?.conditions, conditions::CONFINED)?;
        Some((task.metadata.name.as_deref().unwrap_or_default(), confined))
    });
    if let Some(confined) = conditions::feature_confined(tasks_confined, generation, now) {
        conditions::set_condition(&mut status.conditions, confined);
    }
}

/// Sets Feature conditions observed at one generation and time.
struct FeatureConditions {
    generation: Option<i64>,
    now: Time,
}

impl FeatureConditions {
    fn set(&self, status: &mut FeatureStatus, type_: &str, on: bool, reason: &str, message: &str) {
        let value = if on { STATUS_TRUE } else { STATUS_FALSE };
        let c = conditions::condition(
            type_,
            value,
            reason,
            message,
            self.generation,
            self.now.clone(),
        );
        conditions::set_condition(&mut status.conditions, c);
    }
}

/// The Feature's status message: a promised FAILURE, a misconfiguration, the outcome's
/// limit, a spent budget, a resting pool, or the tasks done.
fn feature_message(
    plan: &FeaturePlan,
    events: &FeatureEvents,
    stop_reason: Option<&str>,
    outcome: Option<FeatureOutcome>,
) -> Option<String> {
    let c = &plan.counts;
    match (stop_reason, outcome) {
        (Some(reason), _) => Some(format!("an agent promised FAILURE: {reason}")),
        (None, None) if events.misconfiguration.is_some() => {
            events.misconfiguration.as_ref().map(|p| p.message.clone())
        }
        (None, Some(outcome)) => Some(conclusion::limit_message(
            outcome,
            c,
            plan.budget_spent.as_ref(),
        )),
        (None, None) if plan.budget_spent.is_some() => plan
            .budget_spent
            .as_ref()
            .map(|spent| conclusion::finishing_message(spent, c.running)),
        (None, None) if plan.pool_resting.is_some() => plan
            .pool_resting
            .as_ref()
            .map(|(_, message)| message.clone()),
        (None, None) => Some(format!("{} of {} tasks done", c.done, c.total())),
    }
}

/// `Progressing`, `Complete` and `Failed` for the Feature's outcome (none yet: progressing).
fn set_outcome_conditions(
    status: &mut FeatureStatus,
    set: &FeatureConditions,
    outcome: Option<FeatureOutcome>,
    c: &PhaseCounts,
) {
    let message = status.message.clone().unwrap_or_default();
    let progressing = outcome.is_none();
    let reason = if progressing {
        "TasksRunning"
    } else {
        "Settled"
    };
    set.set(status, PROGRESSING, progressing, reason, &message);
    let complete = outcome == Some(FeatureOutcome::Complete);
    let reason = if complete {
        "AllTasksDone"
    } else {
        "NotComplete"
    };
    let done = format!("{} of {} tasks done", c.done, c.total());
    set.set(status, COMPLETE, complete, reason, &done);
    let failed = outcome == Some(FeatureOutcome::Failed);
    let reason = if failed { "FeatureFailed" } else { "NotFailed" };
    set.set(
        status,
        FAILED,
        failed,
        reason,
        if failed { &message } else { "" },
    );
}

/// Reason of `Progressing` on a new Feature while its Tasks are being created.
pub const REASON_CREATING_TASKS: &str = "CreatingTasks";

/// The first status of a Feature whose Tasks do not all exist yet (creating 10,000 of them
/// takes minutes within the client's QPS): Pending, each task of its templates counted
/// pending, `Progressing` saying so. It judges nothing: no observed generation (kstatus and
/// Argo CD wait for it), no Valid or Configured condition; the plan is judged, and the
/// status written whole, once every Task exists.
pub fn creating_tasks(feature: &Feature, now_ms: i64) -> FeatureStatus {
    let total = u32::try_from(feature.spec.tasks.len()).unwrap_or(u32::MAX);
    let message = format!("creating its {total} Tasks; the plan is judged once they all exist");
    let mut status = FeatureStatus {
        phase: FeaturePhase::Pending,
        message: Some(message.clone()),
        counts: TaskCounts {
            total,
            pending: total,
            ..TaskCounts::default()
        },
        ..FeatureStatus::default()
    };
    let progressing = conditions::condition(
        PROGRESSING,
        STATUS_TRUE,
        REASON_CREATING_TASKS,
        &message,
        feature.metadata.generation,
        time(now_ms),
    );
    conditions::set_condition(&mut status.conditions, progressing);
    status
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
