//! Driving one attempt: spawn the agent, run the ACP conversation under supervision,
//! shut the agent down, and classify what happened.

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::client::{self, ClientContext};
use super::config::RunnerConfig;
use super::error::RunnerError;
use super::events::now_ms;
use super::outcome::{Observations, TurnEnd, classify, exhaustion_in_error};
use super::patterns::Patterns;
use super::permission::PermissionPolicy;
use super::process::{AgentProcess, exit_fields};
use super::stderr::{self, FirstLine, StderrAlarm};
use super::supervise::{Supervised, Supervision, supervise};
use super::transport::agent_lines;
use super::turn::TurnState;
use super::workspace::Workspace;
use crate::engine::attempt::{AttemptResult, OutcomeClass, RESULT_SCHEMA_VERSION, Timings, Usage};
use crate::engine::sigils::Sigils;

/// Longest wait for the stderr watcher after the agent's group is gone.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

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
    let workspace_env = workspace.root().display().to_string();
    let mut env = vec![
        ("RALPH_TASK", config.task.as_str()),
        ("RALPH_WORKSPACE", workspace_env.as_str()),
    ];
    if let Some(attempt) = &config.attempt {
        env.push(("RALPH_ATTEMPT", attempt.as_str()));
    }
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
    let first_stderr_line = FirstLine::default();
    let (alarm_tx, mut alarms) = mpsc::unbounded_channel();
    let stderr_task = tokio::spawn(stderr::watch(
        pipes.stderr,
        patterns.clone(),
        config.relay_stderr,
        first_stderr_line.clone(),
        alarm_tx,
    ));
    let (session_tx, session_rx) = oneshot::channel();
    let mut conversation = Box::pin(client::drive(
        ClientContext {
            prompt: config.prompt.clone(),
            workspace,
            policy,
            turn: turn.clone(),
            events: events.clone(),
            started,
            advertise_fs: config.client_fs.advertise(&config.agent_command),
        },
        agent_lines(pipes.stdin, pipes.stdout, activity.clone()),
        session_tx,
    ));
    let supervision = Supervision {
        agent: &mut agent,
        activity: &activity,
        turn: &turn,
        events: &events,
        alarms: &mut alarms,
        idle_timeout: config.idle_timeout,
        total_deadline: tokio::time::Instant::from_std(started + config.total_timeout),
        total_timeout: config.total_timeout,
        grace: config.grace,
        cancel: &cancel,
    };
    let supervised = supervise(conversation.as_mut(), session_rx, supervision).await;
    events.emit("stop", json!({"turn": turn_summary(&supervised.turn_end)}));

    // Dropping the conversation closes the agent's stdin: the agent may now exit.
    drop(conversation);
    let exited_before = agent.has_exited();
    let status = agent.shut_down(config.grace).await;
    if !exited_before && let Some(status) = status {
        events.emit("exited", exit_fields(status));
    }
    if tokio::time::timeout(STDERR_DRAIN, stderr_task)
        .await
        .is_err()
    {
        tracing::warn!("the agent's stderr stayed open after its process group was killed");
    }
    let mut late_exhaustion = None;
    while let Ok(alarm) = alarms.try_recv() {
        if let StderrAlarm::Exhausted { found, .. } = alarm {
            late_exhaustion.get_or_insert(found);
        }
    }

    let Supervised {
        turn_end,
        interruption,
        exhaustion,
    } = supervised;
    let mut turn = lock(&turn);
    let now_unix = now_ms() / 1000;
    let exhaustion = exhaustion
        .or(late_exhaustion)
        .or_else(|| match &turn_end {
            TurnEnd::Failed { message, data, .. } => {
                exhaustion_in_error(message, data.as_ref(), &patterns, now_unix)
            }
            _ => None,
        })
        .or_else(|| patterns.exhaustion_in_message(turn.text_head(), now_unix));
    let observations = Observations {
        turn: turn_end,
        interruption,
        exit_code: status.and_then(|status| status.code()),
        signal: status.and_then(|status| status.signal()),
        first_stderr_line: lock(&first_stderr_line).clone(),
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
        misconfiguration: None,
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
        misconfiguration: None,
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
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
