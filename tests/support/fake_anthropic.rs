//! A scripted fake of the Anthropic Messages API, for driving claude-agent-acp offline.
//!
//! Built on [`ModelServer`] (tests/support/fake_model.rs), it serves:
//! - `POST /v1/messages`: the main conversation of a session gets the next [`Turn`] of the
//!   script whose key occurs in the prompt (streamed as server-sent events exactly like the
//!   real API, or as one JSON message when `stream` is false); side requests (title
//!   generation and other tool-less calls) get a short canned answer and consume nothing;
//! - `POST /v1/messages/count_tokens`: an estimate;
//! - anything else: `200 {}` for `GET`/`HEAD` probes, `404` in the API's error format otherwise.
//!
//! Every request is recorded ([`ModelServer::requests`]) so tests can check what the agent
//! sent: the prompt, the tool results, the model.
//!
//! A part of tests/support/real_agents.rs (it uses its siblings `fake_model` and `real_agent`).
//!
//! ```ignore
//! let fake = FakeAnthropic::start(
//!     Script::new().task("t-1", [FakeAnthropic::bash("echo hi > proof.txt"), Turn::text("<task-done>t-1</task-done>")]),
//! )?;
//! let launch = fake.claude_agent_acp(&home)?;
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::fake_model::{
    FakeApi, RecordedRequest, RequestKind, Script, Shared, TEXT_CHUNK_CHARS, Turn, Wire,
    estimate_tokens, event_stream, offers_tools, split_chars, sse, unserved,
};
use super::real_agent::{AgentLaunch, installed_agent_bin};

/// Placeholder API key handed to the agent; the fake server accepts any key.
pub const FAKE_API_KEY: &str = "sk-ant-fake-key-for-tests";

/// Text the server answers side requests (titles, summaries) with.
pub const SIDE_ANSWER: &str = "{\"title\": \"Ralph task\"}";

/// The Anthropic Messages API.
pub struct Anthropic;

impl Wire for Anthropic {
    const NAME: &'static str = "fake-anthropic";

    fn routes() -> Router<Arc<Shared>> {
        Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .fallback(unserved::<Self>)
    }

    fn unserved(method: &Method, uri: &Uri) -> Response {
        if method == Method::GET || method == Method::HEAD {
            axum::Json(json!({})).into_response()
        } else {
            api_error(
                404,
                &error_body(
                    "not_found_error",
                    &format!("the fake Anthropic API does not serve {method} {uri}"),
                ),
            )
        }
    }
}

/// A running fake Anthropic Messages API; stops when dropped.
pub type FakeAnthropic = FakeApi<Anthropic>;

impl FakeAnthropic {
    /// A call of Claude Code's `Bash` tool.
    pub fn bash(command: &str) -> Turn {
        Turn::shell_call("Bash", command)
    }

    /// A call of Claude Code's `Write` tool (`file_path` must be absolute).
    pub fn write_file(file_path: &Path, content: &str) -> Turn {
        Turn::write_call("Write", file_path, content)
    }

    /// An API error: HTTP `status` with body `{"type":"error","error":{type, message}}`.
    pub fn error(status: u16, error_type: &str, message: &str) -> Turn {
        Turn::error(status, error_body(error_type, message))
    }

    /// `529 overloaded_error`, as the API answers when it is overloaded.
    pub fn overloaded() -> Turn {
        Self::error(529, "overloaded_error", "Overloaded")
    }

    /// `429 rate_limit_error`, as the API answers when the account's limit is used up.
    pub fn rate_limited(message: &str) -> Turn {
        Self::error(429, "rate_limit_error", message)
    }

    /// The environment that points claude-agent-acp (Claude Code) at this server, with a
    /// throwaway home under `home`, no telemetry, updates or other outside traffic, and no
    /// retries of API errors (a scripted error reaches the client at once).
    pub fn agent_env(&self, home: &Path) -> Vec<(String, String)> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        [
            ("ANTHROPIC_BASE_URL", self.base_url().to_owned()),
            ("ANTHROPIC_API_KEY", FAKE_API_KEY.to_owned()),
            ("HOME", path(home.to_path_buf())),
            ("CLAUDE_CONFIG_DIR", path(home.join(".claude"))),
            ("XDG_CONFIG_HOME", path(home.join(".config"))),
            ("XDG_CACHE_HOME", path(home.join(".cache"))),
            ("IS_SANDBOX", "1".to_owned()),
            ("DISABLE_TELEMETRY", "1".to_owned()),
            ("DISABLE_ERROR_REPORTING", "1".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }

    /// Asserts that every tool result the agent sent back in its second model call for
    /// `task` is an error (`failed`) or none is.
    pub fn assert_tool_results(&self, task: &str, failed: bool) {
        let results = self.main_requests(task)[1].tool_results();
        assert!(
            results.iter().all(|result| result.is_error == failed),
            "tool results (all failed: {failed}): {results:?}"
        );
    }

    /// How to start claude-agent-acp against this server with the home `home`; inherited
    /// `ANTHROPIC_*` / `CLAUDE_*` variables are removed, so a developer's real credentials
    /// never reach the agent.
    pub fn claude_agent_acp(&self, home: &Path) -> std::io::Result<AgentLaunch> {
        Ok(AgentLaunch {
            program: installed_agent_bin("claude-agent-acp").map_err(std::io::Error::other)?,
            args: Vec::new(),
            env: self.agent_env(home),
            env_removed_prefixes: vec!["ANTHROPIC_".to_owned(), "CLAUDE_".to_owned()],
        })
    }
}

/// claude-agent-acp in its default permission mode (it runs tools without asking), against
/// a fake scripted with `script`, in the home `home`.
pub fn claude(script: Script, home: &Path) -> (FakeAnthropic, AgentLaunch) {
    FakeAnthropic::start_for(script, |fake| fake.claude_agent_acp(home))
}

/// claude-agent-acp with `permissions.defaultMode: "default"` in its settings: it asks the
/// client before running tools.
pub fn claude_asking(script: Script, home: &Path) -> (FakeAnthropic, AgentLaunch) {
    claude_in_mode(script, home, "default")
}

/// claude-agent-acp with `permissions.defaultMode: MODE` in its settings (e.g.
/// `bypassPermissions`, allowed as the environment sets `IS_SANDBOX`).
pub fn claude_in_mode(script: Script, home: &Path, mode: &str) -> (FakeAnthropic, AgentLaunch) {
    FakeAnthropic::start_for(script, |fake| {
        let config_dir = home.join(".claude");
        std::fs::create_dir_all(&config_dir)?;
        std::fs::write(
            config_dir.join("settings.json"),
            format!(r#"{{"permissions":{{"defaultMode":"{mode}"}}}}"#),
        )?;
        fake.claude_agent_acp(home)
    })
}

/// The Messages API's view of a recorded request.
impl RecordedRequest {
    /// The `model` field of the body.
    pub fn model(&self) -> Option<&str> {
        self.body.as_ref()?.get("model")?.as_str()
    }

    /// The text blocks of the first user message (where agents put the prompt), joined.
    pub fn prompt_text(&self) -> String {
        self.body.as_ref().map(prompt_text).unwrap_or_default()
    }

    /// Every `tool_result` block in the conversation sent.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.body
            .as_ref()
            .map_or(&[][..], conversation)
            .iter()
            .filter_map(|message| message.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
            .map(|block| ToolResult {
                tool_use_id: block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                content: text_of(block.get("content")),
                is_error: block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            })
            .collect()
    }
}

/// A `tool_result` block the agent sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// The `tool_use` ID it answers.
    pub tool_use_id: String,
    /// Its text content.
    pub content: String,
    /// Whether the agent marked it as an error.
    pub is_error: bool,
}

/// The `messages` of a Messages API request body.
fn conversation(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The text of the first user message of a request body.
pub fn prompt_text(body: &Value) -> String {
    conversation(body)
        .iter()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| text_of(message.get("content")))
        .unwrap_or_default()
}

/// The text of a message `content`: a string, or the `text` of its text blocks joined.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The body of an API error, as the real API writes it.
fn error_body(error_type: &str, message: &str) -> Value {
    json!({
        "type": "error",
        "error": { "type": error_type, "message": message },
        "request_id": "req_fake",
    })
}

fn api_error(status: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("request-id", "req_fake")],
        axum::Json(body.clone()),
    )
        .into_response()
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.saw_key(headers.get("x-api-key").and_then(|key| key.to_str().ok()));
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return api_error(
            400,
            &error_body("invalid_request_error", "body is not JSON"),
        );
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-fake")
        .to_owned();
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let input_tokens = estimate_tokens(request.to_string().len());
    let (turn, id) = if offers_tools(&request) {
        let prompt = prompt_text(&request);
        shared.main_turn(&Method::POST, &uri, request, &prompt)
    } else {
        let id = shared.record(&Method::POST, &uri, RequestKind::Side, &body);
        (Turn::text(SIDE_ANSWER), id)
    };
    let reply = Reply {
        message_id: format!("msg_fake_{id:04}"),
        tool_use_id: format!("toolu_fake_{id:04}"),
        model,
        input_tokens,
    };
    if let Some(output) = output_sent(&turn, stream) {
        shared.sent(input_tokens, output);
    }
    match turn {
        Turn::Error { status, body } => api_error(status, &body),
        turn if stream => reply.stream(&turn),
        turn => reply.json(&turn),
    }
}

/// The output count the answer to `turn` ends with (a hanging stream announced 1 in
/// `message_start`); `None` when the answer carries no usage.
fn output_sent(turn: &Turn, stream: bool) -> Option<u64> {
    match turn {
        Turn::Text(text) | Turn::MaxTokens(text) => Some(estimate_tokens(text.len())),
        Turn::ToolCall { arguments, .. } => Some(estimate_tokens(arguments.to_string().len())),
        Turn::Hang(_) => stream.then_some(1),
        Turn::Error { .. } => None,
    }
}

async fn count_tokens(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    shared.record(&Method::POST, &uri, RequestKind::CountTokens, &body);
    let tokens = estimate_tokens(body.len());
    axum::Json(json!({ "input_tokens": tokens })).into_response()
}

/// What one response is made of, besides its turn.
struct Reply {
    message_id: String,
    tool_use_id: String,
    model: String,
    input_tokens: u64,
}

impl Reply {
    /// The response as server-sent events, as the real API streams it.
    fn stream(&self, turn: &Turn) -> Response {
        let mut events = vec![
            sse(
                "message_start",
                &json!({ "type": "message_start", "message": self.message(Vec::new(), None, 1) }),
            ),
            sse("ping", &json!({ "type": "ping" })),
        ];
        match turn {
            Turn::Text(text) | Turn::MaxTokens(text) => {
                events.extend(text_block_events(0, text, true));
                events.push(self.message_end(stop_reason(turn), estimate_tokens(text.len())));
            }
            Turn::Hang(partial_text) => events.extend(text_block_events(0, partial_text, false)),
            Turn::ToolCall { name, arguments } => {
                let json = arguments.to_string();
                events.push(sse(
                    "content_block_start",
                    &json!({ "type": "content_block_start", "index": 0,
                             "content_block": { "type": "tool_use", "id": self.tool_use_id, "name": name, "input": {} } }),
                ));
                for piece in split_chars(&json, json.len().div_ceil(2).max(1)) {
                    events.push(sse(
                        "content_block_delta",
                        &json!({ "type": "content_block_delta", "index": 0,
                                 "delta": { "type": "input_json_delta", "partial_json": piece } }),
                    ));
                }
                events.push(sse(
                    "content_block_stop",
                    &json!({ "type": "content_block_stop", "index": 0 }),
                ));
                events.push(self.message_end("tool_use", estimate_tokens(json.len())));
            }
            Turn::Error { .. } => {}
        }
        event_stream(events, matches!(turn, Turn::Hang(_)))
    }

    /// The response as one JSON message (`stream: false`).
    fn json(&self, turn: &Turn) -> Response {
        let (content, output_tokens) = match turn {
            Turn::Text(text) | Turn::MaxTokens(text) => (
                vec![json!({ "type": "text", "text": text })],
                estimate_tokens(text.len()),
            ),
            Turn::ToolCall { name, arguments } => (
                vec![
                    json!({ "type": "tool_use", "id": self.tool_use_id, "name": name, "input": arguments }),
                ],
                estimate_tokens(arguments.to_string().len()),
            ),
            Turn::Hang(_) => {
                return Response::new(Body::from_stream(futures::stream::pending::<
                    Result<Bytes, std::convert::Infallible>,
                >()));
            }
            Turn::Error { .. } => (Vec::new(), 0),
        };
        axum::Json(self.message(content, Some(stop_reason(turn)), output_tokens)).into_response()
    }

    fn message(&self, content: Vec<Value>, stop_reason: Option<&str>, output_tokens: u64) -> Value {
        json!({
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": {
                "input_tokens": self.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": output_tokens,
            },
        })
    }

    fn message_end(&self, stop_reason: &str, output_tokens: u64) -> Bytes {
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": output_tokens },
        });
        let mut bytes = sse("message_delta", &delta).to_vec();
        bytes.extend_from_slice(&sse("message_stop", &json!({ "type": "message_stop" })));
        Bytes::from(bytes)
    }
}

/// The events of text block `index` carrying `text` in several deltas; `finish` adds its stop.
fn text_block_events(index: usize, text: &str, finish: bool) -> Vec<Bytes> {
    let mut events = vec![sse(
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
    )];
    for piece in split_chars(text, TEXT_CHUNK_CHARS) {
        events.push(sse(
            "content_block_delta",
            &json!({ "type": "content_block_delta", "index": index, "delta": { "type": "text_delta", "text": piece } }),
        ));
    }
    if finish {
        events.push(sse(
            "content_block_stop",
            &json!({ "type": "content_block_stop", "index": index }),
        ));
    }
    events
}

/// The API's `stop_reason` for a turn.
fn stop_reason(turn: &Turn) -> &'static str {
    match turn {
        Turn::MaxTokens(_) => "max_tokens",
        Turn::ToolCall { .. } => "tool_use",
        Turn::Text(_) | Turn::Hang(_) | Turn::Error { .. } => "end_turn",
    }
}
