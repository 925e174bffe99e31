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
use super::config::Timeouts;
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
pub(super) struct Supervision<'a> {
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
    /// The attempt's timeouts: idle (a hang), total, grace (between `session/cancel` and
    /// the kill).
    pub timeouts: Timeouts,
    /// When the attempt must end.
    pub total_deadline: Instant,
    /// Cancels the attempt.
    pub cancel: &'a CancellationToken,
}

/// What the supervision saw.
pub(super) struct Supervised {
    /// How the turn ended.
    pub turn_end: TurnEnd,
    /// Why the runner stopped the agent, if it did.
    pub interruption: Option<Interruption>,
    /// A usage-limit report on stderr.
    pub exhaustion: Option<Exhaustion>,
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
pub(super) async fn supervise(
    mut conversation: Pin<&mut impl Future<Output = TurnEnd>>,
    mut session_rx: oneshot::Receiver<SessionHandle>,
    supervision: Supervision<'_>,
) -> Supervised {
    let mut watch = Watch {
        watched: supervision,
        session: None,
        interruption: None,
        exhaustion: None,
        escalation: None,
    };
    let mut session_pending = true;
    let mut agent_exited = false;
    let turn_end = loop {
        let stopping = watch.interruption.is_some();
        let idle_deadline = watch.idle_deadline();
        let total_deadline = watch.watched.total_deadline;
        let (escalation_at, next_step) = watch
            .escalation
            .unwrap_or((total_deadline, Escalation::Kill));
        let watched = &mut watch.watched;
        tokio::select! {
            turn_end = &mut conversation => break turn_end,
            handle = &mut session_rx, if session_pending => {
                session_pending = false;
                watch.session = handle.ok();
            }
            Some(alarm) = watched.alarms.recv(), if !stopping => watch.stderr_alarm(alarm),
            Some(line) = watched.noise.recv() => watch.stdout_noise(line),
            status = watched.agent.wait(), if !agent_exited => {
                agent_exited = true;
                watch.exited(status);
            }
            () = watched.cancel.cancelled(), if !stopping => {
                watch.stop(Interruption::Cancelled, "cancelled");
            }
            () = sleep_until(idle_deadline), if !stopping => watch.idle_deadline_passed(),
            () = sleep_until(total_deadline), if !stopping => {
                let timeout = watch.watched.timeouts.total;
                watch.stop(Interruption::TotalTimeout(timeout), "total_timeout");
            }
            () = sleep_until(escalation_at), if watch.escalation.is_some() => {
                if let Some(turn_end) = watch.escalate(next_step) {
                    break turn_end;
                }
            }
        }
    };
    Supervised {
        turn_end,
        interruption: watch.interruption,
        exhaustion: watch.exhaustion,
    }
}

/// What the supervision watches, what it has seen and done so far, and how it acts on
/// the agent.
struct Watch<'a> {
    watched: Supervision<'a>,
    session: Option<SessionHandle>,
    interruption: Option<Interruption>,
    exhaustion: Option<Exhaustion>,
    escalation: Option<(Instant, Escalation)>,
}

impl Watch<'_> {
    /// When the agent counts as hung unless it sends ACP traffic before.
    fn idle_deadline(&self) -> Instant {
        Instant::from_std(self.watched.activity.last_traffic() + self.watched.timeouts.idle)
    }

    /// The idle deadline seen at the start of the wait passed: the agent is stopped when it
    /// sent nothing since.
    fn idle_deadline_passed(&mut self) {
        let watched = &self.watched;
        if watched.activity.last_traffic() + watched.timeouts.idle <= std::time::Instant::now() {
            let timeout = self.watched.timeouts.idle;
            self.stop(Interruption::IdleTimeout(timeout), "idle_timeout");
        }
    }

    /// The agent process exited (the conversation may still be ending).
    fn exited(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        if let Ok(status) = status {
            self.watched.events.emit("exited", exit_fields(status));
        }
    }

    /// A crash pattern kills the agent; a usage-limit report is kept, and a definite one
    /// kills the agent too.
    fn stderr_alarm(&mut self, alarm: StderrAlarm) {
        match alarm {
            StderrAlarm::Crash { pattern, line } => {
                self.watched
                    .events
                    .emit("crash_pattern", json!({"pattern": pattern, "line": line}));
                self.interruption = Some(Interruption::CrashPattern { pattern, line });
                self.kill();
            }
            StderrAlarm::Exhausted { found, definite } => {
                self.watched.events.emit(
                    "exhausted",
                    json!({"message": found.message, "resetAt": found.reset_at}),
                );
                self.exhaustion.get_or_insert(found);
                if definite {
                    self.kill();
                }
            }
        }
    }

    /// A stdout line that is not JSON-RPC is logged; before `initialize` is answered it
    /// means the agent does not speak ACP, and it is killed.
    fn stdout_noise(&mut self, line: String) {
        self.watched
            .events
            .emit("stdout_noise", json!({"line": line}));
        if self.interruption.is_none() && not_acp_yet(self.watched.turn) {
            self.interruption = Some(Interruption::NotAcp { line });
            self.kill();
        }
    }

    /// Kills the agent's process group at once and stops waiting for its output soon after.
    fn kill(&mut self) {
        self.watched.agent.kill_group();
        self.escalation = Some(abandon_later());
    }

    /// Stops the agent gently for `interruption`: `session/cancel`, then the kill after
    /// the grace period.
    fn stop(&mut self, interruption: Interruption, reason: &str) {
        self.interruption = Some(interruption);
        self.escalation = Some(begin_stop(
            self.watched.events,
            reason,
            self.session.as_ref(),
            self.watched.agent,
            self.watched.timeouts.grace,
        ));
    }

    /// Takes the next step of stopping once its time has come; the turn's end when the
    /// runner gives up waiting for the agent's output to close.
    fn escalate(&mut self, step: Escalation) -> Option<TurnEnd> {
        match step {
            Escalation::Kill => {
                self.watched
                    .events
                    .emit("killed", json!({"reason": "grace period over"}));
                self.kill();
                None
            }
            Escalation::Abandon => Some(TurnEnd::Unanswered {
                phase: phase(self.watched.turn),
                detail: "the agent's output stayed open after its process group was killed".into(),
            }),
        }
    }
}

fn phase(turn: &Mutex<TurnState>) -> Phase {
    lock(turn).phase
}

/// Whether a line that is not JSON-RPC now means the agent does not speak ACP: it came
/// before the agent answered `initialize`.
pub(super) fn not_acp_yet(turn: &Mutex<TurnState>) -> bool {
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
