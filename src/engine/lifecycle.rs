//! The per-task lifecycle: given a task, its claim and its run as plain values, what to do
//! next. Shared by the Kubernetes controller (claim = Lease, run = Pod) and the local mode
//! (claim = store row, run = child process), so the behaviour is tested once.
//!
//! [`decide`] never interprets an attempt's result itself: it says *how* the attempt ended
//! ([`AttemptEnd`]); [`super::conclusion::conclude`] says what that means for the task.
//!
//! Claims end with their attempt: once an attempt's conclusion is recorded, its claim is
//! *spent* ([`is_spent`]). A spent claim is no claim for anyone: nothing releases it, it
//! holds no attempt slot, and the task's next attempt takes it over at once (one write that
//! raises the fencing token) instead of waiting for it to expire.

use super::attempt::AttemptResult;
use super::dag::TaskPhase;

pub use super::outcome::AttemptEnd;

/// The identity of attempt `number` of `task`: `<task>-a<N>` (also the agent Pod's name).
pub fn attempt_id(task: &str, number: u32) -> String {
    format!("{task}-a{number}")
}

/// The attempt a task last started, as its status records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    /// Attempt number, starting at 1.
    pub number: u32,
    /// The task spec generation this attempt was spawned for.
    pub generation: i64,
}

/// Whether the task's feature lets attempts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureGate {
    /// New attempts may start.
    Open,
    /// The feature (or the controller) already runs as many attempts as it may.
    AtCapacity,
    /// The user suspended the feature: running attempts are cancelled, none start.
    Suspended,
    /// The feature stopped (an agent promised FAILURE, or a limit was reached): running
    /// attempts finish, none start.
    Stopped,
}

/// The task as the lifecycle needs to see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskView {
    /// Task name (the Task object's name in a cluster, the template name locally).
    pub name: String,
    /// Current phase.
    pub phase: TaskPhase,
    /// Whether the DAG says the task may run now.
    pub ready: bool,
    /// Current spec generation.
    pub generation: i64,
    /// Earliest time of the next attempt (retry backoff, agent exhaustion), Unix ms.
    pub next_attempt_after_ms: Option<i64>,
    /// The last attempt started, if any.
    pub attempt: Option<AttemptView>,
    /// What the feature allows.
    pub gate: FeatureGate,
}

impl TaskView {
    fn attempt_number(&self) -> u32 {
        self.attempt.as_ref().map_or(0, |a| a.number)
    }

    fn current_attempt_id(&self) -> Option<String> {
        self.attempt
            .as_ref()
            .map(|a| attempt_id(&self.name, a.number))
    }
}

/// The task's claim (a Lease, a store row), if one exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimView {
    /// The attempt identity holding the claim.
    pub holder: String,
    /// When the holder last renewed the claim, Unix ms.
    pub renewed_at_ms: i64,
    /// How long a renewal is valid, ms.
    pub duration_ms: i64,
}

impl ClaimView {
    /// When the claim expires unless renewed, Unix ms.
    pub fn expires_at_ms(&self) -> i64 {
        self.renewed_at_ms.saturating_add(self.duration_ms)
    }

    /// True once the claim was not renewed in time.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_at_ms()
    }
}

/// True when `holder`'s claim on `task` is spent: the task is finished (Done, Failed,
/// Blocked), or `holder` is one of its attempts whose conclusion is recorded: an earlier
/// one than the last started (`attempts_started`), or the last one once the task is no
/// longer Running. The next attempt (`attempts_started + 1`, claimed and not recorded as
/// started yet) and any other holder are not spent.
pub fn is_spent(task: &str, phase: TaskPhase, attempts_started: u32, holder: &str) -> bool {
    if matches!(
        phase,
        TaskPhase::Done | TaskPhase::Failed | TaskPhase::Blocked
    ) {
        return true;
    }
    attempt_number_of(task, holder).is_some_and(|number| {
        number < attempts_started || (number == attempts_started && phase != TaskPhase::Running)
    })
}

/// True when `holder`'s claim on `task` is spent ([`is_spent`]) by an attempt the task
/// records as started (numbered at most `attempts_started`): nothing reads that claim again
/// until the task's next claim takes it over. A claim made for the next attempt while the
/// task still shows as finished (a re-run not yet recorded) is not.
pub fn is_spent_by_recorded_attempt(
    task: &str,
    phase: TaskPhase,
    attempts_started: u32,
    holder: &str,
) -> bool {
    attempt_number_of(task, holder).is_some_and(|number| number <= attempts_started)
        && is_spent(task, phase, attempts_started, holder)
}

/// The attempt number `id` names, when it is one of `task`'s attempt ids ([`attempt_id`]:
/// a claim's holder, an agent Pod's name).
pub fn attempt_number_of(task: &str, id: &str) -> Option<u32> {
    let number = id.strip_prefix(task)?.strip_prefix("-a")?;
    if number.starts_with('+') || number.starts_with('0') {
        return None;
    }
    number.parse().ok().filter(|&n| n > 0)
}

/// The run (Pod, process) of the task's last attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum RunView {
    /// The attempt's run was never created.
    NotStarted,
    /// Created, its agent not started yet (scheduling, pulling images, init containers).
    /// The claim measures a running attempt: while the run waits, whoever decides keeps the
    /// claim alive ([`Action::RenewClaim`]), and past its start deadline the attempt is
    /// released without charging a retry ([`AttemptEnd::NotStarted`]).
    Pending(Waiting),
    /// Running. (Liveness is the claim's business: whoever renews it checks the runner's
    /// heartbeat.)
    Running,
    /// Finished, with the runner's result when it wrote one.
    Ended {
        /// The result document (termination message, result file).
        result: Option<Box<AttemptResult>>,
        /// Why the run ended, as its executor says (e.g. `OOMKilled`, `Evicted`, `exit code 137`).
        reason: Option<String>,
    },
    /// It was created and is gone (deleted, node lost, process vanished).
    Missing,
}

/// Why and until when a created run waits to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Why it waits, as its executor says (e.g. the scheduler's message), when it says.
    pub reason: Option<String>,
    /// When the attempt is released if its run has still not started, Unix ms.
    pub release_at_ms: Option<i64>,
}

impl RunView {
    /// A run that waits to start, with no reason given and no deadline.
    pub fn pending() -> Self {
        RunView::Pending(Waiting::default())
    }

    fn exists(&self) -> bool {
        !matches!(self, RunView::NotStarted | RunView::Missing)
    }
}

/// One step the caller carries out, in the order given. When a step fails (e.g. the claim
/// is taken by someone else first), the caller stops and decides again on the next event.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Take the claim for attempt `attempt`: create it, or replace the existing (expired or
    /// spent) claim when `replace` is set.
    Claim {
        /// The attempt number the claim is for.
        attempt: u32,
        /// Replace the existing claim (with an optimistic-concurrency precondition).
        replace: bool,
    },
    /// Record attempt `attempt` as started (phase Running) and create its run; both idempotent.
    StartAttempt {
        /// The attempt number to start.
        attempt: u32,
    },
    /// Renew the attempt's claim on its behalf: its run waits to start, so nothing in it
    /// renews the claim yet.
    RenewClaim,
    /// Stop the live run gracefully (the runner gets SIGTERM and reports `cancelled`).
    Cancel,
    /// Record how the current attempt ended and apply its conclusion to the task (which
    /// spends its claim: see [`is_spent`]).
    Ingest(AttemptEnd),
    /// Delete the attempt's run (and what belongs to it) now.
    DeleteRun,
    /// Decide again at this time (Unix ms) even if nothing changes.
    RequeueAt(i64),
}

/// What to do next for one task. `now_ms` is the current time, Unix ms.
pub fn decide(
    task: &TaskView,
    claim: Option<&ClaimView>,
    run: &RunView,
    now_ms: i64,
) -> Vec<Action> {
    match task.phase {
        TaskPhase::Running => decide_running(task, claim, run, now_ms),
        TaskPhase::Pending => decide_pending(task, claim, run, now_ms),
        TaskPhase::Done | TaskPhase::Failed | TaskPhase::Blocked => clean_up(run),
    }
}

/// A task that is not running: its last attempt's run is stopped or removed. Its claim,
/// if one is left, is spent and needs nothing.
fn clean_up(run: &RunView) -> Vec<Action> {
    match run {
        RunView::Pending(_) | RunView::Running => vec![Action::Cancel],
        RunView::Ended { .. } => vec![Action::DeleteRun],
        RunView::NotStarted | RunView::Missing => Vec::new(),
    }
}

fn decide_pending(
    task: &TaskView,
    claim: Option<&ClaimView>,
    run: &RunView,
    now_ms: i64,
) -> Vec<Action> {
    let mut actions = clean_up(run);
    if !task.ready || task.gate != FeatureGate::Open {
        return actions;
    }
    if let Some(after) = task.next_attempt_after_ms.filter(|&after| now_ms < after) {
        actions.push(Action::RequeueAt(after));
        return actions;
    }
    let next = task.attempt_number() + 1;
    match claim {
        // A previous decision claimed the next attempt but did not record it as started.
        Some(c) if c.holder == attempt_id(&task.name, next) && !c.is_expired(now_ms) => {
            actions.push(Action::StartAttempt { attempt: next });
        }
        // The last attempt's spent claim (or an expired one) is taken over at once.
        Some(c)
            if c.is_expired(now_ms)
                || is_spent(&task.name, task.phase, task.attempt_number(), &c.holder) =>
        {
            actions.push(Action::Claim {
                attempt: next,
                replace: true,
            });
            actions.push(Action::StartAttempt { attempt: next });
        }
        Some(c) => actions.push(Action::RequeueAt(c.expires_at_ms())),
        None => {
            actions.push(Action::Claim {
                attempt: next,
                replace: false,
            });
            actions.push(Action::StartAttempt { attempt: next });
        }
    }
    actions
}

fn decide_running(
    task: &TaskView,
    claim: Option<&ClaimView>,
    run: &RunView,
    now_ms: i64,
) -> Vec<Action> {
    let (Some(attempt), Some(own_id)) = (task.attempt.as_ref(), task.current_attempt_id()) else {
        // Running without an attempt record: nothing was started; start over.
        return vec![Action::Ingest(AttemptEnd::NoResult {
            reason: "task was running without an attempt record".to_owned(),
        })];
    };
    let ours = claim.filter(|c| c.holder == own_id);
    let Some(ours) = ours else {
        let reason = match claim {
            Some(c) => format!("claim taken over by {}", c.holder),
            None => "claim was removed".to_owned(),
        };
        return lost(run, reason);
    };

    if let RunView::Ended { result, reason } = run {
        return run_ended(
            task,
            ours,
            &own_id,
            (result.as_deref(), reason.as_deref()),
            now_ms,
        );
    }

    // A run that has not started holds its claim however long it waits: nothing ran.
    if ours.is_expired(now_ms) && !matches!(run, RunView::Pending(_)) {
        return lost(run, expired_reason(ours));
    }

    match run {
        RunView::Missing | RunView::NotStarted if task.gate == FeatureGate::Suspended => {
            vec![Action::Ingest(AttemptEnd::Interrupted {
                reason: "feature suspended".to_owned(),
            })]
        }
        RunView::Missing => vec![Action::Ingest(AttemptEnd::NoResult {
            reason: "the attempt's run disappeared".to_owned(),
        })],
        _ if task.gate == FeatureGate::Suspended => {
            vec![Action::Cancel, Action::RequeueAt(ours.expires_at_ms())]
        }
        _ if task.generation > attempt.generation => {
            let mut actions = vec![Action::Ingest(AttemptEnd::Superseded {
                from_generation: attempt.generation,
                to_generation: task.generation,
            })];
            if run.exists() {
                actions.push(Action::Cancel);
            }
            actions
        }
        RunView::NotStarted => vec![
            Action::StartAttempt {
                attempt: attempt.number,
            },
            Action::RequeueAt(ours.expires_at_ms()),
        ],
        RunView::Pending(waiting) => keep_waiting(ours, waiting, now_ms),
        _ => vec![Action::RequeueAt(ours.expires_at_ms())],
    }
}

/// The attempt's run ended (`ended`: its result and its executor's reason): its result is
/// ingested when it is this attempt's and came while the claim held; without one, it
/// ended without a result (interrupted when the feature is suspended).
fn run_ended(
    task: &TaskView,
    ours: &ClaimView,
    own_id: &str,
    ended_with: (Option<&AttemptResult>, Option<&str>),
    now_ms: i64,
) -> Vec<Action> {
    match ended_with {
        (Some(result), _) if result_is_current(result, own_id) => {
            if ended_in_time(result, ours, now_ms) {
                ended(AttemptEnd::Reported(Box::new(result.clone())))
            } else {
                // The run exists (it ended): its claim lapsed before it reported.
                vec![
                    Action::Ingest(AttemptEnd::ClaimLost {
                        reason: expired_reason(ours),
                    }),
                    Action::DeleteRun,
                ]
            }
        }
        (Some(result), _) => ended(AttemptEnd::NoResult {
            reason: format!(
                "result names attempt {} instead of {own_id}",
                result.attempt.as_deref().unwrap_or("?")
            ),
        }),
        (None, _) if task.gate == FeatureGate::Suspended => ended(AttemptEnd::Interrupted {
            reason: "feature suspended".to_owned(),
        }),
        (None, reason) => ended(AttemptEnd::NoResult {
            reason: reason.unwrap_or("ended without a result").to_owned(),
        }),
    }
}

/// A run that waits to start: released once past its deadline, else its claim renewed
/// every third of its duration.
fn keep_waiting(claim: &ClaimView, waiting: &Waiting, now_ms: i64) -> Vec<Action> {
    if let Some(deadline) = waiting.release_at_ms.filter(|at| now_ms >= *at) {
        let waited_s = (now_ms - deadline).max(0).div_euclid(1000);
        let why = waiting.reason.as_deref().unwrap_or("no reason given");
        return ended(AttemptEnd::NotStarted {
            reason: format!("its run did not start by its deadline ({why}; {waited_s} s past it)"),
        });
    }
    let every = (claim.duration_ms / 3).max(1000);
    let due = claim.renewed_at_ms.saturating_add(every);
    let mut actions = Vec::with_capacity(2);
    let next = if now_ms >= due {
        actions.push(Action::RenewClaim);
        now_ms.saturating_add(every)
    } else {
        due
    };
    let next = waiting.release_at_ms.map_or(next, |at| next.min(at));
    actions.push(Action::RequeueAt(next));
    actions
}

/// A result counts only for the attempt it names (results that name none are trusted to
/// be the current attempt's: the run only ever writes its own).
fn result_is_current(result: &AttemptResult, own_id: &str) -> bool {
    result.attempt.as_deref().is_none_or(|id| id == own_id)
}

/// True when the attempt finished while its claim was valid (or the claim is still valid).
fn ended_in_time(result: &AttemptResult, claim: &ClaimView, now_ms: i64) -> bool {
    !claim.is_expired(now_ms) || result.timings.ended_at_ms < claim.expires_at_ms()
}

fn expired_reason(claim: &ClaimView) -> String {
    format!(
        "claim not renewed within {} s",
        claim.duration_ms.div_euclid(1000)
    )
}

fn ended(end: AttemptEnd) -> Vec<Action> {
    vec![Action::Ingest(end), Action::DeleteRun]
}

fn lost(run: &RunView, reason: String) -> Vec<Action> {
    let mut actions = vec![Action::Ingest(AttemptEnd::ClaimLost { reason })];
    if run.exists() {
        actions.push(Action::DeleteRun);
    }
    actions
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
