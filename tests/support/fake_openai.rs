//! A scripted fake of the OpenAI Responses API (`POST /v1/responses`, streamed as server-sent
//! events the way Codex reads them), for driving codex-acp offline.
//!
//! A part of tests/support/real_agents.rs (it uses its siblings `fake_model` and `real_agent`).
//!
//! ```ignore
//! let fake = FakeOpenAi::start(Script::new().task("t-1", [FakeOpenAi::shell("echo hi > a"), Turn::text("<task-done>t-1</task-done>")]))?;
//! let launch = fake.codex_acp(&home, CodexApproval::Never)?;
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::fake_model::{
    FakeApi, RequestKind, Script, Shared, TEXT_CHUNK_CHARS, Turn, Wire, estimate_tokens,
    event_stream, json_error, offers_tools, split_chars, sse, unserved,
};
use super::real_agent::{AgentLaunch, installed_agent_bin};

/// The model named in Codex's configuration; the fake echoes whatever the request names.
pub const CODEX_MODEL: &str = "gpt-5.5";

/// The API key codex-acp is given when it sends one; the fake accepts any key.
pub const FAKE_OPENAI_KEY: &str = "sk-fake-openai-key-for-tests";

/// How codex-acp decides on tool calls, written as `approval_policy` in its config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodexApproval {
    /// `never`: Codex runs commands without asking the client.
    Never,
    /// `on-request` in a read-only sandbox: Codex asks the client
    /// (`session/request_permission`) before a command that asks to run outside the sandbox
    /// ([`FakeOpenAi::escalated_shell`]).
    OnRequest,
}

/// The OpenAI Responses API.
pub struct OpenAi;

impl Wire for OpenAi {
    const NAME: &'static str = "fake-openai";

    fn routes() -> Router<Arc<Shared>> {
        Router::new()
            .route("/v1/responses", post(responses))
            .fallback(unserved::<Self>)
    }

    fn unserved(method: &Method, uri: &Uri) -> Response {
        if method == Method::GET && uri.path().ends_with("/models") {
            return axum::Json(json!({ "object": "list", "data": [], "models": [] }))
                .into_response();
        }
        json_error(
            404,
            &json!({ "error": { "message": format!("the fake OpenAI API does not serve {method} {uri}"),
                               "type": "invalid_request_error" } }),
        )
    }
}

/// A running fake OpenAI Responses API; stops when dropped.
pub type FakeOpenAi = FakeApi<OpenAi>;

impl FakeOpenAi {
    /// A call of Codex's `exec_command` tool running `command` in the session's directory.
    pub fn shell(command: &str) -> Turn {
        Turn::tool_call(
            "exec_command",
            json!({ "cmd": command, "login": false, "tty": false, "yield_time_ms": 5000 }),
        )
    }

    /// A call of `exec_command` that asks to run `command` outside the sandbox, which needs
    /// the user's approval under [`CodexApproval::OnRequest`].
    pub fn escalated_shell(command: &str) -> Turn {
        Turn::tool_call(
            "exec_command",
            json!({ "cmd": command, "login": false, "tty": false, "yield_time_ms": 5000,
                    "sandbox_permissions": "require_escalated",
                    "justification": "Write the file the task asks for" }),
        )
    }

    /// A call of Codex's freeform `apply_patch` tool adding `path` (absolute) with `content`
    /// (lines). A string in place of JSON arguments makes the fake send a `custom_tool_call`.
    pub fn add_file_patch(path: &Path, content: &str) -> Turn {
        let lines: String = content.lines().map(|line| format!("+{line}\n")).collect();
        Turn::tool_call(
            "apply_patch",
            Value::String(format!(
                "*** Begin Patch\n*** Add File: {}\n{lines}*** End Patch\n",
                path.display()
            )),
        )
    }

    /// `500` as the API answers an internal error.
    pub fn server_error() -> Turn {
        Turn::error(
            500,
            json!({ "error": { "message": "The server had an error while processing your request.",
                               "type": "server_error", "param": null, "code": null } }),
        )
    }

    /// `429` without a quota type: the API's rate limit.
    pub fn rate_limited() -> Turn {
        Turn::error(
            429,
            json!({ "error": { "message": "Rate limit reached for requests. Please try again later.",
                               "type": "requests", "param": null, "code": "rate_limit_exceeded" } }),
        )
    }

    /// `429 insufficient_quota`: the account's quota is used up.
    pub fn quota_exhausted() -> Turn {
        Turn::error(
            429,
            json!({ "error": { "message": "You exceeded your current quota, please check your plan and billing details.",
                               "type": "insufficient_quota", "param": null, "code": "insufficient_quota" } }),
        )
    }

    /// Writes `CODEX_HOME/config.toml` under `home` pointing Codex at this server and returns
    /// how to start codex-acp with it.
    pub fn codex_acp(&self, home: &Path, approval: CodexApproval) -> std::io::Result<AgentLaunch> {
        let base_url = format!("{}/v1", self.base_url());
        Self::codex_acp_at(home, approval, &base_url, None)
    }

    /// codex-acp against the endpoint `base_url` (e.g. a model gateway in front of this
    /// fake), sending the key in `key_variable` as a bearer token when one is named.
    pub fn codex_acp_at(
        home: &Path,
        approval: CodexApproval,
        base_url: &str,
        key_variable: Option<&str>,
    ) -> std::io::Result<AgentLaunch> {
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home)?;
        // codex-acp starts every session in a mode (`INITIAL_AGENT_MODE`) that overrides the
        // config's approval settings; its default, `agent`, has a model review each command.
        let (approval_policy, sandbox_mode, initial_mode) = match approval {
            CodexApproval::Never => ("never", "danger-full-access", "agent-full-access"),
            CodexApproval::OnRequest => ("on-request", "read-only", "read-only"),
        };
        let config = format!(
            r#"model = "{CODEX_MODEL}"
model_provider = "fake"
approval_policy = "{approval_policy}"
approvals_reviewer = "user"
sandbox_mode = "{sandbox_mode}"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.fake]
name = "Fake OpenAI"
base_url = "{base_url}"
wire_api = "responses"
requires_openai_auth = false
request_max_retries = 0
stream_max_retries = 0
{env_key}"#,
            env_key = key_variable
                .map(|variable| format!("env_key = \"{variable}\"\n"))
                .unwrap_or_default(),
        );
        std::fs::write(codex_home.join("config.toml"), config)?;
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        Ok(AgentLaunch {
            program: installed_agent_bin("codex-acp").map_err(std::io::Error::other)?,
            args: Vec::new(),
            env: vec![
                ("HOME".to_owned(), path(home.to_path_buf())),
                ("CODEX_HOME".to_owned(), path(codex_home)),
                ("XDG_CONFIG_HOME".to_owned(), path(home.join(".config"))),
                ("XDG_CACHE_HOME".to_owned(), path(home.join(".cache"))),
                ("NO_BROWSER".to_owned(), "1".to_owned()),
                ("INITIAL_AGENT_MODE".to_owned(), initial_mode.to_owned()),
            ],
            env_removed_prefixes: vec![
                "OPENAI_".to_owned(),
                "CODEX_".to_owned(),
                "INITIAL_AGENT_MODE".to_owned(),
            ],
        })
    }
}

/// codex-acp running commands without asking ([`CodexApproval::Never`]), against a fake
/// scripted with `script`, in the home `home`.
pub fn codex(script: Script, home: &Path) -> (FakeOpenAi, AgentLaunch) {
    FakeOpenAi::start_for(script, |fake| fake.codex_acp(home, CodexApproval::Never))
}

/// codex-acp asking the client before escalated commands ([`CodexApproval::OnRequest`]),
/// unconfined (`RALPH_CONFINEMENT=disabled`): under Landlock its sandbox cannot start, and the
/// runner runs it in full access without asking (docs/security.md).
pub fn codex_asking(script: Script, home: &Path) -> (FakeOpenAi, AgentLaunch) {
    FakeOpenAi::start_for(script, |fake| {
        let mut launch = fake.codex_acp(home, CodexApproval::OnRequest)?;
        launch
            .env
            .push(("RALPH_CONFINEMENT".to_owned(), "disabled".to_owned()));
        Ok(launch)
    })
}

/// The text of every user message in a Responses request's `input`, joined.
pub fn user_text(body: &Value) -> String {
    let Some(input) = body.get("input") else {
        return String::new();
    };
    match input {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
            .flat_map(|item| match item.get("content") {
                Some(Value::String(text)) => vec![text.clone()],
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

async fn responses(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    shared.saw_key(bearer);
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return json_error(
            400,
            &json!({ "error": { "message": "body is not JSON", "type": "invalid_request_error" } }),
        );
    };
    if !offers_tools(&request) {
        let id = shared.record(&Method::POST, &uri, RequestKind::Side, &body);
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(CODEX_MODEL);
        let side = Turn::text("Ralph task");
        if let Some(output) = output_sent(&side) {
            shared.sent(estimate_tokens(body.len()), output);
        }
        return Reply::new(id, model, body.len()).stream(&side);
    }
    let prompt = user_text(&request);
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(CODEX_MODEL)
        .to_owned();
    let (turn, id) = shared.main_turn(&Method::POST, &uri, request, &prompt);
    if let Some(output) = output_sent(&turn) {
        shared.sent(estimate_tokens(body.len()), output);
    }
    match turn {
        Turn::Error { status, body } => json_error(status, &body),
        turn => Reply::new(id, &model, body.len()).stream(&turn),
    }
}

/// The output count the answer to `turn` ends with (`response.created` announces the input
/// and 0 output, so a hanging answer counts 0); `None` when the answer carries no usage.
fn output_sent(turn: &Turn) -> Option<u64> {
    match turn {
        Turn::Text(text) | Turn::MaxTokens(text) => Some(estimate_tokens(text.len())),
        Turn::ToolCall { arguments, .. } => Some(estimate_tokens(arguments.to_string().len())),
        Turn::Hang(_) => Some(0),
        Turn::Error { .. } => None,
    }
}

/// One streamed response.
struct Reply {
    response_id: String,
    item_id: String,
    call_id: String,
    model: String,
    input_tokens: u64,
}

impl Reply {
    fn new(id: u64, model: &str, request_bytes: usize) -> Self {
        Self {
            response_id: format!("resp_fake_{id:04}"),
            item_id: format!("msg_fake_{id:04}"),
            call_id: format!("call_fake_{id:04}"),
            model: model.to_owned(),
            input_tokens: estimate_tokens(request_bytes),
        }
    }

    fn response(&self, status: &str, output_tokens: u64, extra: Value) -> Value {
        let mut response = json!({
            "id": self.response_id,
            "object": "response",
            "model": self.model,
            "status": status,
            "output": [],
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": output_tokens,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": self.input_tokens + output_tokens,
            },
        });
        if let (Some(response), Some(extra)) = (response.as_object_mut(), extra.as_object()) {
            response.extend(extra.clone());
        }
        response
    }

    fn stream(&self, turn: &Turn) -> Response {
        let mut events = vec![sse(
            "response.created",
            &json!({ "type": "response.created", "response": self.response("in_progress", 0, json!({})) }),
        )];
        match turn {
            Turn::Text(text) => {
                events.extend(self.message_events(text, true));
                events.push(sse(
                    "response.completed",
                    &json!({ "type": "response.completed",
                             "response": self.response("completed", estimate_tokens(text.len()), json!({})) }),
                ));
            }
            Turn::MaxTokens(text) => {
                events.extend(self.message_events(text, true));
                events.push(sse(
                    "response.incomplete",
                    &json!({ "type": "response.incomplete",
                             "response": self.response("incomplete", estimate_tokens(text.len()),
                                 json!({ "incomplete_details": { "reason": "max_output_tokens" } })) }),
                ));
            }
            Turn::ToolCall { name, arguments } => {
                let item = match arguments {
                    Value::String(input) => json!({
                        "type": "custom_tool_call", "id": format!("ctc_{}", self.call_id),
                        "call_id": self.call_id, "name": name, "input": input,
                        "status": "completed",
                    }),
                    arguments => json!({
                        "type": "function_call", "id": format!("fc_{}", self.call_id),
                        "call_id": self.call_id, "name": name, "arguments": arguments.to_string(),
                        "status": "completed",
                    }),
                };
                events.push(sse(
                    "response.output_item.added",
                    &json!({ "type": "response.output_item.added", "output_index": 0, "item": item }),
                ));
                events.push(sse(
                    "response.output_item.done",
                    &json!({ "type": "response.output_item.done", "output_index": 0, "item": item }),
                ));
                events.push(sse(
                    "response.completed",
                    &json!({ "type": "response.completed",
                             "response": self.response("completed", estimate_tokens(arguments.to_string().len()), json!({})) }),
                ));
            }
            Turn::Hang(text) => events.extend(self.message_events(text, false)),
            Turn::Error { .. } => {}
        }
        event_stream(events, matches!(turn, Turn::Hang(_)))
    }

    /// The events of one assistant message carrying `text` in several deltas.
    fn message_events(&self, text: &str, finish: bool) -> Vec<Bytes> {
        let item = |content: Value, status: &str| {
            json!({ "type": "message", "id": self.item_id, "role": "assistant",
                    "status": status, "content": content })
        };
        let mut events = vec![
            sse(
                "response.output_item.added",
                &json!({ "type": "response.output_item.added", "output_index": 0,
                         "item": item(json!([]), "in_progress") }),
            ),
            sse(
                "response.content_part.added",
                &json!({ "type": "response.content_part.added", "item_id": self.item_id,
                         "output_index": 0, "content_index": 0,
                         "part": { "type": "output_text", "text": "", "annotations": [] } }),
            ),
        ];
        for piece in split_chars(text, TEXT_CHUNK_CHARS) {
            events.push(sse(
                "response.output_text.delta",
                &json!({ "type": "response.output_text.delta", "item_id": self.item_id,
                         "output_index": 0, "content_index": 0, "delta": piece }),
            ));
        }
        if finish {
            events.push(sse(
                "response.output_text.done",
                &json!({ "type": "response.output_text.done", "item_id": self.item_id,
                         "output_index": 0, "content_index": 0, "text": text }),
            ));
            events.push(sse(
                "response.output_item.done",
                &json!({ "type": "response.output_item.done", "output_index": 0,
                         "item": item(json!([{ "type": "output_text", "text": text, "annotations": [] }]), "completed") }),
            ));
        }
        events
    }
}
