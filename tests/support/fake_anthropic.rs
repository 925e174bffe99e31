//! A scripted fake of the Anthropic Messages API, for driving real agent CLIs offline.
//!
//! [`FakeAnthropic::start`] binds `127.0.0.1:0` and serves, on its own thread and runtime
//! (so sync and async tests can use it alike):
//! - `POST /v1/messages`: the main conversation of a session gets the next [`Turn`] of the
//!   script whose key occurs in the prompt (streamed as server-sent events exactly like the
//!   real API, or as one JSON message when `stream` is false); side requests (title
//!   generation and other tool-less calls) get a short canned answer and consume nothing;
//! - `POST /v1/messages/count_tokens`: an estimate;
//! - anything else: `200 {}` for `GET`/`HEAD` probes, `404` in the API's error format otherwise.
//!
//! Every request is recorded ([`FakeAnthropic::requests`]) so tests can check what the agent
//! sent: the prompt, the tool results, the model.
//!
//! ```ignore
//! let fake = FakeAnthropic::start(
//!     Script::new().task("t-1", [Turn::bash("echo hi > proof.txt"), Turn::text("<task-done>t-1</task-done>")]),
//! )?;
//! fake.configure_agent(&mut command, home.path());
//! ```
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// Placeholder API key handed to the agent; the fake server accepts any key.
pub const FAKE_API_KEY: &str = "sk-ant-fake-key-for-tests";

/// Text the server answers side requests (titles, summaries) with.
pub const SIDE_ANSWER: &str = "{\"title\": \"Ralph task\"}";

/// Characters of text per streamed `text_delta` event.
const TEXT_CHUNK_CHARS: usize = 24;

/// One model response in the main conversation.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// Assistant text, ending with `stop_reason` (`end_turn`, `max_tokens`, `refusal`, ...).
    Text { text: String, stop_reason: String },
    /// A tool call (`stop_reason` `tool_use`); the agent runs it and sends the result back.
    ToolUse { name: String, input: Value },
    /// Streams the start of a text answer, then never finishes (until the client goes away).
    Hang { partial_text: String },
    /// An API error: HTTP `status` with body `{"type":"error","error":{type, message}}`.
    Error {
        status: u16,
        error_type: String,
        message: String,
    },
}

impl Turn {
    /// Assistant text ending the turn (`end_turn`).
    pub fn text(text: impl Into<String>) -> Self {
        Turn::Text {
            text: text.into(),
            stop_reason: "end_turn".to_owned(),
        }
    }

    /// Assistant text cut off by the output token limit (`max_tokens`).
    pub fn max_tokens(text: impl Into<String>) -> Self {
        Turn::Text {
            text: text.into(),
            stop_reason: "max_tokens".to_owned(),
        }
    }

    /// A call of tool `name` with `input`.
    pub fn tool_use(name: impl Into<String>, input: Value) -> Self {
        Turn::ToolUse {
            name: name.into(),
            input,
        }
    }

    /// A call of Claude Code's `Bash` tool.
    pub fn bash(command: impl Into<String>) -> Self {
        let command = command.into();
        Turn::tool_use(
            "Bash",
            json!({ "command": command, "description": "Run a shell command" }),
        )
    }

    /// A call of Claude Code's `Write` tool (`file_path` must be absolute).
    pub fn write_file(file_path: impl AsRef<Path>, content: impl Into<String>) -> Self {
        Turn::tool_use(
            "Write",
            json!({ "file_path": file_path.as_ref(), "content": content.into() }),
        )
    }

    /// A response that starts streaming `partial_text` and then hangs.
    pub fn hang(partial_text: impl Into<String>) -> Self {
        Turn::Hang {
            partial_text: partial_text.into(),
        }
    }

    /// An API error response.
    pub fn error(status: u16, error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Turn::Error {
            status,
            error_type: error_type.into(),
            message: message.into(),
        }
    }

    /// `529 overloaded_error`, as the API answers when it is overloaded.
    pub fn overloaded() -> Self {
        Turn::error(529, "overloaded_error", "Overloaded")
    }

    /// `429 rate_limit_error`, as the API answers when the account's limit is used up.
    pub fn rate_limited(message: impl Into<String>) -> Self {
        Turn::error(429, "rate_limit_error", message)
    }
}

/// The turns the main conversation gets, per key found in the prompt.
///
/// A request belongs to the script whose key occurs in the first user message as a whole
/// token (not inside a longer name: `t-1` does not match `t-10`); the longest such key wins.
/// Each main request takes the next turn of its script; once the list is used up, the last
/// turn repeats (an agent that retries gets the same answer). Requests no key matches get
/// the fallback turns, in the same way.
#[derive(Clone, Debug, Default)]
pub struct Script {
    tasks: Vec<(String, Vec<Turn>)>,
    fallback: Vec<Turn>,
}

impl Script {
    /// An empty script: every main request gets the fallback turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns for the conversation whose prompt contains `key` (e.g. a task ID).
    pub fn task(mut self, key: impl Into<String>, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.tasks.push((key.into(), turns.into_iter().collect()));
        self
    }

    /// Turns for prompts no key matches (default: one text saying no script matched).
    pub fn fallback(mut self, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.fallback = turns.into_iter().collect();
        self
    }

    fn key_for(&self, prompt: &str) -> Option<&str> {
        self.tasks
            .iter()
            .map(|(key, _)| key.as_str())
            .filter(|key| contains_token(prompt, key))
            .max_by_key(|key| key.len())
    }

    fn turns_for(&self, key: Option<&str>) -> &[Turn] {
        key.and_then(|key| self.tasks.iter().find(|(k, _)| k == key))
            .map_or(self.fallback.as_slice(), |(_, turns)| turns.as_slice())
    }
}

/// Whether `needle` occurs in `haystack` not directly next to a name character.
fn contains_token(haystack: &str, needle: &str) -> bool {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    !needle.is_empty()
        && haystack.match_indices(needle).any(|(at, _)| {
            let before = haystack[..at].chars().next_back();
            let after = haystack[at + needle.len()..].chars().next();
            !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
        })
}

/// What the server took a request to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A main-conversation `/v1/messages` call (it offered tools); `key` is the script matched.
    Main { key: Option<String> },
    /// A tool-less `/v1/messages` call (title generation, summaries), answered with a canned text.
    Side,
    /// `/v1/messages/count_tokens`.
    CountTokens,
    /// Anything else (probes, unknown paths).
    Other,
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// How it was classified.
    pub kind: RequestKind,
    /// The JSON body, when there was one.
    pub body: Option<Value>,
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

impl RecordedRequest {
    /// The `model` field of the body.
    pub fn model(&self) -> Option<&str> {
        self.body.as_ref()?.get("model")?.as_str()
    }

    /// The text blocks of the first user message (where agents put the prompt), joined.
    pub fn prompt_text(&self) -> String {
        self.messages()
            .iter()
            .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
            .map(|message| text_of(message.get("content")))
            .unwrap_or_default()
    }

    /// Every `tool_result` block in the conversation sent.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.messages()
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

    fn messages(&self) -> &[Value] {
        self.body
            .as_ref()
            .and_then(|body| body.get("messages"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
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

#[derive(Default)]
struct Recorded {
    requests: Vec<RecordedRequest>,
    next_turn: HashMap<Option<String>, usize>,
    hangs: usize,
    ids: u64,
}

struct Shared {
    script: Script,
    recorded: Mutex<Recorded>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.recorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running fake Anthropic API; stops when dropped.
pub struct FakeAnthropic {
    base_url: String,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeAnthropic {
    /// Starts the server on `127.0.0.1:0`, on a thread of its own.
    pub fn start(script: Script) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            script,
            recorded: Mutex::new(Recorded::default()),
            changed: Condvar::new(),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .fallback(other)
            .with_state(Arc::clone(&shared));
        std::thread::Builder::new()
            .name("fake-anthropic".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            base_url,
            shared,
            shutdown: Some(shutdown),
        })
    }

    /// `http://127.0.0.1:<port>`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The main-conversation requests matched to script `key`, in order.
    pub fn main_requests(&self, key: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(
                |request| matches!(&request.kind, RequestKind::Main { key: Some(k) } if k == key),
            )
            .collect()
    }

    /// Blocks until a [`Turn::Hang`] response has started, or `timeout` passes; says which.
    pub fn wait_until_hanging(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut recorded = self.shared.lock();
        while recorded.hangs == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            recorded = match self.shared.changed.wait_timeout(recorded, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }

    /// The environment that points claude-agent-acp (Claude Code) at this server, with a
    /// throwaway home under `home`, no telemetry, updates or other outside traffic, and no
    /// retries of API errors (a scripted error reaches the client at once).
    pub fn agent_env(&self, home: &Path) -> Vec<(String, String)> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        [
            ("ANTHROPIC_BASE_URL", self.base_url.clone()),
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

    /// Sets [`Self::agent_env`] on `command` and removes inherited `ANTHROPIC_*` / `CLAUDE_*`
    /// variables, so a developer's real credentials never reach the agent.
    pub fn configure_agent(&self, command: &mut std::process::Command, home: &Path) {
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("ANTHROPIC_") || name.starts_with("CLAUDE_") {
                command.env_remove(name.as_ref());
            }
        }
        command.envs(self.agent_env(home));
    }
}

impl Drop for FakeAnthropic {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// The claude-agent-acp executable installed by `scripts/install-agents`, or an error saying
/// to run it.
pub fn claude_agent_acp_bin() -> Result<PathBuf, String> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agents/node_modules/.bin/claude-agent-acp");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "claude-agent-acp is not installed ({} is missing): run scripts/install-agents",
            bin.display()
        ))
    }
}

async fn messages(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "body is not JSON",
        );
    };
    let offers_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    let mut recorded_request = RecordedRequest {
        method: Method::POST.to_string(),
        uri: uri.to_string(),
        kind: RequestKind::Side,
        body: Some(request),
    };
    let (turn, id) = {
        let mut recorded = shared.lock();
        recorded.ids += 1;
        let id = recorded.ids;
        let turn = if offers_tools {
            let key = shared
                .script
                .key_for(&recorded_request.prompt_text())
                .map(str::to_owned);
            let turns = shared.script.turns_for(key.as_deref());
            let index = recorded.next_turn.entry(key.clone()).or_insert(0);
            let turn = turns
                .get(*index)
                .or(turns.last())
                .cloned()
                .unwrap_or_else(|| {
                    Turn::text("The fake Anthropic server has no script for this prompt.")
                });
            *index += 1;
            recorded_request.kind = RequestKind::Main { key };
            turn
        } else {
            Turn::text(SIDE_ANSWER)
        };
        if matches!(turn, Turn::Hang { .. }) {
            recorded.hangs += 1;
        }
        recorded.requests.push(recorded_request.clone());
        shared.changed.notify_all();
        (turn, id)
    };
    let body = recorded_request.body.unwrap_or_default();
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("claude-fake")
        .to_owned();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let reply = Reply {
        message_id: format!("msg_fake_{id:04}"),
        tool_use_id: format!("toolu_fake_{id:04}"),
        model,
        input_tokens: estimate_tokens(body.to_string().len()),
    };
    match turn {
        Turn::Error {
            status,
            error_type,
            message,
        } => api_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &error_type,
            &message,
        ),
        turn if stream => reply.stream(&turn),
        turn => reply.json(&turn),
    }
}

async fn count_tokens(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    record(&shared, Method::POST, &uri, RequestKind::CountTokens, &body);
    let tokens = estimate_tokens(body.len());
    axum::Json(json!({ "input_tokens": tokens })).into_response()
}

async fn other(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    record(&shared, method.clone(), &uri, RequestKind::Other, &body);
    if method == Method::GET || method == Method::HEAD {
        axum::Json(json!({})).into_response()
    } else {
        api_error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("the fake Anthropic API does not serve {method} {uri}"),
        )
    }
}

fn record(shared: &Shared, method: Method, uri: &Uri, kind: RequestKind, body: &[u8]) {
    let mut recorded = shared.lock();
    recorded.requests.push(RecordedRequest {
        method: method.to_string(),
        uri: uri.to_string(),
        kind,
        body: serde_json::from_slice(body).ok(),
    });
    shared.changed.notify_all();
}

/// A rough token count for `bytes` of text (about four bytes a token).
fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

fn api_error(status: StatusCode, error_type: &str, message: &str) -> Response {
    let body = json!({
        "type": "error",
        "error": { "type": error_type, "message": message },
        "request_id": "req_fake",
    });
    (status, [("request-id", "req_fake")], axum::Json(body)).into_response()
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
        let hang = matches!(turn, Turn::Hang { .. });
        match turn {
            Turn::Text { text, stop_reason } => {
                events.extend(text_block_events(0, text, true));
                events.push(self.message_end(stop_reason, estimate_tokens(text.len())));
            }
            Turn::Hang { partial_text } => events.extend(text_block_events(0, partial_text, false)),
            Turn::ToolUse { name, input } => {
                let json = input.to_string();
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
        let chunks =
            futures::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>));
        let body = if hang {
            Body::from_stream(chunks.chain(futures::stream::pending()))
        } else {
            Body::from_stream(chunks)
        };
        let mut response = Response::new(body);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }

    /// The response as one JSON message (`stream: false`).
    fn json(&self, turn: &Turn) -> Response {
        let (content, stop_reason, output_tokens) = match turn {
            Turn::Text { text, stop_reason } => (
                vec![json!({ "type": "text", "text": text })],
                stop_reason.as_str(),
                estimate_tokens(text.len()),
            ),
            Turn::ToolUse { name, input } => (
                vec![
                    json!({ "type": "tool_use", "id": self.tool_use_id, "name": name, "input": input }),
                ],
                "tool_use",
                estimate_tokens(input.to_string().len()),
            ),
            Turn::Hang { .. } => {
                return Response::new(Body::from_stream(futures::stream::pending::<
                    Result<Bytes, std::convert::Infallible>,
                >()));
            }
            Turn::Error { .. } => (Vec::new(), "end_turn", 0),
        };
        axum::Json(self.message(content, Some(stop_reason), output_tokens)).into_response()
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

/// `text` in pieces of at most `chars` characters.
fn split_chars(text: &str, chars: usize) -> Vec<String> {
    let all: Vec<char> = text.chars().collect();
    all.chunks(chars.max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}
