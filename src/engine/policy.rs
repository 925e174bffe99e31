//! The attempt-outcome policy: how an attempt ended, and the task it ran for, in; the
//! [`Decision`] out. Pure.
//!
//! [`judge`] takes every way an attempt can end ([`AttemptEnd`]) for a work or a
//! verification attempt; a reported result goes through [`decide`], the outcome table of
//! ARCHITECTURE.md ("The outcome table") as one `match`, or [`decide_verification`] for a
//! verifier's verdict. The caller is [`super::conclusion::conclude`], which adds the git
//! steps, the no-verdict limit, the backoff and an exhausted agent's rest.

use super::attempt::{AttemptResult, OutcomeClass, StopReason};
use super::outcome::AttemptEnd;
use super::sigils::{Promise, Sigils, Verdict};
use super::verification::{AttemptKind, Verification};

// Defined here before `outcome.rs` held them; callers still import them from here.
pub use super::outcome::{
    AgentExhausted, AttemptOutcome, Decision, Event, EventKind, FeatureEffect, PhaseChange,
    PreviousAttempt, TaskContext,
};

/// Longest crash summary or failure reason carried into a decision (characters).
pub const MAX_SUMMARY_CHARS: usize = 500;

/// The decision on an attempt of `kind` that ended with `end`: the outcome table for a
/// reported result ([`decide`]), a verifier's verdict for a verification attempt
/// ([`decide_verification`]); a done work attempt must also have passed `verify.command`
/// when `verification.command` is set (it is then verified by an agent when `task.verify`
/// is on). The ends without a result: no result is a crash (a failed verification for a
/// verifier), a lost claim is retried, and a run that never started, was interrupted or
/// superseded goes back to Pending without a retry charged.
pub fn judge(
    end: &AttemptEnd,
    task: &TaskContext,
    kind: AttemptKind,
    verification: Verification,
) -> Decision {
    match (kind, end) {
        (AttemptKind::Verify, AttemptEnd::Reported(result)) => decide_verification(task, result),
        (AttemptKind::Work, AttemptEnd::Reported(result)) => {
            let decision = decide(task, result);
            if verification.command && decision.outcome == AttemptOutcome::Done {
                check_command(decision, task, result)
            } else {
                decision
            }
        }
        (AttemptKind::Verify, AttemptEnd::NoResult { reason }) => verification_failed(
            task,
            format!("the verifier ended without a result: {}", reason.trim()),
        ),
        (AttemptKind::Work, AttemptEnd::NoResult { reason }) => {
            on_ended_without_result(task, reason)
        }
        (_, AttemptEnd::ClaimLost { reason }) => {
            let mut decision = on_claim_lost(task);
            decision.event.message = format!("{} ({reason})", decision.event.message);
            decision
        }
        (_, AttemptEnd::NotStarted { reason }) => back_to_pending(
            "AttemptNotStarted",
            format!(
                "task {}: attempt released without charging a retry: {reason}",
                task.name
            ),
        ),
        (_, AttemptEnd::Interrupted { reason }) => back_to_pending(
            "AttemptInterrupted",
            format!("task {}: attempt interrupted: {reason}", task.name),
        ),
        (
            _,
            AttemptEnd::Superseded {
                from_generation,
                to_generation,
            },
        ) => back_to_pending(
            "AttemptSuperseded",
            format!(
                "task {}: spec changed (generation {from_generation} -> {to_generation}); \
                 restarting with the new spec",
                task.name
            ),
        ),
    }
}

/// A done work attempt stands only when its `verify.command` passed.
fn check_command(done: Decision, task: &TaskContext, result: &AttemptResult) -> Decision {
    match &result.check {
        Some(check) if check.passed() => done,
        Some(check) => verification_failed(task, check.failure()),
        None => verification_failed(
            task,
            "verify.command did not run (the runner reported no check); is the runner older \
             than the controller?"
                .to_owned(),
        ),
    }
}

/// An attempt the lifecycle ended that says nothing about the task (not started,
/// interrupted, superseded): Pending again, no retry charged.
fn back_to_pending(reason: &'static str, message: String) -> Decision {
    base(
        AttemptOutcome::Interrupted,
        PhaseChange::Pending,
        normal(reason, message),
    )
}

/// Which of this attempt's task sigils concerns the task.
enum TaskSigil<'a> {
    Done,
    Failed,
    /// Done and failed both, for this task: no verdict.
    Conflicting,
    OtherTask(&'a str),
    None,
}

impl<'a> TaskSigil<'a> {
    fn of(task: &str, sigils: &'a Sigils) -> Self {
        let done = sigils.task_done.as_deref();
        let failed = sigils.task_failed.as_deref();
        match (done == Some(task), failed == Some(task)) {
            (true, true) => Self::Conflicting,
            (true, false) => Self::Done,
            (false, true) => Self::Failed,
            (false, false) => match done.or(failed) {
                Some(other) => Self::OtherTask(other),
                None => Self::None,
            },
        }
    }
}

/// Applies the attempt-outcome table to a finished attempt.
///
/// Rows are tried in order: how the process ended comes first (sigils from an exhausted,
/// cancelled or crashed attempt are not trusted), then the feature-wide FAILURE promise, then
/// the stop reason, then this task's sigils. A COMPLETE promise is recorded on every row.
pub fn decide(task: &TaskContext, result: &AttemptResult) -> Decision {
    use OutcomeClass::{Cancelled, Crashed, Exhausted, Finished, LimitReached, Misconfigured};
    use StopReason::{EndTurn, Refusal};

    let sigils = &result.sigils;
    let stop = result.stop_reason.as_ref();
    let mut decision = match (
        result.outcome,
        stop,
        TaskSigil::of(&task.name, sigils),
        sigils.promise,
    ) {
        // configuration error: not retried; the feature halts until the user fixes it
        (Misconfigured, ..) => misconfigured(task, result),
        // usage limit / quota: not a task failure, the agent rests until its reset time
        (Exhausted, ..) => exhausted(task, result),
        // the gateway refused a model call: the budget is spent, no retry
        (LimitReached, ..) => limit_reached(task, result),
        // user suspend or cancel
        (Cancelled, ..) | (Finished, Some(StopReason::Cancelled), ..) => interrupted(task),
        // non-zero exit, no output, crash pattern, hang: retried with backoff
        (Crashed, ..) => crashed(task, crash_summary(result)),
        // <promise>FAILURE</promise>: the feature stops with the agent's reason
        (Finished, _, _, Some(Promise::Failure)) => stop_feature(task, sigils),
        // refusal: the task fails, no retry
        (Finished, Some(Refusal), ..) => refused(task),
        // end_turn + task-done: done, or verify first
        (Finished, Some(EndTurn), TaskSigil::Done, _) => done(task),
        // end_turn + task-failed: retried while retries remain, then failed
        (Finished, Some(EndTurn), TaskSigil::Failed, _) => failed(task, sigils),
        // done and failed both: no verdict, released with a warning
        (Finished, Some(EndTurn), TaskSigil::Conflicting, _) => conflicting(task),
        // a sigil for another task: warning, no transition, claim released
        (Finished, Some(EndTurn), TaskSigil::OtherTask(other), _) => other_task(task, other),
        // no sigil: back to pending, not a retry
        (Finished, Some(EndTurn), TaskSigil::None, _) => no_sigil(task),
        // max_tokens, max_turn_requests, unknown (or no) stop reason: stopped early, released
        (Finished, stop, ..) => stopped_early(task, stop),
    };
    decision.promise_complete = sigils.promise == Some(Promise::Complete);
    decision
}

/// Applies a verification attempt's verdict on a task whose agent reported it done: pass
/// makes it Done; a fail, a crash or no verdict at all (none, one for another task, a turn
/// that stopped early, a refusal) is a failed verification, retried while retries remain.
/// Exhaustion, cancellation and misconfiguration are decided as for a work attempt: they
/// say nothing about the work, so the verification runs again.
pub fn decide_verification(task: &TaskContext, result: &AttemptResult) -> Decision {
    use OutcomeClass::{Cancelled, Crashed, Exhausted, Finished, LimitReached, Misconfigured};
    let sigils = &result.sigils;
    let stop = result.stop_reason.as_ref();
    match (result.outcome, stop, &sigils.verdict) {
        (Misconfigured, ..) => misconfigured(task, result),
        (Exhausted, ..) => exhausted(task, result),
        (LimitReached, ..) => limit_reached(task, result),
        (Cancelled, ..) | (Finished, Some(StopReason::Cancelled), _) => interrupted(task),
        (Crashed, ..) => verification_failed(
            task,
            format!("the verifier crashed: {}", crash_summary(result)),
        ),
        (Finished, Some(StopReason::EndTurn), Some(Verdict::Pass(id))) if *id == task.name => {
            verified(task)
        }
        (Finished, Some(StopReason::EndTurn), Some(Verdict::Fail(id))) if *id == task.name => {
            let note = sigils
                .verify_fail_reason
                .as_ref()
                .or(sigils.journal.first());
            let reason = match note {
                Some(note) => format!("the verifier rejected the work: {}", bounded(note)),
                None => "the verifier rejected the work".to_owned(),
            };
            verification_failed(task, reason)
        }
        (_, stop, verdict) => {
            let why = match (stop, verdict) {
                (Some(StopReason::EndTurn), Some(Verdict::Pass(id) | Verdict::Fail(id))) => {
                    format!("its verdict names task {id}")
                }
                (Some(StopReason::EndTurn), None) => "its final answer holds no verdict".into(),
                (Some(stop), _) => format!("its turn stopped early (stop reason {stop})"),
                (None, _) => "its turn ended without a stop reason".into(),
            };
            verification_failed(task, format!("the verifier gave no verdict: {why}"))
        }
    }
}

/// A failed verification (the command failed, the verifier rejected the work, crashed or
/// gave no verdict): a failed attempt, retried while retries remain, with `reason` in the
/// next prompt. The event shows the reason's first line.
pub fn verification_failed(task: &TaskContext, reason: String) -> Decision {
    let message = format!(
        "task {}: verification failed: {}",
        task.name,
        one_line_reason(&reason)
    );
    retry_or_fail(
        task,
        AttemptOutcome::Failed,
        "VerificationFailed",
        message,
        PreviousAttempt::Failed {
            reason: Some(reason),
        },
    )
}

/// A multi-line reason on one line (an event's message): its first line and, after it,
/// the last line of the rest (a failing check's last line of output says most).
fn one_line_reason(reason: &str) -> String {
    let mut lines = reason
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty());
    let first = lines.next().unwrap_or_default();
    let rest: Vec<&str> = lines.collect();
    match rest.as_slice() {
        [] => first.to_owned(),
        [only] => format!("{first} {only}"),
        [.., last] => format!("{first} … {last}"),
    }
}

/// The claim Lease was not renewed in time: the attempt is lost and the task retried.
pub fn on_claim_lost(task: &TaskContext) -> Decision {
    let message = format!(
        "task {}: claim was not renewed in time; attempt lost",
        task.name
    );
    retry_or_fail(
        task,
        AttemptOutcome::Lost,
        "ClaimLost",
        message,
        PreviousAttempt::Lost,
    )
}

/// The attempt ended without a result (OOMKilled, evicted, pod deleted, process vanished):
/// a crash with that reason.
pub fn on_ended_without_result(task: &TaskContext, reason: &str) -> Decision {
    crashed(task, bounded(reason.trim()))
}

fn base(outcome: AttemptOutcome, phase: PhaseChange, event: Event) -> Decision {
    Decision {
        outcome,
        phase,
        verify_first: false,
        retry: None,
        event,
        feature: FeatureEffect::None,
        promise_complete: false,
        agent_exhausted: None,
        previous_attempt: None,
    }
}

fn normal(reason: &'static str, message: String) -> Event {
    Event {
        kind: EventKind::Normal,
        reason,
        message,
    }
}

fn warning(reason: &'static str, message: String) -> Event {
    Event {
        kind: EventKind::Warning,
        reason,
        message,
    }
}

fn done(task: &TaskContext) -> Decision {
    if task.verify {
        let event = normal(
            "TaskVerifying",
            format!(
                "task {} reported done; a verification attempt checks the work",
                task.name
            ),
        );
        Decision {
            verify_first: true,
            ..base(AttemptOutcome::Done, PhaseChange::Pending, event)
        }
    } else {
        let event = normal("TaskDone", format!("task {} done", task.name));
        base(AttemptOutcome::Done, PhaseChange::Done, event)
    }
}

fn verified(task: &TaskContext) -> Decision {
    let event = normal(
        "TaskVerified",
        format!("task {} verified and done", task.name),
    );
    base(AttemptOutcome::Done, PhaseChange::Done, event)
}

fn failed(task: &TaskContext, sigils: &Sigils) -> Decision {
    let reason = sigils.task_failed_reason.clone();
    let message = match &reason {
        Some(reason) => format!("task {} reported failure: {reason}", task.name),
        None => format!("task {} reported failure", task.name),
    };
    retry_or_fail(
        task,
        AttemptOutcome::Failed,
        "TaskFailed",
        message,
        PreviousAttempt::Failed { reason },
    )
}

fn crashed(task: &TaskContext, summary: String) -> Decision {
    let message = format!("task {}: agent crashed: {summary}", task.name);
    retry_or_fail(
        task,
        AttemptOutcome::Crashed,
        "AttemptCrashed",
        message,
        PreviousAttempt::Crashed { summary },
    )
}

/// Counts a retry while retries remain, otherwise fails the task.
pub(super) fn retry_or_fail(
    task: &TaskContext,
    outcome: AttemptOutcome,
    reason: &'static str,
    message: String,
    previous: PreviousAttempt,
) -> Decision {
    if task.retry_count < task.max_retries {
        let retry = task.retry_count + 1;
        let message = format!("{message}; retry {retry} of {}", task.max_retries);
        Decision {
            retry: Some(retry),
            previous_attempt: Some(previous),
            ..base(outcome, PhaseChange::Pending, warning(reason, message))
        }
    } else {
        let message = format!("{message}; no retries left ({} used)", task.retry_count);
        base(outcome, PhaseChange::Failed, warning(reason, message))
    }
}

fn refused(task: &TaskContext) -> Decision {
    let message = format!("task {}: the agent refused; task failed", task.name);
    base(
        AttemptOutcome::Failed,
        PhaseChange::Failed,
        warning("TaskRefused", message),
    )
}

fn other_task(task: &TaskContext, other: &str) -> Decision {
    let message = format!(
        "task {}: the agent reported a sigil for task {other}; ignored, claim released",
        task.name
    );
    base(
        AttemptOutcome::Released,
        PhaseChange::Unchanged,
        warning("SigilForOtherTask", message),
    )
}

fn no_sigil(task: &TaskContext) -> Decision {
    let message = format!(
        "task {}: the agent ended its turn without a sigil; claim released",
        task.name
    );
    base(
        AttemptOutcome::Released,
        PhaseChange::Pending,
        normal("NoSigil", message),
    )
}

fn conflicting(task: &TaskContext) -> Decision {
    let message = format!(
        "task {}: the agent's final answer holds both task-done and task-failed; \
         no verdict, claim released",
        task.name
    );
    Decision {
        event: warning("ConflictingSigils", message),
        ..no_sigil(task)
    }
}

fn stop_feature(task: &TaskContext, sigils: &Sigils) -> Decision {
    let reason = sigils.promise_reason.clone().unwrap_or_else(|| {
        format!(
            "the agent on task {} promised FAILURE without a reason",
            task.name
        )
    });
    let message = format!(
        "task {}: the agent promised FAILURE; feature stopped: {reason}",
        task.name
    );
    Decision {
        feature: FeatureEffect::Stop { reason },
        ..base(
            AttemptOutcome::StoppedFeature,
            PhaseChange::Unchanged,
            warning("FeatureFailurePromised", message),
        )
    }
}

fn stopped_early(task: &TaskContext, stop: Option<&StopReason>) -> Decision {
    let stop = match stop {
        Some(stop) => stop.as_str(),
        None => "none",
    };
    let message = format!(
        "task {}: the turn stopped early (stop reason {stop}); claim released",
        task.name
    );
    base(
        AttemptOutcome::StoppedEarly,
        PhaseChange::Pending,
        warning("AttemptStoppedEarly", message),
    )
}

/// The gateway refused a model call because the budget was spent: the task goes back to
/// Pending without a retry counted; the budget gate keeps new attempts from starting.
fn limit_reached(task: &TaskContext, result: &AttemptResult) -> Decision {
    let why = result
        .budget_refusal
        .as_deref()
        .unwrap_or("the budget is spent");
    let message = format!(
        "task {}: the model gateway refused a model call: {}; claim released",
        task.name,
        bounded(why)
    );
    base(
        AttemptOutcome::LimitReached,
        PhaseChange::Pending,
        normal("AttemptBudgetSpent", message),
    )
}

fn interrupted(task: &TaskContext) -> Decision {
    let message = format!("task {}: attempt cancelled", task.name);
    base(
        AttemptOutcome::Interrupted,
        PhaseChange::Pending,
        normal("AttemptInterrupted", message),
    )
}

fn misconfigured(task: &TaskContext, result: &AttemptResult) -> Decision {
    let reason = match &result.misconfiguration {
        Some(m) => bounded(&format!("{} Fix: {}", m.problem.trim(), m.fix.trim())),
        None => "the agent cannot run as configured".to_owned(),
    };
    let message = format!(
        "task {}: the agent cannot run as configured; no new attempts until it is fixed: {reason}",
        task.name
    );
    Decision {
        feature: FeatureEffect::Halt { reason },
        ..base(
            AttemptOutcome::Misconfigured,
            PhaseChange::Pending,
            warning("AgentMisconfigured", message),
        )
    }
}

fn exhausted(task: &TaskContext, result: &AttemptResult) -> Decision {
    let (message, until) = match &result.exhaustion {
        Some(exhaustion) => (bounded(&exhaustion.message), exhaustion.reset_at),
        None => ("usage limit reached".to_owned(), None),
    };
    let event = warning(
        "AgentExhausted",
        format!(
            "task {}: the agent is out of quota ({message}); task not failed",
            task.name
        ),
    );
    Decision {
        agent_exhausted: Some(AgentExhausted { until, message }),
        ..base(AttemptOutcome::Exhausted, PhaseChange::Pending, event)
    }
}

/// The runner's crash summary, or one built from the exit code and signal.
fn crash_summary(result: &AttemptResult) -> String {
    if let Some(crash) = result
        .crash
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        return bounded(crash);
    }
    match (result.exit_code, result.signal) {
        (_, Some(signal)) => format!("killed by signal {signal}"),
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => "the agent ended without a result".to_owned(),
    }
}

/// Cuts text to [`MAX_SUMMARY_CHARS`] characters, marking the cut.
fn bounded(text: &str) -> String {
    cut_chars(text, MAX_SUMMARY_CHARS)
}

/// `text` cut to `max_chars` characters, the cut marked with `…`.
pub fn cut_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
