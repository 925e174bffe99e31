//! The ACP client side of an attempt: initialize, create a session in the workspace,
//! send the prompt, and answer the agent's permission and file requests meanwhile.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, Implementation, InitializeRequest,
    NewSessionRequest, PermissionOptionKind, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionConfigKind, SessionConfigOption, SessionConfigOptionCategory,
    SessionId, TextContent, ToolCallUpdate, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{
    Agent, Client, ConnectTo, Error, ErrorCode, is_connection_terminated,
    is_incoming_transport_closed,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::events::EventLog;
use super::outcome::TurnEnd;
use super::permission::{Decision, PermissionPolicy, ToolRequest};
use super::protocol::{RawPrompt, RawSessionUpdate};
use super::turn::{Phase, TurnState};
use super::workspace::{PathError, Workspace};

/// The live connection and session, for sending `session/cancel`.
pub type SessionHandle = (ConnectionTo<Agent>, SessionId);

/// What the client needs to drive the conversation.
pub struct ClientContext {
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
}

/// Runs the conversation until the prompt turn ends; sends the session handle on
/// `session_tx` as soon as the session exists.
pub async fn drive(
    context: ClientContext,
    transport: impl ConnectTo<Client> + 'static,
    session_tx: oneshot::Sender<SessionHandle>,
) -> TurnEnd {
    let ClientContext {
        prompt,
        workspace,
        policy,
        turn,
        events,
        started,
    } = context;
    let workspace = Arc::new(workspace);
    let result = Client
        .v1()
        .name("ralph-runner")
        .on_receive_notification(
            {
                let turn = turn.clone();
                let events = events.clone();
                async move |notification: RawSessionUpdate, _cx| {
                    lock(&turn).record_update(&notification.update);
                    let kind = notification.update.get("sessionUpdate").cloned();
                    events.emit(
                        "update",
                        json!({"kind": kind, "update": notification.update}),
                    );
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            {
                let workspace = workspace.clone();
                let events = events.clone();
                async move |request: RequestPermissionRequest, responder, _cx| {
                    let tool = tool_request(&request.tool_call);
                    let decision = policy.decide(&tool, &workspace);
                    let (outcome, reason) = match &decision {
                        Decision::Allow => (
                            pick_option(
                                &request,
                                &[
                                    PermissionOptionKind::AllowOnce,
                                    PermissionOptionKind::AllowAlways,
                                ],
                            ),
                            None,
                        ),
                        Decision::Deny(reason) => (
                            pick_option(
                                &request,
                                &[
                                    PermissionOptionKind::RejectOnce,
                                    PermissionOptionKind::RejectAlways,
                                ],
                            ),
                            Some(reason.clone()),
                        ),
                    };
                    events.emit(
                        "permission",
                        json!({
                            "toolCallId": request.tool_call.tool_call_id.0.as_ref(),
                            "title": tool.title,
                            "allowed": decision == Decision::Allow,
                            "reason": reason,
                        }),
                    );
                    responder.respond(RequestPermissionResponse::new(outcome))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let workspace = workspace.clone();
                let events = events.clone();
                async move |request: ReadTextFileRequest, responder, _cx| {
                    let result = read_file(&workspace, &request).await;
                    log_fs(&events, "read", &request.path, result.as_ref().err());
                    responder.respond_with_result(result.map(ReadTextFileResponse::new))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let workspace = workspace.clone();
                let events = events.clone();
                async move |request: WriteTextFileRequest, responder, _cx| {
                    let result = write_file(&workspace, &request).await;
                    log_fs(&events, "write", &request.path, result.as_ref().err());
                    responder.respond_with_result(result.map(|()| WriteTextFileResponse::new()))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, {
            let turn = turn.clone();
            let events = events.clone();
            let cwd = workspace.root().to_path_buf();
            async move |cx: ConnectionTo<Agent>| {
                let capabilities = ClientCapabilities::new().fs(FileSystemCapabilities::new()
                    .read_text_file(true)
                    .write_text_file(true));
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
                    let mut turn = lock(&turn);
                    turn.phase = Phase::Initialized;
                    turn.agent = agent.clone();
                    turn.initialize_ms = u64::try_from(started.elapsed().as_millis()).ok();
                }
                events.emit("initialized", json!({"agent": agent}));
                let session = cx
                    .send_request(NewSessionRequest::new(cwd.clone()))
                    .block_task()
                    .await?;
                {
                    let mut turn = lock(&turn);
                    turn.phase = Phase::SessionCreated;
                    turn.model = current_model(session.config_options.as_deref());
                }
                events.emit(
                    "session",
                    json!({"sessionId": session.session_id.0.as_ref(), "cwd": cwd}),
                );
                // The supervisor may already be gone (it only listens while it can cancel).
                let _ = session_tx.send((cx.clone(), session.session_id.clone()));
                lock(&turn).phase = Phase::Prompted;
                let request = RawPrompt {
                    session_id: session.session_id.0.to_string(),
                    prompt: vec![ContentBlock::Text(TextContent::new(prompt))],
                };
                events.emit("prompt_sent", json!({"bytes": request_bytes(&request)}));
                Ok(cx.send_request(request).block_task().await)
            }
        })
        .await;
    match result {
        Ok(Ok(response)) => {
            if let Some(usage) = &response.usage {
                lock(&turn).record_turn_usage(usage);
            }
            TurnEnd::Answered {
                stop_reason: response.stop_reason,
            }
        }
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
        Err(error) => TurnEnd::Unanswered {
            phase: lock(&turn).phase,
            detail: describe_error(&error),
        },
    }
}

/// The current value of the session's model selector.
fn current_model(options: Option<&[SessionConfigOption]>) -> Option<String> {
    options?
        .iter()
        .find_map(|option| match (&option.category, &option.kind) {
            (Some(SessionConfigOptionCategory::Model), SessionConfigKind::Select(select)) => {
                Some(select.current_value.0.to_string())
            }
            _ => None,
        })
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

/// The parts of a permission request the policy looks at.
fn tool_request(tool_call: &ToolCallUpdate) -> ToolRequest {
    let fields = &tool_call.fields;
    let raw_input = fields.raw_input.as_ref();
    let mut paths: Vec<PathBuf> = fields
        .locations
        .iter()
        .flatten()
        .map(|location| location.path.clone())
        .collect();
    for key in ["path", "file_path", "filePath", "notebook_path"] {
        if let Some(path) = raw_input
            .and_then(|input| input.get(key))
            .and_then(Value::as_str)
        {
            paths.push(PathBuf::from(path));
        }
    }
    let command =
        raw_input
            .and_then(|input| input.get("command"))
            .and_then(|command| match command {
                Value::String(command) => Some(command.clone()),
                Value::Array(parts) => Some(
                    parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => None,
            });
    ToolRequest {
        title: fields.title.clone(),
        command,
        paths,
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

fn io_error(path: &std::path::Path, error: &std::io::Error) -> Error {
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        ErrorCode::RESOURCE_NOT_FOUND
    } else {
        ErrorCode::INTERNAL_ERROR
    };
    Error::new(code, format!("{}: {error}", path.display()))
}

fn log_fs(events: &EventLog, operation: &str, path: &std::path::Path, error: Option<&Error>) {
    events.emit(
        "fs",
        json!({"op": operation, "path": path, "ok": error.is_none(), "error": error.map(|e| e.message.clone())}),
    );
}

fn lock(turn: &Mutex<TurnState>) -> MutexGuard<'_, TurnState> {
    match turn.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ToolCallLocation, ToolCallUpdateFields};

    #[test]
    fn a_tool_request_collects_locations_input_paths_and_the_command() {
        let tool_call = ToolCallUpdate::new(
            "t1",
            ToolCallUpdateFields::new()
                .title("Edit".to_string())
                .locations(vec![ToolCallLocation::new("/ws/a.rs")])
                .raw_input(json!({"file_path": "b.rs", "command": ["git", "push"]})),
        );
        let request = tool_request(&tool_call);
        assert_eq!(request.title.as_deref(), Some("Edit"));
        assert_eq!(
            request.paths,
            [PathBuf::from("/ws/a.rs"), PathBuf::from("b.rs")]
        );
        assert_eq!(request.command.as_deref(), Some("git push"));
    }

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
