//! The one conclusion of an attempt and the one gate, called by the controller and the
//! local mode alike: from how an attempt ended, the task's state, the policy, the time and
//! the jitter, the task's next state ([`conclude`]); from the feature's limits, whether a
//! task may start ([`Gate`]). Pure: time and randomness are arguments.

use std::time::Duration;

use super::attempt::{AttemptResult, Usage};
use super::backoff::RetryBackoff;
use super::budget::BudgetSpent;
use super::dag::{FeatureOutcome, PhaseCounts, TaskPhase};
use super::lifecycle::FeatureGate;
use super::outcome::{
    AttemptEnd, AttemptOutcome, Decision, EventKind, FeatureEffect, PhaseChange, PreviousAttempt,
    TaskContext,
};
use super::policy;
use super::verification::{AttemptKind, Verification};
use super::workspace::{self, WorkspaceReport};

/// How long an exhausted agent rests when it did not say when its quota resets.
pub const DEFAULT_EXHAUSTION_REST: Duration = Duration::from_secs(300);

/// Attempts in a row that may end without a verdict before the task fails.
pub const DEFAULT_MAX_WITHOUT_VERDICT: u32 = 5;

/// What the conclusion needs to know about the task before the attempt's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskState {
    /// The task's ID (the name its sigils must carry).
    pub name: String,
    /// Retries already used.
    pub retry_count: u32,
    /// Attempts that ended without a verdict, in a row, before this one.
    pub without_verdict: u32,
    /// The verification the feature asks for after a done verdict.
    pub verify: Verification,
    /// What the attempt that ended did: the work, or a verification of it.
    pub kind: AttemptKind,
}

impl TaskState {
    /// Task `name` as its record shows it before the conclusion of its last started attempt
    /// (number `attempt_count`): `retry_count` retries used, `history` its recorded attempts,
    /// oldest first. The attempt's kind is the one recorded when it started (work when no
    /// record says); the attempts without a verdict are counted back from the newest
    /// recorded outcome. The one construction both modes use.
    pub fn from_history(
        name: impl Into<String>,
        retry_count: u32,
        verify: Verification,
        attempt_count: u32,
        history: impl DoubleEndedIterator<Item = RecordedAttempt> + Clone,
    ) -> TaskState {
        TaskState {
            name: name.into(),
            retry_count,
            without_verdict: without_verdict_streak(history.clone().filter_map(|a| a.outcome)),
            verify,
            kind: history
                .rev()
                .find(|a| a.number == attempt_count)
                .map(|a| a.kind)
                .unwrap_or_default(),
        }
    }
}

/// One attempt of a task as its record shows it (a Task status's attempt, a store row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedAttempt {
    /// Attempt number, starting at 1.
    pub number: u32,
    /// Work or verify, as recorded when it started.
    pub kind: AttemptKind,
    /// How it ended; `None` while it runs (or when the record lost it).
    pub outcome: Option<AttemptOutcome>,
}

/// The rules a task's attempts are concluded by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConclusionPolicy {
    /// Retry limit and backoff (also the backoff of attempts without a verdict).
    pub retry: RetryBackoff,
    /// Attempts in a row without a verdict before the task fails.
    pub max_without_verdict: u32,
    /// How long an exhausted agent rests when its reset time is unknown.
    pub exhaustion_rest: Duration,
}

impl ConclusionPolicy {
    /// The given retry policy with the default no-verdict limit and exhaustion rest. A task's
    /// policy: its feature's retry settings [`RetryBackoff::for_task`].
    pub fn with_retry(retry: RetryBackoff) -> Self {
        Self {
            retry,
            max_without_verdict: DEFAULT_MAX_WITHOUT_VERDICT,
            exhaustion_rest: DEFAULT_EXHAUSTION_REST,
        }
    }
}

/// The agent is out of quota: none of its tasks starts before `until_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRest {
    /// Unix ms when the agent may be used again.
    pub until_ms: i64,
    /// What the agent said.
    pub message: String,
}

/// The task's state after an attempt, and what else must happen.
#[derive(Clone, Debug, PartialEq)]
pub struct NextState {
    /// The policy's decision (outcome, event, feature effect, claim release).
    pub decision: Decision,
    /// The task's new phase.
    pub phase: TaskPhase,
    /// Retries used after this attempt.
    pub retry_count: u32,
    /// Attempts in a row without a verdict, this one included.
    pub without_verdict: u32,
    /// No new attempt before this time, Unix ms.
    pub next_attempt_after_ms: Option<i64>,
    /// What the next prompt says about this attempt (`None`: keep what was said before,
    /// unless the task is done).
    pub previous_attempt: Option<PreviousAttempt>,
    /// The attempt's usage (zero without a result).
    pub usage: Usage,
    /// The task's status message (the event's message).
    pub message: String,
    /// The agent rests (quota exhausted) until then: it leaves the pool of every task that
    /// uses it. The task itself does not wait for it: the selection
    /// ([`super::selection::select`]) gives it the next agent of the pool, or makes it wait
    /// when every agent rests.
    pub agent_rest: Option<AgentRest>,
    /// The crash summary or the reason the attempt ended without a result.
    pub crash: Option<String>,
}

impl NextState {
    /// The effect on the whole feature.
    pub fn feature(&self) -> &FeatureEffect {
        &self.decision.feature
    }

    /// The attempt's outcome.
    pub fn outcome(&self) -> AttemptOutcome {
        self.decision.outcome
    }

    /// True when the status and display should show the message as a warning.
    pub fn is_warning(&self) -> bool {
        self.decision.event.kind == EventKind::Warning
    }
}

/// The one conclusion of an attempt: the task's next state after `end`. `workspace` is what
/// the attempt's git steps did with its work, when it ran in git (a conflict or a failed
/// integration undoes a done verdict, see [`workspace::after_git`]). `jitter` is uniform in
/// `[0, 1)`.
///
/// In order: the outcome table ([`policy::judge`]), the git steps, the limit of attempts in a
/// row without a verdict, the backoff of a counted retry, an exhausted agent's rest.
pub fn conclude(
    end: &AttemptEnd,
    workspace: Option<&WorkspaceReport>,
    task: &TaskState,
    policy: &ConclusionPolicy,
    now_ms: i64,
    jitter: f64,
) -> NextState {
    let context = TaskContext {
        name: task.name.clone(),
        retry_count: task.retry_count,
        max_retries: policy.retry.max_retries,
        verify: task.verify.agent,
    };
    let mut decision = policy::judge(end, &context, task.kind, task.verify);
    if let Some(report) = workspace {
        decision = workspace::after_git(decision, &context, report);
    }
    let result: Option<&AttemptResult> = match end {
        AttemptEnd::Reported(result) => Some(result),
        _ => None,
    };
    let without_verdict = if ends_without_verdict(decision.outcome) {
        task.without_verdict.saturating_add(1)
    } else {
        0
    };
    let mut next_attempt_after_ms = decision.next_attempt_after(&policy.retry, now_ms, jitter);
    if without_verdict > 0 {
        if without_verdict >= policy.max_without_verdict {
            fail_without_verdict(&mut decision, &task.name, without_verdict);
        } else {
            next_attempt_after_ms = Some(policy.retry.next_attempt_after(
                now_ms,
                without_verdict - 1,
                jitter,
            ));
        }
    }
    let agent_rest = decision.agent_exhausted.as_ref().map(|exhausted| {
        let rest_ms = i64::try_from(policy.exhaustion_rest.as_millis()).unwrap_or(i64::MAX);
        AgentRest {
            until_ms: exhausted
                .until
                .map_or(now_ms.saturating_add(rest_ms), |s| s.saturating_mul(1000)),
            message: exhausted.message.clone(),
        }
    });
    let phase = phase_after(decision.phase);
    if phase != TaskPhase::Pending {
        next_attempt_after_ms = None;
    }
    let crash = match (&decision.previous_attempt, end) {
        (Some(PreviousAttempt::Crashed { summary }), _) => Some(summary.clone()),
        (_, AttemptEnd::ClaimLost { reason } | AttemptEnd::NoResult { reason }) => {
            Some(reason.clone())
        }
        _ => result.and_then(|r| r.crash.clone()),
    };
    NextState {
        phase,
        retry_count: decision.retry.unwrap_or(task.retry_count),
        without_verdict,
        next_attempt_after_ms,
        previous_attempt: decision.previous_attempt.clone(),
        usage: result.map(|r| r.usage.clone()).unwrap_or_default(),
        message: decision.event.message.clone(),
        agent_rest,
        crash,
        decision,
    }
}

/// The phase a decision puts the task in. A claimed task was Pending before it ran, so
/// "unchanged" means Pending again.
pub fn phase_after(change: PhaseChange) -> TaskPhase {
    match change {
        PhaseChange::Unchanged | PhaseChange::Pending => TaskPhase::Pending,
        PhaseChange::Done => TaskPhase::Done,
        PhaseChange::Failed => TaskPhase::Failed,
    }
}

/// Outcomes that leave the task without a verdict: no sigil (or an unusable one), or a turn
/// that stopped early.
pub fn ends_without_verdict(outcome: AttemptOutcome) -> bool {
    matches!(
        outcome,
        AttemptOutcome::Released | AttemptOutcome::StoppedEarly
    )
}

/// Attempts in a row without a verdict at the end of a task's history (oldest first).
pub fn without_verdict_streak(outcomes: impl DoubleEndedIterator<Item = AttemptOutcome>) -> u32 {
    let streak = outcomes
        .rev()
        .take_while(|o| ends_without_verdict(*o))
        .count();
    u32::try_from(streak).unwrap_or(u32::MAX)
}

fn fail_without_verdict(decision: &mut Decision, task: &str, streak: u32) {
    decision.phase = PhaseChange::Failed;
    decision.event.kind = EventKind::Warning;
    decision.event.reason = "NoVerdictLimit";
    decision.event.message = format!(
        "task {task}: {streak} attempts in a row ended without a verdict (no final sigil, or \
         the turn stopped early); task failed. Check the agent's output, or raise the limit"
    );
}

/// What a feature's settings and state allow for a task that is not running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// The user suspended the feature (or interrupted the run).
    pub suspended: bool,
    /// An agent promised FAILURE, or the agent is misconfigured.
    pub stopped: bool,
    /// Most attempts at once.
    pub parallelism: usize,
    /// Attempts running now.
    pub running: usize,
    /// Attempts started so far.
    pub iterations_used: u64,
    /// Most attempts in all (the feature's `maxIterations`, a run's `--limit`).
    pub max_iterations: Option<u64>,
    /// The feature's cost or token budget is spent ([`super::budget::Budget::spent`]).
    pub budget_spent: bool,
}

impl Gate {
    /// True once no attempt may start because of the iteration limit or the budget.
    pub fn limit_reached(&self) -> bool {
        self.budget_spent
            || self
                .max_iterations
                .is_some_and(|max| self.iterations_used >= max)
    }

    /// How many more attempts may start now.
    pub fn free_slots(&self) -> usize {
        let free = self.parallelism.saturating_sub(self.running);
        match self.max_iterations {
            Some(max) => {
                let left = max.saturating_sub(self.iterations_used);
                free.min(usize::try_from(left).unwrap_or(usize::MAX))
            }
            None => free,
        }
    }

    /// The gate for a task that does not ask for a slot now (running, waiting, not ready).
    pub fn standing(&self) -> FeatureGate {
        match self.next(0) {
            FeatureGate::AtCapacity => FeatureGate::Open,
            gate => gate,
        }
    }

    /// The gate for the next task that would start, after `handed_out` slots were given
    /// to other tasks in the same pass.
    pub fn next(&self, handed_out: usize) -> FeatureGate {
        if self.suspended {
            FeatureGate::Suspended
        } else if self.stopped || self.limit_reached() {
            FeatureGate::Stopped
        } else if handed_out >= self.free_slots() {
            FeatureGate::AtCapacity
        } else {
            FeatureGate::Open
        }
    }
}

/// The message that explains a feature's outcome, naming the spent budget when that is
/// why the limit was reached.
pub fn limit_message(
    outcome: FeatureOutcome,
    counts: &PhaseCounts,
    budget: Option<&BudgetSpent>,
) -> String {
    match (outcome, budget) {
        (FeatureOutcome::LimitReached, Some(spent)) => format!(
            "{spent}; no new attempt starts; {} of {} tasks done",
            counts.done,
            counts.total()
        ),
        _ => outcome_message(outcome, counts),
    }
}

/// What a feature that has not ended says while its budget is spent and attempts that
/// started before still run.
pub fn finishing_message(spent: &BudgetSpent, running: usize) -> String {
    let attempts = if running == 1 { "attempt" } else { "attempts" };
    format!("{spent}; no new attempt starts; waiting for {running} running {attempts} to finish")
}

/// The message that explains a feature's outcome.
pub fn outcome_message(outcome: FeatureOutcome, counts: &PhaseCounts) -> String {
    match outcome {
        FeatureOutcome::Complete => format!("all {} tasks done", counts.total()),
        FeatureOutcome::Failed => format!(
            "{} of {} tasks failed ({} done, {} blocked)",
            counts.failed,
            counts.total(),
            counts.done,
            counts.blocked
        ),
        FeatureOutcome::Blocked => format!(
            "no task can run: {} pending, {} blocked, {} failed, none ready or running",
            counts.pending, counts.blocked, counts.failed
        ),
        FeatureOutcome::NoPlan => "the feature has no tasks".to_owned(),
        FeatureOutcome::LimitReached => format!(
            "the attempt limit (maxIterations or --limit) is used up; {} of {} tasks done",
            counts.done,
            counts.total()
        ),
        FeatureOutcome::Suspended => "suspended (spec.suspend)".to_owned(),
    }
}

#[cfg(test)]
#[path = "conclusion_tests.rs"]
mod tests;
