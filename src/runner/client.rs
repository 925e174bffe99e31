//! The ACP client side of an attempt: initialize, create a session in the workspace,
//! send the prompt, and answer the agent's permission and file requests meanwhile.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, Implementation, InitializeRequest,
    PermissionOptionKind, ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
    TextContent, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{
    Agent, Client, ConnectTo, Error, ErrorCode, is_connection_terminated,
    is_incoming_transport_closed,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::events::EventLog;
use super::outcome::TurnEnd;
use super::permission::{Answer, PermissionPolicy, ToolRequest};
use super::protocol::{RawNewSession, RawPrompt, RawPromptResponse, RawSessionUpdate};
use super::reports::model_of_session;
use super::tool_calls::ToolCalls;
use super::turn::{Phase, TurnState};
use super::workspace::{PathError, Workspace};
use crate::sync::lock;

/// The live connection and session, for sending `session/cancel`.
pub(super) type SessionHandle = (ConnectionTo<Agent>, SessionId);

/// What the client needs to drive the conversation.
pub(super) struct ClientContext {
    /// The prompt text.
    pub prompt: String,
    /// The confined workspace.
    pub workspace: Workspace,
    /// The permission policy.
    pub policy: PermissionPolicy,
    /// Shared conversation state.
    pub turn: Arc<Mutex<TurnState>>,
    /// The event log.
    pub events: EventLog,
    /// When the runner started.
    pub started: Instant,
    /// Advertise the client's `fs` capability (read and write text files).
    pub advertise_fs: bool,
    /// The model to ask the agent for, once the session exists (`ralph runner --model`).
    pub model: Option<String>,
    /// The mode the agent is to be put in (a verifier's read-only mode, under Landlock).
    pub mode: super::mode::Wanted,
}

/// What the ACP handlers share.
struct Handlers {
    workspace: Workspace,
    policy: PermissionPolicy,
    turn: Arc<Mutex<TurnState>>,
    tool_calls: Mutex<ToolCalls>,
    events: EventLog,
}

/// The raw outcome of the conversation: the connection's error, or the prompt's answer.
type Conversation = Result<Result<RawPromptResponse, Error>, Error>;

/// Runs the conversation until the prompt turn ends; sends the session handle on
/// `session_tx` as soon as the session exists.
pub(super) async fn drive(
    context: ClientContext,
    transport: impl ConnectTo<Client> + 'static,
    session_tx: oneshot::Sender<SessionHandle>,
) -> TurnEnd {
    let turn = context.turn.clone();
    let (handlers, setup) = context.split(session_tx);
    let conversation = connect(transport, Arc::new(handlers), setup).await;
    turn_end(conversation, &turn)
}

impl ClientContext {
    /// What the ACP handlers share, and what the client's own side of the conversation needs.
    fn split(self, session_tx: oneshot::Sender<SessionHandle>) -> (Handlers, Setup) {
        let handlers = Handlers {
            workspace: self.workspace,
            policy: self.policy,
            turn: self.turn,
            tool_calls: Mutex::new(ToolCalls::default()),
            events: self.events,
        };
        let setup = Setup {
            prompt: self.prompt,
            started: self.started,
            advertise_fs: self.advertise_fs,
            model: self.model,
            mode: self.mode,
            session_tx,
        };
        (handlers, setup)
    }
}

/// Connects to the agent with a handler for each message the agent sends (session
/// updates, permission requests, file reads and writes) and converses.
async fn connect(
    transport: impl ConnectTo<Client> + 'static,
    handlers: Arc<Handlers>,
    setup: Setup,
) -> Conversation {
    Client
        .v1()
        .name("ralph-runner")
        .on_receive_notification(
            {
                let handlers = handlers.clone();
                async move |notification: RawSessionUpdate, _cx| {
                    handlers.session_update(&notification.update);
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            {
                let handlers = handlers.clone();
                async move |request: RequestPermissionRequest, responder, _cx| {
                    responder.respond(handlers.permission(&request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let handlers = handlers.clone();
                async move |request: ReadTextFileRequest, responder, _cx| {
                    responder.respond_with_result(handlers.read_text_file(&request).await)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let handlers = handlers.clone();
                async move |request: WriteTextFileRequest, responder, _cx| {
                    responder.respond_with_result(handlers.write_text_file(&request).await)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
            setup.converse(&handlers, cx).await
        })
        .await
}

impl Handlers {
    /// `session/update`: tracked tool calls, turn state, event log.
    fn session_update(&self, update: &Value) {
        lock(&self.tool_calls).record_raw(update);
        lock(&self.turn).record_update(update);
        let kind = update.get("sessionUpdate").cloned();
        self.events
            .emit("update", json!({"kind": kind, "update": update}));
    }

    /// `session/request_permission`: decided on the tool call's merged state.
    fn permission(&self, request: &RequestPermissionRequest) -> RequestPermissionResponse {
        let known = lock(&self.tool_calls).merge_request(&request.tool_call);
        let tool = known.request();
        let decision = self.policy.decide(&tool, &self.workspace);
        let (kinds, reason) = match &decision {
            Answer::Allow => (ALLOW, None),
            Answer::Deny(reason) => (REJECT, Some(reason.clone())),
        };
        if let Some(reason) = &reason {
            self.record_refusal(request, &tool, reason);
        }
        self.events.emit(
            "permission",
            json!({
                "toolCallId": request.tool_call.tool_call_id.0.as_ref(),
                "title": tool.title,
                "kind": tool.kind,
                "paths": tool.paths,
                "allowed": decision == Answer::Allow,
                "reason": reason,
            }),
        );
        RequestPermissionResponse::new(pick_option(request, kinds))
    }

    /// A refused tool call, for the attempt's report: its command, title or ID, and why.
    fn record_refusal(&self, request: &RequestPermissionRequest, tool: &ToolRequest, reason: &str) {
        let call = tool
            .command
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_else(|| request.tool_call.tool_call_id.0.as_ref());
        lock(&self.turn)
            .reports
            .record_refusal(format!("`{}`: {reason}", call.trim_matches('`')));
    }

    /// `fs/read_text_file`, confined to the workspace.
    async fn read_text_file(
        &self,
        request: &ReadTextFileRequest,
    ) -> Result<ReadTextFileResponse, Error> {
        let result = read_file(&self.workspace, request).await;
        log_fs(&self.events, "read", &request.path, result.as_ref().err());
        result.map(ReadTextFileResponse::new)
    }

    /// `fs/write_text_file`, confined to the workspace; refused in a read-only session.
    async fn write_text_file(
        &self,
        request: &WriteTextFileRequest,
    ) -> Result<WriteTextFileResponse, Error> {
        let result = if self.policy.allows_writes() {
            write_file(&self.workspace, request).await
        } else {
            Err(Error::new(
                ErrorCode::INVALID_PARAMS,
                "this is a read-only verification session: writing files is refused",
            ))
        };
        log_fs(&self.events, "write", &request.path, result.as_ref().err());
        result.map(|()| WriteTextFileResponse::new())
    }
}

const ALLOW: &[PermissionOptionKind] = &[
    PermissionOptionKind::AllowOnce,
    PermissionOptionKind::AllowAlways,
];
const REJECT: &[PermissionOptionKind] = &[
    PermissionOptionKind::RejectOnce,
    PermissionOptionKind::RejectAlways,
];

/// The client's side of the conversation: initialize, session, prompt.
struct Setup {
    prompt: String,
    started: Instant,
    advertise_fs: bool,
    model: Option<String>,
    mode: super::mode::Wanted,
    session_tx: oneshot::Sender<SessionHandle>,
}

impl Setup {
    async fn converse(self, handlers: &Handlers, cx: ConnectionTo<Agent>) -> Conversation {
        self.initialize(handlers, &cx).await?;
        let session_id = new_session(handlers, &cx, self.model.as_deref(), self.mode).await?;
        // The supervisor may already be gone (it only listens while it can cancel).
        let _ = self.session_tx.send((cx.clone(), session_id.clone()));
        lock(&handlers.turn).phase = Phase::Prompted;
        let request = RawPrompt {
            session_id: session_id.0.to_string(),
            prompt: vec![ContentBlock::Text(TextContent::new(self.prompt))],
        };
        handlers
            .events
            .emit("prompt_sent", json!({"bytes": request_bytes(&request)}));
        Ok(cx.send_request(request).block_task().await)
    }

    async fn initialize(&self, handlers: &Handlers, cx: &ConnectionTo<Agent>) -> Result<(), Error> {
        let mut capabilities = ClientCapabilities::new();
        if self.advertise_fs {
            capabilities = capabilities.fs(FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true));
        }
        let initialized = cx
            .send_request(
                InitializeRequest::new(ProtocolVersion::V1)
                    .client_capabilities(capabilities)
                    .client_info(Implementation::new(
                        "ralph-runner",
                        env!("CARGO_PKG_VERSION"),
                    )),
            )
            .block_task()
            .await?;
        let agent = initialized
            .agent_info
            .map(|info| format!("{} {}", info.name, info.version));
        {
            let mut turn = lock(&handlers.turn);
            turn.phase = Phase::Initialized;
            turn.ran_by.agent = agent.clone();
            turn.initialize_ms = u64::try_from(self.started.elapsed().as_millis()).ok();
        }
        handlers.events.emit(
            "initialized",
            json!({"agent": agent, "fs": self.advertise_fs}),
        );
        Ok(())
    }
}

async fn new_session(
    handlers: &Handlers,
    cx: &ConnectionTo<Agent>,
    chosen_model: Option<&str>,
    mode: super::mode::Wanted,
) -> Result<SessionId, Error> {
    let cwd = handlers.workspace.root().to_path_buf();
    let session = cx
        .send_request(RawNewSession {
            cwd: cwd.clone(),
            mcp_servers: Vec::new(),
        })
        .block_task()
        .await?;
    let model = model_of_session(session.config_options.as_ref(), session.models.as_ref());
    {
        let mut turn = lock(&handlers.turn);
        turn.phase = Phase::SessionCreated;
        if model.is_some() {
            turn.ran_by.model = model.clone();
        }
    }
    handlers.events.emit(
        "session",
        json!({"sessionId": session.session_id, "cwd": cwd, "model": model}),
    );
    if let Some(chosen) = chosen_model {
        let route = super::model::choose(
            cx,
            &session.session_id,
            session.config_options.as_ref(),
            session.models.as_ref(),
            chosen,
        )
        .await;
        match route {
            Ok((route, answered)) => {
                if let Some(model) = &answered {
                    lock(&handlers.turn).ran_by.model = Some(model.clone());
                }
                handlers.events.emit(
                    "model_chosen",
                    json!({"model": chosen, "via": format!("{route:?}"), "answered": answered}),
                );
            }
            Err(problem) => {
                let message = problem.problem.clone();
                lock(&handlers.turn).model_rejected = Some(problem);
                handlers.events.emit(
                    "model_rejected",
                    json!({"model": chosen, "problem": message}),
                );
                return Err(Error::invalid_params().data(json!(message)));
            }
        }
    }
    set_mode(handlers, cx, &session, mode).await;
    Ok(SessionId::new(session.session_id))
}

/// Puts the agent in the mode where it asks before it acts (a verifier: its read-only
/// mode), recording the mode or why none could be set.
async fn set_mode(
    handlers: &Handlers,
    cx: &ConnectionTo<Agent>,
    session: &super::protocol::RawNewSessionResponse,
    wanted: super::mode::Wanted,
) {
    let agent = lock(&handlers.turn)
        .ran_by
        .agent
        .clone()
        .unwrap_or_default();
    let options = (session.config_options.as_ref(), session.modes.as_ref());
    let set = super::mode::set(cx, &session.session_id, &agent, wanted, options).await;
    handlers.events.emit(
        "mode",
        json!({"mode": set.mode, "readOnly": wanted.read_only, "problem": set.problem}),
    );
    if let Some(problem) = &set.problem {
        tracing::warn!("{problem}");
    }
    let mut turn = lock(&handlers.turn);
    turn.ran_by.agent_mode = set.mode;
    turn.mode_problem = set.problem;
}

/// How the turn ended, from the conversation's raw outcome.
fn turn_end(result: Conversation, turn: &Mutex<TurnState>) -> TurnEnd {
    match result {
        Ok(Ok(response)) => answered(response, turn),
        Ok(Err(error))
            if is_incoming_transport_closed(&error) || is_connection_terminated(&error) =>
        {
            TurnEnd::Unanswered {
                phase: Phase::Prompted,
                detail: error.message,
            }
        }
        Ok(Err(error)) => TurnEnd::Failed {
            code: error.code.value(),
            message: error.message,
            data: error.data,
        },
        Err(error) if is_incoming_transport_closed(&error) || is_connection_terminated(&error) => {
            TurnEnd::Unanswered {
                phase: lock(turn).phase,
                detail: describe_error(&error),
            }
        }
        Err(error) => TurnEnd::SetupFailed {
            phase: lock(turn).phase,
            code: error.code.value(),
            message: describe_error(&error),
        },
    }
}

/// The prompt's answer: its usage and metadata recorded, its stop reason kept.
fn answered(response: RawPromptResponse, turn: &Mutex<TurnState>) -> TurnEnd {
    let mut turn = lock(turn);
    if let Some(usage) = &response.usage {
        turn.record_turn_usage(usage);
    }
    if let Some(meta) = &response.meta {
        turn.record_response_meta(meta);
    }
    TurnEnd::Answered {
        stop_reason: response.stop_reason,
    }
}

fn request_bytes(request: &RawPrompt) -> usize {
    request
        .prompt
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.len(),
            _ => 0,
        })
        .sum()
}

fn describe_error(error: &Error) -> String {
    match &error.data {
        Some(data) => format!("{} ({data})", error.message),
        None => error.message.clone(),
    }
}

fn pick_option(
    request: &RequestPermissionRequest,
    kinds: &[PermissionOptionKind],
) -> RequestPermissionOutcome {
    kinds
        .iter()
        .find_map(|kind| request.options.iter().find(|option| option.kind == *kind))
        .map(|option| {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            ))
        })
        .unwrap_or(RequestPermissionOutcome::Cancelled)
}

async fn read_file(workspace: &Workspace, request: &ReadTextFileRequest) -> Result<String, Error> {
    let path = workspace.resolve(&request.path).map_err(path_error)?;
    let content = tokio::fs::read_to_string(&path)
        .await
        .map_err(|error| io_error(&request.path, &error))?;
    if request.line.is_none() && request.limit.is_none() {
        return Ok(content);
    }
    let skip = request.line.map_or(0, |line| line.saturating_sub(1)) as usize;
    let take = request.limit.map_or(usize::MAX, |limit| limit as usize);
    Ok(content
        .split_inclusive('\n')
        .skip(skip)
        .take(take)
        .collect())
}

async fn write_file(workspace: &Workspace, request: &WriteTextFileRequest) -> Result<(), Error> {
    let path = workspace.resolve(&request.path).map_err(path_error)?;
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|error| io_error(&request.path, &error))?;
    }
    tokio::fs::write(&path, &request.content)
        .await
        .map_err(|error| io_error(&request.path, &error))
}

fn path_error(error: PathError) -> Error {
    let code = match &error {
        PathError::Outside { .. } => ErrorCode::INVALID_PARAMS,
        PathError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ErrorCode::RESOURCE_NOT_FOUND
        }
        PathError::Io { .. } => ErrorCode::INTERNAL_ERROR,
    };
    Error::new(code, error.to_string())
}

/// An I/O failure as a JSON-RPC error; a missing file is ACP's resource-not-found
/// error (`-32002`, "Resource not found: PATH", `data.uri`), as the ACP SDKs build it.
fn io_error(path: &std::path::Path, error: &std::io::Error) -> Error {
    if error.kind() == std::io::ErrorKind::NotFound {
        return Error::new(
            ErrorCode::RESOURCE_NOT_FOUND,
            format!("Resource not found: {}", path.display()),
        )
        .data(json!({"uri": path}));
    }
    Error::new(
        ErrorCode::INTERNAL_ERROR,
        format!("{}: {error}", path.display()),
    )
}

fn log_fs(events: &EventLog, operation: &str, path: &std::path::Path, error: Option<&Error>) {
    events.emit(
        "fs",
        json!({"op": operation, "path": path, "ok": error.is_none(), "error": error.map(|e| e.message.clone())}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reading_with_line_and_limit_returns_that_slice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "1\n2\n3\n4\n").unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let request = ReadTextFileRequest::new("s", "f.txt").line(2).limit(2);
        assert_eq!(read_file(&workspace, &request).await.unwrap(), "2\n3\n");
    }

    #[tokio::test]
    async fn reading_outside_the_workspace_is_an_invalid_params_error() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        let request = ReadTextFileRequest::new("s", "/etc/hostname");
        let error = read_file(&workspace, &request).await.unwrap_err();
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        assert!(error.message.contains("outside the workspace"));
    }
}
