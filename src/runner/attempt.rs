//! Driving one attempt: check the workspace, spawn the agent, run the ACP conversation
//! under supervision, shut the agent down, and classify what happened.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::client::{self, ClientContext};
use super::config::{Confinement, RunnerConfig};
use super::confine::{self, ConfineError, Layout, PrivateTemp};
use super::error::RunnerError;
use super::events::EventLog;
use super::gateway::{self, AgentGateway};
use super::mode::Wanted;
use super::outcome::{Interruption, Observations, TurnEnd, classify, exhaustion_in_error};
use super::patterns::Patterns;
use super::permission::PermissionPolicy;
use super::process::{AgentPipes, AgentProcess, exit_fields};
use super::stderr::{self, SharedDigest, StderrAlarm};
use super::supervise::{Supervised, Supervision, not_acp_yet, supervise};
use super::transport::agent_lines;
use super::turn::TurnState;
use super::workspace::{Workspace, real_path};
use crate::clock::now_ms;
use crate::engine::attempt::{
    AttemptResult, ConfinementReport, Exhaustion, LandlockState, Misconfiguration, OutcomeClass,
    RanBy, Timings,
};
use crate::sync::lock;

/// Longest wait for the stderr watcher after the agent's group is gone.
const STDERR_DRAIN: Duration = Duration::from_secs(1);
/// How long to wait for the rest of an agent's stdout when it ended before answering `initialize`.
const STDOUT_DRAIN: Duration = Duration::from_millis(500);

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
    let policy = PermissionPolicy::new(&config.deny)?.read_only(config.read_only);
    let workspace = Workspace::new(&config.workspace).map_err(|source| RunnerError::Workspace {
        path: config.workspace.clone(),
        source,
    })?;
    let gateway = match check_writable(&config, &workspace) {
        Ok(()) => gateway::open(&config).await.map_err(Start::Misconfigured),
        Err(start) => Err(start),
    };
    let started_agent = gateway.and_then(|gateway| {
        let started = start_confined(&config, &workspace, &gateway)?;
        Ok((started, gateway.local))
    });
    let (
        Started {
            agent,
            pipes,
            confinement,
            tmp,
        },
        gateway,
    ) = match started_agent {
        Ok(started) => started,
        Err(start) => return Ok(not_started(&config, started_at_ms, start)),
    };
    let AgentPipes {
        stdin,
        stdout,
        stderr,
    } = pipes;
    let mut running = Running::start(&config, agent, stderr, &patterns);
    running.landlock = matches!(
        confinement.landlock,
        LandlockState::Enforced | LandlockState::Partial
    );
    let ended = running
        .converse(
            &config,
            (stdin, stdout),
            workspace,
            policy,
            started,
            &cancel,
        )
        .await;
    let mut result = ended.report(config.clone(), &patterns, started_at_ms, confinement);
    drop(tmp);
    meter(&config, gateway, &mut result).await;
    super::check::after_done_verdict(&config, &mut result).await;
    Ok(result)
}

/// The agent, started under the attempt's confinement.
struct Started {
    agent: AgentProcess,
    pipes: AgentPipes,
    confinement: ConfinementReport,
    /// The agent's private temp directory, removed when dropped.
    tmp: Option<PrivateTemp>,
}

/// Starts the agent confined by Landlock to the attempt's grants (docs/security.md), or
/// unconfined with `confinement: Disabled`.
fn start_confined(
    config: &RunnerConfig,
    workspace: &Workspace,
    gateway: &AgentGateway,
) -> Result<Started, Start> {
    if config.confinement == Confinement::Disabled {
        let (agent, pipes) = spawn(config, workspace, &[], gateway)?;
        let confinement = ConfinementReport {
            landlock: LandlockState::Disabled,
            abi: None,
            problems: vec![
                "confinement is disabled: only the permission answers guard the agent".into(),
            ],
        };
        return Ok(Started {
            agent,
            pipes,
            confinement,
            tmp: None,
        });
    }
    let tmp = PrivateTemp::create().map_err(|error| {
        Start::Crashed(format!("cannot create the agent's temp directory: {error}"))
    })?;
    let layout = Layout {
        workspace: workspace.root().to_path_buf(),
        read_only: config.read_only,
        home: agent_home(),
        tmp: tmp.path().to_path_buf(),
        runner_files: runner_files(config),
    };
    let grants = layout
        .grants()
        .map_err(|error| unconfinable(config, &error))?;
    let tmp_dir = tmp.path().display().to_string();
    let env = [
        ("TMPDIR", tmp_dir.as_str()),
        ("TMP", tmp_dir.as_str()),
        ("TEMP", tmp_dir.as_str()),
    ];
    let runtime = tokio::runtime::Handle::current();
    let (spawned, confinement) = confine::spawn_confined(&grants, config.confinement, || {
        let _runtime = runtime.enter();
        spawn(config, workspace, &env, gateway)
    })
    .map_err(|error| unconfinable(config, &error))?;
    let (agent, pipes) = spawned?;
    config.events.emit(
        "confined",
        json!({"landlock": confinement.landlock, "abi": confinement.abi,
               "writable": grants.writable, "problems": confinement.problems}),
    );
    for problem in &confinement.problems {
        tracing::warn!("confinement: {problem}");
    }
    Ok(Started {
        agent,
        pipes,
        confinement,
        tmp: Some(tmp),
    })
}

/// The agent's HOME (it inherits the runner's environment), when it is a directory.
fn agent_home() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let home = std::path::Path::new(&home).canonicalize().ok()?;
    home.is_dir().then_some(home)
}

/// The runner's files the agent must not write: its binary, heartbeat and result files.
fn runner_files(config: &RunnerConfig) -> Vec<PathBuf> {
    std::env::current_exe()
        .ok()
        .into_iter()
        .chain(config.heartbeat_file.clone())
        .chain(config.runner_files.iter().cloned())
        .filter_map(|path| real_path(&path).ok())
        .collect()
}

/// The misconfiguration of an agent that cannot be confined as asked.
fn unconfinable(config: &RunnerConfig, error: &ConfineError) -> Start {
    let fix = match error {
        ConfineError::Carve { .. } => {
            "keep the runner's result and heartbeat files out of the agent's HOME (ralph run \
             --state), or make the directory readable"
        }
        ConfineError::Landlock(_) => {
            "run on a kernel with Landlock enabled (Linux ≥ 5.13, landlock in its lsm= boot \
             parameter) and a seccomp profile that allows its system calls, or set \
             spec.agent.confinement to BestEffort (ralph run --confinement best-effort)"
        }
    };
    let problem = Misconfiguration {
        problem: error.to_string(),
        fix: fix.into(),
        reason: None,
    };
    config
        .events
        .emit("misconfigured", json!({"problem": problem.problem}));
    Start::Misconfigured(problem)
}

/// Takes the usage the gateway metered (the runner's own, or the sidecar's) as the
/// attempt's.
async fn meter(
    config: &RunnerConfig,
    local: Option<crate::gateway::Gateway>,
    result: &mut AttemptResult,
) {
    let metered = match (local, &config.gateway.remote) {
        (Some(local), _) => local.stop().await,
        (None, Some(remote)) => match gateway::remote_metered(remote).await {
            Ok(metered) => metered,
            Err(problem) => {
                config
                    .events
                    .emit("gateway_unread", json!({"problem": problem}));
                tracing::warn!("{problem}; the attempt keeps the usage the agent reported");
                return;
            }
        },
        (None, None) => return,
    };
    config.events.emit("metered", json!(metered));
    gateway::apply(result, metered);
}

/// A line that is not ACP, printed by an agent that ended before the connection read it:
/// its stdout is read to the end (briefly: a live agent keeps it open).
async fn unread_noise(
    stdout_reader: &mut JoinHandle<()>,
    noise: &mut mpsc::UnboundedReceiver<String>,
) -> Option<Interruption> {
    let _ = tokio::time::timeout(STDOUT_DRAIN, stdout_reader).await;
    noise
        .try_recv()
        .ok()
        .map(|line| Interruption::NotAcp { line })
}

/// Why an attempt ended before its agent ran.
enum Start {
    /// The agent cannot run as configured.
    Misconfigured(Misconfiguration),
    /// The agent could not be started for another reason.
    Crashed(String),
}

/// Starts the agent in the workspace with the attempt's environment and `extra_env` (pointed
/// at the gateway, without model keys, when one runs).
fn spawn(
    config: &RunnerConfig,
    workspace: &Workspace,
    extra_env: &[(&str, &str)],
    gateway: &AgentGateway,
) -> Result<(AgentProcess, AgentPipes), Start> {
    let workspace_env = workspace.root().display().to_string();
    let mut env = vec![
        ("RALPH_TASK", config.task.as_str()),
        ("RALPH_WORKSPACE", workspace_env.as_str()),
    ];
    env.extend_from_slice(extra_env);
    if let Some(attempt) = &config.attempt {
        env.push(("RALPH_ATTEMPT", attempt.as_str()));
    }
    env.extend(gateway.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    match AgentProcess::spawn(
        &config.agent_command,
        workspace.root(),
        &env,
        &gateway.removed,
    ) {
        Ok(spawned) => {
            config.events.emit(
                "spawned",
                json!({"pid": spawned.0.pid(), "command": config.agent_command, "task": config.task, "attempt": config.attempt}),
            );
            Ok(spawned)
        }
        Err(error) => {
            config
                .events
                .emit("spawn_failed", json!({"error": error.to_string()}));
            Err(match &error {
                RunnerError::Spawn { command, source } => match unstartable(command, source) {
                    Some(problem) => Start::Misconfigured(problem),
                    None => Start::Crashed(error.to_string()),
                },
                _ => Start::Crashed(error.to_string()),
            })
        }
    }
}

/// The configuration error behind a failed spawn, when it is one.
fn unstartable(command: &str, error: &std::io::Error) -> Option<Misconfiguration> {
    let (problem, fix) = match error.kind() {
        std::io::ErrorKind::NotFound => (
            format!("the agent command `{command}` was not found: {error}"),
            "install the agent in the image (or on PATH) or correct the agent command",
        ),
        std::io::ErrorKind::PermissionDenied => (
            format!("the agent command `{command}` is not executable: {error}"),
            "make the agent program executable or correct the agent command",
        ),
        _ => return None,
    };
    Some(Misconfiguration {
        problem,
        fix: fix.into(),
        reason: None,
    })
}

/// The agent can only work in a workspace it can write to.
fn check_writable(config: &RunnerConfig, workspace: &Workspace) -> Result<(), Start> {
    workspace.check_writable().map_err(|error| {
        let problem = unwritable_workspace(workspace, &error);
        config
            .events
            .emit("misconfigured", json!({"problem": problem.problem}));
        Start::Misconfigured(problem)
    })
}

fn unwritable_workspace(workspace: &Workspace, error: &std::io::Error) -> Misconfiguration {
    Misconfiguration {
        problem: format!(
            "the workspace {} is not writable: {error}",
            workspace.root().display()
        ),
        fix: "give the runner a writable workspace directory (--workspace, or the volume \
              mounted at the workspace)"
            .into(),
        reason: None,
    }
}

/// A spawned agent and the watchers around it.
struct Running {
    agent: AgentProcess,
    activity: Arc<Activity>,
    turn: Arc<Mutex<TurnState>>,
    stderr: SharedDigest,
    stderr_task: JoinHandle<()>,
    alarms: mpsc::UnboundedReceiver<StderrAlarm>,
    events: EventLog,
    /// Landlock confines the agent (the agent's mode may depend on it).
    landlock: bool,
}

/// What the attempt left once the agent is gone.
struct Ended {
    supervised: Supervised,
    status: Option<ExitStatus>,
    late_exhaustion: Option<Exhaustion>,
    turn: Arc<Mutex<TurnState>>,
    stderr: SharedDigest,
}

impl Running {
    /// Starts watching the agent's stderr.
    fn start(
        config: &RunnerConfig,
        agent: AgentProcess,
        stderr_pipe: ChildStderr,
        patterns: &Patterns,
    ) -> Self {
        let stderr = SharedDigest::default();
        let (alarm_tx, alarms) = mpsc::unbounded_channel();
        let stderr_task = tokio::spawn(stderr::watch(
            stderr_pipe,
            patterns.clone(),
            config.relay_stderr,
            stderr.clone(),
            alarm_tx,
        ));
        Self {
            agent,
            activity: Arc::new(Activity::new(config.heartbeat_file.clone())),
            turn: Arc::new(Mutex::new(TurnState::asking_for(config.model.clone()))),
            stderr,
            stderr_task,
            alarms,
            events: config.events.clone(),
            landlock: false,
        }
    }

    /// Runs the conversation under supervision, then shuts the agent down.
    async fn converse(
        mut self,
        config: &RunnerConfig,
        (stdin, stdout): (ChildStdin, ChildStdout),
        workspace: Workspace,
        policy: PermissionPolicy,
        started: Instant,
        cancel: &CancellationToken,
    ) -> Ended {
        let (noise_tx, mut noise) = mpsc::unbounded_channel();
        let (session_tx, session_rx) = oneshot::channel();
        let (transport, mut stdout_reader) =
            agent_lines(stdin, stdout, self.activity.clone(), noise_tx);
        let landlock = self.landlock;
        let context = self.client_context(config, workspace, policy, started, landlock);
        let mut conversation = Box::pin(client::drive(context, transport, session_tx));
        let supervision = self.supervision(config, &mut noise, started, cancel);
        let mut supervised = supervise(conversation.as_mut(), session_rx, supervision).await;
        self.events
            .emit("stop", json!({"turn": turn_summary(&supervised.turn_end)}));
        // Dropping the conversation closes the agent's stdin: the agent may now exit.
        drop(conversation);
        if supervised.interruption.is_none() && not_acp_yet(&self.turn) {
            supervised.interruption = unread_noise(&mut stdout_reader, &mut noise).await;
        }
        stdout_reader.abort();
        self.shut_down(supervised, config.timeouts.grace).await
    }

    /// What the ACP client needs for this attempt.
    fn client_context(
        &self,
        config: &RunnerConfig,
        workspace: Workspace,
        policy: PermissionPolicy,
        started: Instant,
        landlock: bool,
    ) -> ClientContext {
        ClientContext {
            prompt: config.prompt.clone(),
            workspace,
            policy,
            turn: self.turn.clone(),
            events: self.events.clone(),
            started,
            advertise_fs: config.client_fs.advertise(&config.agent_command),
            model: config.model.clone(),
            mode: Wanted {
                read_only: config.read_only,
                landlock,
                deny_globs: !config.deny.is_empty(),
            },
        }
    }

    /// What the supervisor watches, and its limits.
    fn supervision<'s>(
        &'s mut self,
        config: &RunnerConfig,
        noise: &'s mut mpsc::UnboundedReceiver<String>,
        started: Instant,
        cancel: &'s CancellationToken,
    ) -> Supervision<'s> {
        Supervision {
            agent: &mut self.agent,
            activity: &self.activity,
            turn: &self.turn,
            events: &self.events,
            alarms: &mut self.alarms,
            noise,
            timeouts: config.timeouts,
            total_deadline: tokio::time::Instant::from_std(started + config.timeouts.total),
            cancel,
        }
    }

    /// Gives the agent the grace period to exit, kills what is left, drains stderr.
    async fn shut_down(mut self, supervised: Supervised, grace: Duration) -> Ended {
        let exited_before = self.agent.has_exited();
        let status = self.agent.shut_down(grace).await;
        if !exited_before && let Some(status) = status {
            self.events.emit("exited", exit_fields(status));
        }
        if tokio::time::timeout(STDERR_DRAIN, self.stderr_task)
            .await
            .is_err()
        {
            tracing::warn!("the agent's stderr stayed open after its process group was killed");
        }
        let mut late_exhaustion = None;
        while let Ok(alarm) = self.alarms.try_recv() {
            if let StderrAlarm::Exhausted { found, .. } = alarm {
                late_exhaustion.get_or_insert(found);
            }
        }
        Ended {
            supervised,
            status,
            late_exhaustion,
            turn: self.turn,
            stderr: self.stderr,
        }
    }
}

impl Ended {
    /// Classifies the attempt and writes its result document.
    fn report(
        self,
        config: RunnerConfig,
        patterns: &Patterns,
        started_at_ms: i64,
        mut confinement: ConfinementReport,
    ) -> AttemptResult {
        let turn = self.turn.clone();
        let mut turn = lock(&turn);
        confinement.problems.extend(turn.mode_problem.take());
        let final_message = turn.take_final_message();
        let observations = self.observe(&config, patterns, &mut turn);
        let mut verdict = classify(&observations);
        if let Some(problem) = turn.model_rejected.take() {
            verdict.outcome = OutcomeClass::Misconfigured;
            verdict.crash = None;
            verdict.misconfiguration = Some(problem);
        }
        AttemptResult {
            outcome: verdict.outcome,
            stop_reason: verdict.stop_reason,
            exit_code: observations.exit_code,
            signal: observations.signal,
            sigils: observations.sigils,
            crash: verdict.crash,
            misconfiguration: verdict.misconfiguration,
            exhaustion: observations.exhaustion,
            ran_by: turn.ran_by.clone(),
            usage: turn.usage.clone(),
            timings: Timings {
                started_at_ms,
                ended_at_ms: now_ms(),
                initialize_ms: turn.initialize_ms,
            },
            confinement: Some(confinement),
            proposed: super::proposal::write_proposal(
                &final_message,
                config.proposal_file.as_deref(),
            ),
            ..base_result(&config, verdict.outcome)
        }
    }

    /// Everything the classification looks at: how the turn ended, the process's exit,
    /// stderr, the agent's reports and sigils, any usage-limit report.
    fn observe(
        self,
        config: &RunnerConfig,
        patterns: &Patterns,
        turn: &mut TurnState,
    ) -> Observations {
        let Supervised {
            turn_end,
            interruption,
            exhaustion,
        } = self.supervised;
        let exhaustion = exhaustion
            .or(self.late_exhaustion)
            .or_else(|| error_channel_exhaustion(&turn_end, turn, patterns));
        Observations {
            turn: turn_end,
            interruption,
            exit_code: self.status.and_then(|status| status.code()),
            signal: self.status.and_then(|status| status.signal()),
            command: config.agent_command.join(" "),
            stderr: lock(&self.stderr).clone(),
            reported_error: turn.reports.unanswered_error(),
            answered: turn.reports.answered(),
            last_message: turn.reports.last_message().to_owned(),
            refused_permission: turn.reports.refusal().map(str::to_string),
            exhaustion,
            updates_in_turn: turn.updates_in_turn,
            sigils: turn.take_sigils(),
        }
    }
}

/// A usage-limit report in the error channels of the conversation: the prompt's
/// JSON-RPC error, or an error the agent reported in a session update. The agent's
/// prose never counts.
fn error_channel_exhaustion(
    turn_end: &TurnEnd,
    turn: &TurnState,
    patterns: &Patterns,
) -> Option<Exhaustion> {
    let now_unix = now_ms() / 1000;
    let from_prompt_error = match turn_end {
        TurnEnd::Failed { message, data, .. } => {
            exhaustion_in_error(message, data.as_ref(), patterns, now_unix)
        }
        _ => None,
    };
    from_prompt_error.or_else(|| {
        turn.reports
            .unanswered_error()
            .and_then(|error| patterns.exhaustion_in_diagnostic(&error, now_unix))
    })
}

/// The result of an attempt whose agent never ran.
fn not_started(config: &RunnerConfig, started_at_ms: i64, start: Start) -> AttemptResult {
    let (outcome, crash, misconfiguration) = match start {
        Start::Misconfigured(problem) => (OutcomeClass::Misconfigured, None, Some(problem)),
        Start::Crashed(crash) => (OutcomeClass::Crashed, Some(crash), None),
    };
    AttemptResult {
        crash,
        misconfiguration,
        timings: Timings {
            started_at_ms,
            ended_at_ms: now_ms(),
            initialize_ms: None,
        },
        ..base_result(config, outcome)
    }
}

/// A result for `config`'s task and attempt with nothing observed yet.
fn base_result(config: &RunnerConfig, outcome: OutcomeClass) -> AttemptResult {
    AttemptResult {
        ran_by: RanBy {
            requested_model: config.model.clone(),
            ..RanBy::default()
        },
        ..AttemptResult::new(config.task.clone(), config.attempt.clone(), outcome)
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
        TurnEnd::SetupFailed {
            phase,
            code,
            message,
        } => {
            json!({"setupError": {"request": phase.pending_request(), "code": code, "message": message}})
        }
        TurnEnd::Unanswered { phase, detail } => {
            json!({"unanswered": phase.describe(), "detail": detail})
        }
    }
}
