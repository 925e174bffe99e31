//! Driving one attempt: spawn the agent, run the ACP conversation, watch stderr, the
//! timeouts and the cancellation token, stop the agent, and classify what happened.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::CancelNotification;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::{mpsc, oneshot};
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::client::{self, ClientContext, SessionHandle};
use super::config::RunnerConfig;
use super::error::RunnerError;
use super::events::{EventLog, now_ms};
use super::outcome::{Interruption, Observations, TurnEnd, classify, exhaustion_in_error};
use super::patterns::Patterns;
use super::permission::PermissionPolicy;
use super::process::AgentProcess;
use super::transport::agent_lines;
use super::turn::TurnState;
use super::workspace::Workspace;
use crate::engine::attempt::{
    AttemptResult, Exhaustion, OutcomeClass, RESULT_SCHEMA_VERSION, Timings, Usage,
};
use crate::engine::sigils::Sigils;

/// How long after killing the agent's process group the runner stops waiting for its
/// output to close (a descendant that left the group may hold it open).
const ABANDON_AFTER_KILL: Duration = Duration::from_secs(5);

/// What the stderr watcher reports to the supervisor.
enum StderrAlarm {
    Crash { pattern: String, line: String },
    Exhausted { found: Exhaustion, definite: bool },
}

/// The next step of stopping an agent once its deadline passes.
#[derive(Clone, Copy)]
enum Escalation {
    /// Kill the process group (the grace period is over).
    Kill,
    /// Stop waiting for the conversation to end.
    Abandon,
}

/// Stderr facts collected for the result.
#[derive(Default)]
struct StderrFacts {
    first_line: Option<String>,
}

/// Runs one attempt to its end and reports it. Cancelling `cancel` sends
/// `session/cancel`, waits the grace period, then kills the agent; the attempt is then
/// `cancelled`.
pub async fn run_attempt(
    config: RunnerConfig,
    cancel: CancellationToken,
) -> Result<AttemptResult, RunnerError> {
    let started = Instant::now();
    let started_at_ms = now_ms();
    let patterns = Patterns::new(&config.crash_patterns, &config.exhaustion_patterns)?;
    let policy = PermissionPolicy::new(&config.deny)?;
    let workspace = Workspace::new(&config.workspace).map_err(|source| RunnerError::Workspace {
        path: config.workspace.clone(),
        source,
    })?;
    let events = config.events.clone();
    let attempt_env = config.attempt.clone().unwrap_or_default();
    let workspace_env = workspace.root().display().to_string();
    let env = [
        ("RALPH_TASK", config.task.as_str()),
        ("RALPH_ATTEMPT", attempt_env.as_str()),
        ("RALPH_WORKSPACE", workspace_env.as_str()),
    ];
    let (mut agent, pipes) =
        match AgentProcess::spawn(&config.agent_command, workspace.root(), &env) {
            Ok(spawned) => spawned,
            // An agent that cannot start is the attempt's crash, not a runner usage error.
            Err(error @ RunnerError::Spawn { .. }) => {
                events.emit("spawn_failed", json!({"error": error.to_string()}));
                return Ok(not_started(config, started_at_ms, error.to_string()));
            }
            Err(error) => return Err(error),
        };
    events.emit(
        "spawned",
        json!({"pid": agent.pid(), "command": config.agent_command, "task": config.task, "attempt": config.attempt}),
    );

    let activity = Arc::new(Activity::new(config.heartbeat_file.clone()));
    let turn = Arc::new(Mutex::new(TurnState::default()));
    let stderr_facts = Arc::new(Mutex::new(StderrFacts::default()));
    let (alarm_tx, mut alarm_rx) = mpsc::unbounded_channel();
    let stderr_task = tokio::spawn(watch_stderr(
        pipes.stderr,
        patterns.clone(),
        config.relay_stderr,
        stderr_facts.clone(),
        alarm_tx,
    ));

    let (session_tx, mut session_rx) = oneshot::channel::<SessionHandle>();
    let mut conversation = Box::pin(client::drive(
        ClientContext {
            prompt: config.prompt.clone(),
            workspace,
            policy,
            turn: turn.clone(),
            events: events.clone(),
            started,
        },
        agent_lines(pipes.stdin, pipes.stdout, activity.clone()),
        session_tx,
    ));

    let total_deadline = tokio::time::Instant::from_std(started + config.total_timeout);
    let mut session: Option<SessionHandle> = None;
    let mut session_pending = true;
    let mut interruption: Option<Interruption> = None;
    let mut exhaustion: Option<Exhaustion> = None;
    let mut escalation: Option<(tokio::time::Instant, Escalation)> = None;
    let mut agent_exited = false;

    let turn_end = loop {
        let idle_deadline =
            tokio::time::Instant::from_std(activity.last_traffic() + config.idle_timeout);
        let stopping = interruption.is_some();
        let (escalation_at, next_step) = escalation.unwrap_or((total_deadline, Escalation::Kill));
        tokio::select! {
            turn_end = &mut conversation => break turn_end,
            handle = &mut session_rx, if session_pending => {
                session_pending = false;
                session = handle.ok();
            }
            Some(alarm) = alarm_rx.recv(), if !stopping => match alarm {
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
            status = agent.wait(), if !agent_exited => {
                agent_exited = true;
                if let Ok(status) = status {
                    events.emit("exited", exit_fields(status));
                }
            }
            () = cancel.cancelled(), if !stopping => {
                interruption = Some(Interruption::Cancelled);
                escalation = Some(begin_stop(&events, "cancelled", session.as_ref(), &agent, config.grace));
            }
            () = sleep_until(idle_deadline), if !stopping => {
                if activity.last_traffic() + config.idle_timeout <= Instant::now() {
                    interruption = Some(Interruption::IdleTimeout(config.idle_timeout));
                    escalation = Some(begin_stop(&events, "idle_timeout", session.as_ref(), &agent, config.grace));
                }
            }
            () = sleep_until(total_deadline), if !stopping => {
                interruption = Some(Interruption::TotalTimeout(config.total_timeout));
                escalation = Some(begin_stop(&events, "total_timeout", session.as_ref(), &agent, config.grace));
            }
            () = sleep_until(escalation_at), if escalation.is_some() => match next_step {
                Escalation::Kill => {
                    events.emit("killed", json!({"reason": "grace period over"}));
                    agent.kill_group();
                    escalation = Some(abandon_later());
                }
                Escalation::Abandon => {
                    break TurnEnd::Unanswered {
                        phase: lock(&turn).phase,
                        detail: "the agent's output stayed open after its process group was killed".into(),
                    };
                }
            },
        }
    };
    events.emit("stop", json!({"turn": turn_summary(&turn_end)}));

    // Let the agent exit on its own (its stdin is closed now), then make sure the whole
    // group is gone.
    drop(conversation);
    drop(session);
    if !agent_exited
        && tokio::time::timeout(config.grace, agent.wait())
            .await
            .is_err()
    {
        agent.kill_group();
    }
    let status = match agent.exit_status() {
        Some(status) => Some(status),
        None => agent.wait().await.ok(),
    };
    agent.kill_group();
    if !agent_exited && let Some(status) = status {
        events.emit("exited", exit_fields(status));
    }
    // The watcher ends when every holder of the agent's stderr is gone.
    if tokio::time::timeout(Duration::from_secs(1), stderr_task)
        .await
        .is_err()
    {
        tracing::warn!("the agent's stderr stayed open after its process group was killed");
    }
    while let Ok(alarm) = alarm_rx.try_recv() {
        if let StderrAlarm::Exhausted { found, .. } = alarm {
            exhaustion.get_or_insert(found);
        }
    }

    let now_unix = now_ms() / 1000;
    let mut turn = lock(&turn);
    if exhaustion.is_none() {
        exhaustion = match &turn_end {
            TurnEnd::Failed { message, data, .. } => {
                exhaustion_in_error(message, data.as_ref(), &patterns, now_unix)
            }
            _ => None,
        }
        .or_else(|| patterns.exhaustion_in_message(turn.text_head(), now_unix));
    }
    let first_stderr_line = match stderr_facts.lock() {
        Ok(facts) => facts.first_line.clone(),
        Err(poisoned) => poisoned.into_inner().first_line.clone(),
    };
    let observations = Observations {
        turn: turn_end,
        interruption,
        exit_code: status.and_then(|status| status.code()),
        signal: status.and_then(|status| status.signal()),
        first_stderr_line,
        exhaustion,
        updates_in_turn: turn.updates_in_turn,
        sigils: turn.take_sigils(),
    };
    let verdict = classify(&observations);
    Ok(AttemptResult {
        version: RESULT_SCHEMA_VERSION,
        task: config.task,
        attempt: config.attempt,
        outcome: verdict.outcome,
        stop_reason: verdict.stop_reason,
        exit_code: observations.exit_code,
        signal: observations.signal,
        sigils: observations.sigils,
        crash: verdict.crash,
        exhaustion: observations.exhaustion,
        agent: turn.agent.clone(),
        model: turn.model.clone(),
        usage: turn.usage.clone(),
        timings: Timings {
            started_at_ms,
            ended_at_ms: now_ms(),
            initialize_ms: turn.initialize_ms,
        },
        truncated: Vec::new(),
    })
}

/// The result of an attempt whose agent could not be started.
fn not_started(config: RunnerConfig, started_at_ms: i64, crash: String) -> AttemptResult {
    AttemptResult {
        version: RESULT_SCHEMA_VERSION,
        task: config.task,
        attempt: config.attempt,
        outcome: OutcomeClass::Crashed,
        stop_reason: None,
        exit_code: None,
        signal: None,
        sigils: Sigils::default(),
        crash: Some(crash),
        exhaustion: None,
        agent: None,
        model: None,
        usage: Usage::default(),
        timings: Timings {
            started_at_ms,
            ended_at_ms: now_ms(),
            initialize_ms: None,
        },
        truncated: Vec::new(),
    }
}

fn abandon_later() -> (tokio::time::Instant, Escalation) {
    (
        tokio::time::Instant::now() + ABANDON_AFTER_KILL,
        Escalation::Abandon,
    )
}

/// Sends `session/cancel` when there is a session (otherwise kills at once); returns
/// the next escalation.
fn begin_stop(
    events: &EventLog,
    reason: &str,
    session: Option<&SessionHandle>,
    agent: &AgentProcess,
    grace: Duration,
) -> (tokio::time::Instant, Escalation) {
    let now = tokio::time::Instant::now();
    let sent = session.is_some_and(|(cx, session_id)| {
        cx.send_notification(CancelNotification::new(session_id.clone()))
            .is_ok()
    });
    events.emit(
        "stopping",
        json!({"reason": reason, "sessionCancelSent": sent, "graceMs": grace.as_millis() as u64}),
    );
    if sent {
        (now + grace, Escalation::Kill)
    } else {
        agent.kill_group();
        abandon_later()
    }
}

async fn watch_stderr(
    stderr: ChildStderr,
    patterns: Patterns,
    relay: bool,
    facts: Arc<Mutex<StderrFacts>>,
    alarms: mpsc::UnboundedSender<StderrAlarm>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if relay {
            // A closed runner stderr must not stop the watch.
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        if !line.trim().is_empty() {
            let mut facts = match facts.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            facts.first_line.get_or_insert_with(|| line.clone());
        }
        if let Some(pattern) = patterns.crash_in(&line) {
            let _ = alarms.send(StderrAlarm::Crash {
                pattern: pattern.to_string(),
                line: line.clone(),
            });
        } else if let Some(found) = patterns.exhaustion_in_diagnostic(&line, now_ms() / 1000) {
            let definite = patterns.is_definite_exhaustion(&line);
            let _ = alarms.send(StderrAlarm::Exhausted { found, definite });
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn exit_fields(status: std::process::ExitStatus) -> serde_json::Value {
    json!({"code": status.code(), "signal": status.signal()})
}

fn turn_summary(turn_end: &TurnEnd) -> serde_json::Value {
    match turn_end {
        TurnEnd::Answered { stop_reason } => json!({"stopReason": stop_reason}),
        TurnEnd::Failed {
            code,
            message,
            data,
        } => {
            json!({"error": {"code": code, "message": message, "data": data}})
        }
        TurnEnd::Unanswered { phase, detail } => {
            json!({"unanswered": phase.describe(), "detail": detail})
        }
    }
}
