//! The scripted agent: a real ACP agent (agent side of the SDK) that plays a script's
//! steps for its task and attempt. It is the runner's test double and the agent of dry
//! runs.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ConfigOptionUpdate, ContentChunk, Cost, Implementation,
    InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, ReadTextFileRequest, RequestPermissionOutcome, RequestPermissionRequest,
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState, SessionNotification, SessionUpdate, ToolCall, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
    WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client, ConnectTo, Error};
use serde_json::json;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;

use super::script::{ErrorStep, PermissionRequestStyle, Step, ToolStep, UsageStep, substitute};
use crate::runner::mode::RawSetMode;
use crate::runner::model::{RawSetConfigOption, RawSetResponse};
use crate::runner::protocol::{RawPrompt, RawPromptResponse, RawSessionUpdate, TurnUsage};
use crate::sync::lock;

/// The one session the scripted agent serves.
const SESSION_ID: &str = "script-session";

/// The session modes it offers (`session/set_mode`), as claude-agent-acp names its asking
/// and read-only modes; it plays the same steps in each.
const MODES: &[&str] = &["default", "plan"];

/// Time given to queued messages to reach the client before the agent exits or kills
/// itself (the SDK offers no flush).
const DRAIN: Duration = Duration::from_millis(50);

/// Why the scripted agent stopped with an error.
#[derive(Debug, thiserror::Error)]
#[error("ACP connection failed: {0}")]
pub(crate) struct AgentError(String);

/// The task, attempt and steps the agent plays.
#[derive(Clone, Debug)]
pub(crate) struct Performance {
    /// The task name (`{task}`).
    pub task: String,
    /// The attempt number (`{attempt}`).
    pub attempt: u32,
    /// The steps of this attempt.
    pub steps: Vec<Step>,
    /// The model reported in the session's model selector.
    pub model: Option<String>,
    /// The models a client may choose with `session/set_config_option` (the selector offers
    /// them, `model` or the first current); a chosen one becomes the reported model.
    pub models: Vec<String>,
}

impl Performance {
    /// The models the session's selector offers.
    fn offered_models(&self) -> Vec<String> {
        let mut offered = self.model.iter().cloned().collect::<Vec<_>>();
        offered.extend(
            self.models
                .iter()
                .filter(|m| Some(*m) != self.model.as_ref())
                .cloned(),
        );
        offered
    }
}

/// The session's model selector, set to `current`, offering `offered`.
fn model_selector(current: &str, offered: &[String]) -> SessionConfigOption {
    SessionConfigOption::select(
        "model",
        "Model",
        current.to_owned(),
        offered
            .iter()
            .map(|m| SessionConfigSelectOption::new(m.clone(), m.clone()))
            .collect::<Vec<_>>(),
    )
    .category(SessionConfigOptionCategory::Model)
}

struct Shared {
    performance: Performance,
    /// The model the client chose with `session/set_config_option`.
    chosen_model: Mutex<Option<String>>,
    /// Whether the client offered `fs/read_text_file` and `fs/write_text_file`.
    client_fs: Mutex<bool>,
    cwd: Mutex<PathBuf>,
    turn_cancel: Mutex<CancellationToken>,
}

/// Serves ACP on the process's stdin and stdout until the client hangs up.
pub(crate) async fn serve_stdio(performance: Performance) -> Result<(), AgentError> {
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    serve(performance, transport).await
}

/// Serves ACP on `transport` until the client hangs up.
pub(crate) async fn serve(
    performance: Performance,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), AgentError> {
    let shared = Arc::new(Shared {
        performance,
        chosen_model: Mutex::new(None),
        client_fs: Mutex::new(false),
        cwd: Mutex::new(PathBuf::from(".")),
        turn_cancel: Mutex::new(CancellationToken::new()),
    });
    Agent
        .v1()
        .name("ralph-script")
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: InitializeRequest, responder, _cx| {
                    responder.respond(initialize(&shared, &request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: NewSessionRequest, responder, cx: ConnectionTo<Client>| {
                    responder.respond(new_session(&shared, request, &cx)?)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |request: RawSetConfigOption, responder, cx: ConnectionTo<Client>| {
                    set_model(&shared, &request, responder, &cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: RawSetMode, responder, _cx| set_mode(&request, responder),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let shared = shared.clone();
                async move |_request: RawPrompt, responder, cx: ConnectionTo<Client>| {
                    let turn = Turn::start(&shared, &cx);
                    cx.spawn(async move { turn.play(responder).await })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let shared = shared.clone();
                async move |_notification: CancelNotification, _cx| {
                    lock(&shared.turn_cancel).cancel();
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
        .map_err(|error| AgentError(error.to_string()))
}

/// The answer to `initialize`; remembers whether the client offers its file system.
fn initialize(shared: &Shared, request: &InitializeRequest) -> InitializeResponse {
    let fs = &request.client_capabilities.fs;
    *lock(&shared.client_fs) = fs.read_text_file && fs.write_text_file;
    InitializeResponse::new(request.protocol_version.min(ProtocolVersion::V1))
        .agent_capabilities(AgentCapabilities::new())
        .agent_info(Implementation::new(
            "ralph-script",
            env!("CARGO_PKG_VERSION"),
        ))
}

/// The answer to `session/new`: the session's modes and model selector, after the
/// script's history is replayed.
fn new_session(
    shared: &Shared,
    request: NewSessionRequest,
    cx: &ConnectionTo<Client>,
) -> Result<NewSessionResponse, Error> {
    *lock(&shared.cwd) = request.cwd;
    let performance = &shared.performance;
    for step in &performance.steps {
        if let Step::History(text) = step {
            let text = substitute(text, &performance.task, performance.attempt);
            send(
                cx,
                SessionUpdate::AgentMessageChunk(ContentChunk::new(text.into())),
            )?;
        }
    }
    let mut response = NewSessionResponse::new(SESSION_ID).modes(SessionModeState::new(
        MODES[0],
        MODES
            .iter()
            .map(|mode| SessionMode::new(*mode, *mode))
            .collect(),
    ));
    let offered = performance.offered_models();
    if let Some(current) = offered.first() {
        response = response.config_options(vec![model_selector(current, &offered)]);
    }
    Ok(response)
}

/// Answers `session/set_mode`: any of [`MODES`].
fn set_mode(request: &RawSetMode, responder: Responder<RawSetResponse>) -> Result<(), Error> {
    if MODES.contains(&request.mode_id.as_str()) {
        responder.respond(RawSetResponse::default())
    } else {
        responder.respond_with_error(Error::invalid_params().data(json!(format!(
            "Invalid or unavailable mode: {}",
            request.mode_id
        ))))
    }
}

/// Answers `session/set_config_option`: only the model, one of those offered.
fn set_model(
    shared: &Shared,
    request: &RawSetConfigOption,
    responder: Responder<RawSetResponse>,
    cx: &ConnectionTo<Client>,
) -> Result<(), Error> {
    let offered = shared.performance.offered_models();
    if request.config_id != "model" || !offered.contains(&request.value) {
        return responder.respond_with_error(Error::invalid_params().data(json!(format!(
            "Invalid value for config option {}: {}",
            request.config_id, request.value
        ))));
    }
    *lock(&shared.chosen_model) = Some(request.value.clone());
    send(
        cx,
        SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(vec![model_selector(
            &request.value,
            &offered,
        )])),
    )?;
    responder.respond(RawSetResponse::default())
}

/// The prompt response's `_meta.quota` of a quota-tokens step (as gemini-cli reports
/// tokens), naming `model` (or `scripted`).
fn quota_meta(step: &UsageStep, model: Option<&str>) -> serde_json::Value {
    json!({"quota": {
        "token_count": {"input_tokens": step.input_tokens, "output_tokens": step.output_tokens},
        "model_usage": [{"model": model.unwrap_or("scripted"),
            "token_count": {"input_tokens": step.input_tokens, "output_tokens": step.output_tokens}}]
    }})
}

/// One prompt turn being played.
struct Turn {
    cx: ConnectionTo<Client>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
}

impl Turn {
    /// A new turn, which the session's cancellation now cancels.
    fn start(shared: &Arc<Shared>, cx: &ConnectionTo<Client>) -> Turn {
        let cancel = CancellationToken::new();
        *lock(&shared.turn_cancel) = cancel.clone();
        Turn {
            cx: cx.clone(),
            shared: shared.clone(),
            cancel,
        }
    }

    async fn play(self, responder: Responder<RawPromptResponse>) -> Result<(), Error> {
        let performance = &self.shared.performance;
        let mut usage = None;
        let mut meta = None;
        for (index, step) in performance.steps.iter().enumerate() {
            if self.cancel.is_cancelled() {
                return respond(responder, "cancelled", usage);
            }
            match step {
                Step::Delay(duration) | Step::Silence(duration) => {
                    tokio::select! {
                        () = tokio::time::sleep(*duration) => {}
                        () = self.cancel.cancelled() => return respond(responder, "cancelled", usage),
                    }
                }
                Step::Hang => std::future::pending::<()>().await,
                Step::Tool(tool) => {
                    if self.tool(index, tool).await? == ToolEnd::CancelTurn {
                        return respond(responder, "cancelled", usage);
                    }
                }
                Step::Stop(reason) => return respond(responder, reason, usage),
                Step::Error(error) => return responder.respond_with_error(prompt_error(error)),
                Step::Exit(code) => {
                    tokio::time::sleep(DRAIN).await;
                    std::process::exit(*code);
                }
                Step::Kill => {
                    tokio::time::sleep(DRAIN).await;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::getpid(),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    std::future::pending::<()>().await;
                }
                Step::Usage(step) => usage = Some(self.usage(step)?),
                Step::QuotaTokens(step) => {
                    meta = Some(quota_meta(step, performance.model.as_deref()))
                }
                other => self.say(other).await?,
            }
        }
        respond_with_meta(responder, "end_turn", usage, meta)
    }

    /// Plays a step that only sends something (to the client, or to stderr).
    async fn say(&self, step: &Step) -> Result<(), Error> {
        let performance = &self.shared.performance;
        let text = |text: &str| substitute(text, &performance.task, performance.attempt);
        match step {
            Step::Text(body) => self.message(text(body)),
            Step::Thought(body) => send(
                &self.cx,
                SessionUpdate::AgentThoughtChunk(ContentChunk::new(text(body).into())),
            ),
            Step::Shell(command) => {
                let command = text(command);
                let cwd = lock(&self.shared.cwd).clone();
                self.message(shell(&command, &cwd).await)
            }
            Step::Stderr(line) => {
                let _ = writeln!(std::io::stderr(), "{}", text(line));
                Ok(())
            }
            Step::Big(bytes) => self.message(filler(*bytes)),
            Step::Split(body) => text(body)
                .chars()
                .try_for_each(|ch| self.message(ch.to_string())),
            Step::SystemError(message) => {
                self.message(format!("{}\n\n", text(message)))?;
                thread_status(&self.cx, "systemError")
            }
            Step::ThreadStatus(kind) => thread_status(&self.cx, kind),
            Step::Informational(body) => send_raw(
                &self.cx,
                json!({
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": text(body)},
                    "_meta": {"claudeCode": {"kind": "informational"}}
                }),
            ),
            // Replayed at `session/new`; the others pause or end the turn (`play`).
            Step::History(_)
            | Step::Delay(_)
            | Step::Silence(_)
            | Step::Hang
            | Step::Tool(_)
            | Step::Stop(_)
            | Step::Error(_)
            | Step::Exit(_)
            | Step::Kill
            | Step::Usage(_)
            | Step::QuotaTokens(_) => Ok(()),
        }
    }

    /// Reports a usage step to the client; the turn's usage.
    fn usage(&self, step: &UsageStep) -> Result<TurnUsage, Error> {
        let mut update = UsageUpdate::new(step.input_tokens + step.output_tokens, 200_000);
        if let Some(cost) = step.cost_usd {
            update = update.cost(Cost::new(cost, "USD"));
        }
        send(&self.cx, SessionUpdate::UsageUpdate(update))?;
        Ok(TurnUsage {
            input_tokens: step.input_tokens,
            output_tokens: step.output_tokens,
            ..TurnUsage::default()
        })
    }

    fn message(&self, text: String) -> Result<(), Error> {
        send(
            &self.cx,
            SessionUpdate::AgentMessageChunk(ContentChunk::new(text.into())),
        )
    }

    async fn tool(&self, index: usize, tool: &ToolStep) -> Result<ToolEnd, Error> {
        let performance = &self.shared.performance;
        let path = absolute(&lock(&self.shared.cwd), &tool.path);
        let id = format!("tool-{}", index + 1);
        let (kind, title) = match tool.write {
            Some(_) => (ToolKind::Edit, format!("Write {}", tool.path.display())),
            None => (ToolKind::Read, format!("Read {}", tool.path.display())),
        };
        let location = vec![ToolCallLocation::new(path.clone())];
        let raw_input = json!({"file_path": path});
        if tool.request != PermissionRequestStyle::Unannounced {
            send(
                &self.cx,
                SessionUpdate::ToolCall(
                    ToolCall::new(id.clone(), title.clone())
                        .kind(kind)
                        .status(ToolCallStatus::Pending)
                        .locations(location.clone())
                        .raw_input(raw_input.clone()),
                ),
            )?;
        }
        let fields = match tool.request {
            PermissionRequestStyle::Full => ToolCallUpdateFields::new()
                .title(title)
                .kind(kind)
                .locations(location)
                .raw_input(raw_input),
            PermissionRequestStyle::IdOnly | PermissionRequestStyle::Unannounced => {
                ToolCallUpdateFields::new()
            }
        };
        let answer = self
            .cx
            .send_request(RequestPermissionRequest::new(
                SESSION_ID,
                ToolCallUpdate::new(id.clone(), fields),
                vec![
                    PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
                    PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
                ],
            ))
            .block_task()
            .await?;
        let allowed = matches!(
            &answer.outcome,
            RequestPermissionOutcome::Selected(selected) if selected.option_id.0.as_ref() == "allow"
        );
        if !allowed && tool.cancel_on_reject {
            return Ok(ToolEnd::CancelTurn);
        }
        let result = if allowed {
            let content = tool
                .write
                .as_ref()
                .map(|content| substitute(content, &performance.task, performance.attempt));
            self.file_access(path, content).await
        } else {
            Err("permission denied".to_string())
        };
        let (status, follow_up, note) = match &result {
            Ok(()) => (ToolCallStatus::Completed, &tool.ok_text, "done".to_string()),
            Err(error) => (ToolCallStatus::Failed, &tool.fail_text, error.clone()),
        };
        send(
            &self.cx,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                id,
                ToolCallUpdateFields::new()
                    .status(status)
                    .raw_output(json!({"result": note})),
            )),
        )?;
        if let Some(text) = follow_up {
            self.message(substitute(text, &performance.task, performance.attempt))?;
        }
        Ok(ToolEnd::GoOn)
    }

    /// Writes `content` to `path` (reads it when `None`): through the client when it
    /// offered its file system, else directly, as real agents do.
    async fn file_access(&self, path: PathBuf, content: Option<String>) -> Result<(), String> {
        let client_fs = *lock(&self.shared.client_fs);
        match (client_fs, content) {
            (true, Some(content)) => self
                .cx
                .send_request(WriteTextFileRequest::new(SESSION_ID, path, content))
                .block_task()
                .await
                .map(drop)
                .map_err(|error| error.message),
            (true, None) => self
                .cx
                .send_request(ReadTextFileRequest::new(SESSION_ID, path))
                .block_task()
                .await
                .map(drop)
                .map_err(|error| error.message),
            (false, Some(content)) => tokio::fs::write(&path, content)
                .await
                .map_err(|error| format!("{}: {error}", path.display())),
            (false, None) => tokio::fs::read_to_string(&path)
                .await
                .map(drop)
                .map_err(|error| format!("{}: {error}", path.display())),
        }
    }
}

/// Runs `command` with `sh -c` in `cwd`; `shell exit CODE` and its stderr, for the turn's
/// text.
async fn shell(command: &str, cwd: &Path) -> String {
    let output = tokio::process::Command::new("sh")
        .args(["-c", command])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match output {
        Ok(output) => format!(
            "shell exit {}: {}\n",
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(error) => format!("shell failed to start: {error}\n"),
    }
}

/// What a tool call leaves the turn to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolEnd {
    /// Play the next step.
    GoOn,
    /// End the turn with `cancelled` (the permission was refused).
    CancelTurn,
}

fn respond(
    responder: Responder<RawPromptResponse>,
    stop_reason: &str,
    usage: Option<TurnUsage>,
) -> Result<(), Error> {
    respond_with_meta(responder, stop_reason, usage, None)
}

fn respond_with_meta(
    responder: Responder<RawPromptResponse>,
    stop_reason: &str,
    usage: Option<TurnUsage>,
    meta: Option<serde_json::Value>,
) -> Result<(), Error> {
    responder.respond(RawPromptResponse {
        stop_reason: stop_reason.to_string(),
        usage,
        meta,
    })
}

fn prompt_error(step: &ErrorStep) -> Error {
    let error = Error::new(step.code, step.message.clone());
    match &step.error_kind {
        Some(kind) => error.data(json!({"errorKind": kind})),
        None => error,
    }
}

fn send(cx: &ConnectionTo<Client>, update: SessionUpdate) -> Result<(), Error> {
    cx.send_notification(SessionNotification::new(SESSION_ID, update))
}

/// A codex-acp style thread status report.
fn thread_status(cx: &ConnectionTo<Client>, kind: &str) -> Result<(), Error> {
    send_raw(
        cx,
        json!({
            "sessionUpdate": "session_info_update",
            "_meta": {"codex": {"threadStatus": {"type": kind}}}
        }),
    )
}

/// Sends an update the schema has no type for (agent-specific `_meta`).
fn send_raw(cx: &ConnectionTo<Client>, update: serde_json::Value) -> Result<(), Error> {
    cx.send_notification(RawSessionUpdate {
        session_id: SESSION_ID.to_string(),
        update,
    })
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// `bytes` bytes of readable filler text.
fn filler(bytes: usize) -> String {
    const WORDS: &str = "lorem ipsum dolor sit amet ";
    WORDS.chars().cycle().take(bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_has_the_requested_size() {
        assert_eq!(filler(1000).len(), 1000);
    }

    #[test]
    fn relative_tool_paths_are_taken_from_the_session_cwd() {
        assert_eq!(
            absolute(Path::new("/ws"), Path::new("a.txt")),
            PathBuf::from("/ws/a.txt")
        );
        assert_eq!(
            absolute(Path::new("/ws"), Path::new("/etc/x")),
            PathBuf::from("/etc/x")
        );
    }
}
