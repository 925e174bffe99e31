//! The supervision loop of one attempt: waits for the prompt turn while watching the
//! stderr alarms, the idle and total timeouts and the cancellation token, and stops the
//! agent (`session/cancel`, grace, kill) when one of them fires.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use agent_client_protocol::v1::schema::CancelNotification;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::client::SessionHandle;
use super::events::EventLog;
use super::outcome::{Interruption, TurnEnd};
use super::process::{AgentProcess, exit_fields};
use super::stderr::StderrAlarm;
use super::turn::{Phase, TurnState};
use crate::engine::attempt::Exhaustion;
use crate::sync::lock;

/// How long after killing the agent's process group the runner stops waiting for its
/// output to close (a descendant that left the group may hold it open).
const ABANDON_AFTER_KILL: Duration = Duration::from_secs(5);

/// What the supervisor watches and acts on.
pub struct Supervision<'a> {
    /// The agent process.
    pub agent: &'a mut AgentProcess,
    /// The agent's ACP traffic.
    pub activity: &'a Activity,
    /// The conversation state (for its phase).
    pub turn: &'a Mutex<TurnState>,
    /// The event log.
    pub events: &'a EventLog,
    /// Alarms from the stderr watcher.
    pub alarms: &'a mut mpsc::UnboundedReceiver<StderrAlarm>,
    /// Lines on the agent's stdout that are not JSON-RPC.
    pub noise: &'a mut mpsc::UnboundedReceiver<String>,
    /// No traffic for this long is a hang.
    pub idle_timeout: Duration,
    /// When the attempt must end.
    pub total_deadline: Instant,
    /// The attempt's total timeout (for the report).
    pub total_timeout: Duration,
    /// Time between `session/cancel` and the kill.
    pub grace: Duration,
    /// Cancels the attempt.
    pub cancel: &'a CancellationToken,
}

/// What the supervision saw.
pub struct Supervised {
    /// How the turn ended.
    pub turn_end: TurnEnd,
    /// Why the runner stopped the agent, if it did.
    pub interruption: Option<Interruption>,
    /// A usage-limit report on stderr.
    pub exhaustion: Option<Exhaustion>,
}

struct Limits<'a> {
    idle_timeout: Duration,
    total_deadline: Instant,
    total_timeout: Duration,
    grace: Duration,
    cancel: &'a CancellationToken,
}

/// The next step of stopping an agent once its deadline passes.
#[derive(Clone, Copy)]
enum Escalation {
    /// Kill the process group (the grace period is over).
    Kill,
    /// Stop waiting for the conversation to end.
    Abandon,
}

/// Drives `conversation` to its end under supervision; `session_rx` delivers the
/// session once it exists (for `session/cancel`).
pub async fn supervise(
    mut conversation: Pin<&mut impl Future<Output = TurnEnd>>,
    mut session_rx: oneshot::Receiver<SessionHandle>,
    supervision: Supervision<'_>,
) -> Supervised {
    let Supervision {
        agent,
        activity,
        turn,
        events,
        alarms,
        noise,
        ..
    } = supervision;
    let limits = Limits {
        idle_timeout: supervision.idle_timeout,
        total_deadline: supervision.total_deadline,
        total_timeout: supervision.total_timeout,
        grace: supervision.grace,
        cancel: supervision.cancel,
    };
    let mut session: Option<SessionHandle> = None;
    let mut session_pending = true;
    let mut interruption = None;
    let mut exhaustion: Option<Exhaustion> = None;
    let mut escalation: Option<(Instant, Escalation)> = None;
    let mut agent_exited = false;
    let stop = |reason: &str, session: Option<&SessionHandle>, agent: &AgentProcess| {
        begin_stop(events, reason, session, agent, limits.grace)
    };
    let turn_end = loop {
        let idle_deadline = Instant::from_std(activity.last_traffic() + limits.idle_timeout);
        let stopping = interruption.is_some();
        let (escalation_at, next_step) =
            escalation.unwrap_or((limits.total_deadline, Escalation::Kill));
        tokio::select! {
            turn_end = &mut conversation => break turn_end,
            handle = &mut session_rx, if session_pending => {
                session_pending = false;
                session = handle.ok();
            }
            Some(alarm) = alarms.recv(), if !stopping => match alarm {
                StderrAlarm::Crash { pattern, line } => {
                    events.emit("crash_pattern", json!({"pattern": pattern, "line": line}));
                    agent.kill_group();
                    interruption = Some(Interruption::CrashPattern { pattern, line });
                    escalation = Some(abandon_later());
                }
                StderrAlarm::Exhausted { found, definite } => {
                    events.emit("exhausted", json!({"message": found.message, "resetAt": found.reset_at}));
                    exhaustion.get_or_insert(found);
                    if definite {
                        agent.kill_group();
                        escalation = Some(abandon_later());
                    }
                }
            },
            Some(line) = noise.recv() => {
                events.emit("stdout_noise", json!({"line": line}));
                if !stopping && not_acp_yet(turn) {
                    agent.kill_group();
                    interruption = Some(Interruption::NotAcp { line });
                    escalation = Some(abandon_later());
                }
            }
            status = agent.wait(), if !agent_exited => {
                agent_exited = true;
                if let Ok(status) = status {
                    events.emit("exited", exit_fields(status));
                }
            }
            () = limits.cancel.cancelled(), if !stopping => {
                interruption = Some(Interruption::Cancelled);
                escalation = Some(stop("cancelled", session.as_ref(), agent));
            }
            () = sleep_until(idle_deadline), if !stopping => {
                if activity.last_traffic() + limits.idle_timeout <= std::time::Instant::now() {
                    interruption = Some(Interruption::IdleTimeout(limits.idle_timeout));
                    escalation = Some(stop("idle_timeout", session.as_ref(), agent));
                }
            }
            () = sleep_until(limits.total_deadline), if !stopping => {
                interruption = Some(Interruption::TotalTimeout(limits.total_timeout));
                escalation = Some(stop("total_timeout", session.as_ref(), agent));
            }
            () = sleep_until(escalation_at), if escalation.is_some() => match next_step {
                Escalation::Kill => {
                    events.emit("killed", json!({"reason": "grace period over"}));
                    agent.kill_group();
                    escalation = Some(abandon_later());
                }
                Escalation::Abandon => {
                    break TurnEnd::Unanswered {
                        phase: phase(turn),
                        detail: "the agent's output stayed open after its process group was killed".into(),
                    };
                }
            },
        }
    };
    Supervised {
        turn_end,
        interruption,
        exhaustion,
    }
}

fn phase(turn: &Mutex<TurnState>) -> Phase {
    lock(turn).phase
}

/// Whether a line that is not JSON-RPC now means the agent does not speak ACP: it came
/// before the agent answered `initialize`.
pub fn not_acp_yet(turn: &Mutex<TurnState>) -> bool {
    phase(turn) == Phase::Starting
}

fn abandon_later() -> (Instant, Escalation) {
    (Instant::now() + ABANDON_AFTER_KILL, Escalation::Abandon)
}

/// Sends `session/cancel` when there is a session (otherwise kills at once); returns
/// the next escalation.
fn begin_stop(
    events: &EventLog,
    reason: &str,
    session: Option<&SessionHandle>,
    agent: &AgentProcess,
    grace: Duration,
) -> (Instant, Escalation) {
    let sent = session.is_some_and(|(cx, session_id)| {
        cx.send_notification(CancelNotification::new(session_id.clone()))
            .is_ok()
    });
    events.emit(
        "stopping",
        json!({"reason": reason, "sessionCancelSent": sent, "graceMs": u64::try_from(grace.as_millis()).unwrap_or(u64::MAX)}),
    );
    if sent {
        (Instant::now() + grace, Escalation::Kill)
    } else {
        agent.kill_group();
        abandon_later()
    }
}
