//! What the fake model servers (`fake_anthropic.rs`, `fake_openai.rs`, `fake_gemini.rs`) share: the agent-neutral
//! [`Turn`]s a test scripts, the [`Script`] that picks them by task, and the [`ModelServer`]
//! that records every request and runs an axum router on `127.0.0.1:0` on a thread of its own.
//!
//! Each wire format (OpenAI Responses, Gemini) only encodes turns; choosing the turn, recording
//! and waiting for hangs live here once.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

/// What ralph's prompts say just before the task ID.
pub const TASK_ID_MARKER: &str = "Your task ID is:";

/// Characters of text per streamed delta, so sigils may be split across chunks.
pub const TEXT_CHUNK_CHARS: usize = 24;

/// One model response in the main conversation, whatever the wire format.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// Assistant text that ends the turn normally.
    Text(String),
    /// Assistant text cut off by the output token limit.
    MaxTokens(String),
    /// A call of the agent's tool `name` with `arguments`; the agent runs it and calls again.
    ToolCall { name: String, arguments: Value },
    /// Streams the start of a text answer, then never finishes (until the client goes away).
    Hang(String),
    /// An HTTP error with a JSON body in the API's error format.
    Error { status: u16, body: Value },
}

impl Turn {
    /// Assistant text ending the turn.
    pub fn text(text: impl Into<String>) -> Self {
        Turn::Text(text.into())
    }

    /// Assistant text cut off by the output token limit.
    pub fn max_tokens(text: impl Into<String>) -> Self {
        Turn::MaxTokens(text.into())
    }

    /// A call of tool `name`.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Turn::ToolCall {
            name: name.into(),
            arguments,
        }
    }

    /// A call of the shell tool `name` running `command` (arguments `command` and
    /// `description`, as Claude Code's `Bash` and gemini-cli's `run_shell_command` take them).
    pub fn shell_call(name: &str, command: &str) -> Self {
        let arguments =
            serde_json::json!({ "command": command, "description": "Run a shell command" });
        Self::tool_call(name, arguments)
    }

    /// A call of the file-writing tool `name` (arguments `file_path`, absolute, and
    /// `content`, as Claude Code's `Write` and gemini-cli's `write_file` take them).
    pub fn write_call(name: &str, file_path: &std::path::Path, content: &str) -> Self {
        let arguments = serde_json::json!({ "file_path": file_path, "content": content });
        Self::tool_call(name, arguments)
    }

    /// A response that starts streaming `partial_text` and then hangs.
    pub fn hang(partial_text: impl Into<String>) -> Self {
        Turn::Hang(partial_text.into())
    }

    /// An HTTP error with `body`.
    pub fn error(status: u16, body: Value) -> Self {
        Turn::Error { status, body }
    }
}

/// The turns the main conversation gets, per task.
///
/// A request belongs to a script by its prompt: when the prompt states `Your task ID is: ID`
/// (as ralph's prompts do), to the script keyed `ID` exactly; otherwise to the script whose
/// key occurs as a whole token, the longest winning. Each main request takes the next turn of
/// its script; once the list is used up the last turn repeats (an agent that retries gets the
/// same answer). Requests no key matches get the fallback turns, in the same way.
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

    /// Turns for the conversation whose prompt names `key` (a task ID).
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
        let mut keys = self.tasks.iter().map(|(key, _)| key.as_str());
        match stated_task_id(prompt) {
            Some(id) => keys.find(|key| *key == id),
            None => keys
                .filter(|key| contains_token(prompt, key))
                .max_by_key(|key| key.len()),
        }
    }

    fn turns_for(&self, key: Option<&str>) -> &[Turn] {
        key.and_then(|key| self.tasks.iter().find(|(k, _)| k == key))
            .map_or(self.fallback.as_slice(), |(_, turns)| turns.as_slice())
    }
}

/// The ID after [`TASK_ID_MARKER`] in `prompt`, without trailing punctuation.
fn stated_task_id(prompt: &str) -> Option<&str> {
    let (_, rest) = prompt.split_once(TASK_ID_MARKER)?;
    let id = rest.split_whitespace().next()?;
    Some(id.trim_end_matches(['.', ',', ';', ':']))
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
    /// A main-conversation model call; `key` is the script matched.
    Main { key: Option<String> },
    /// A model call outside the main conversation (titles, checks), answered with a canned text.
    Side,
    /// A token-count request, answered with an estimate.
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

#[derive(Default)]
struct Recorded {
    requests: Vec<RecordedRequest>,
    next_turn: HashMap<Option<String>, usize>,
    hangs: usize,
    sent: TokensSent,
    keys: Vec<String>,
}

/// Tokens the server's answers announced, summed over every answer (main and side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokensSent {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Answers that carried usage.
    pub answers: u32,
}

/// The script and the record, shared by the server's handlers and the test.
pub struct Shared {
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

    /// Records a main-conversation request whose prompt is `prompt` and returns its turn and
    /// a serial number (for response and call IDs).
    pub fn main_turn(&self, method: &Method, uri: &Uri, body: Value, prompt: &str) -> (Turn, u64) {
        let key = self.script.key_for(prompt).map(str::to_owned);
        let mut recorded = self.lock();
        let turns = self.script.turns_for(key.as_deref());
        let index = recorded.next_turn.entry(key.clone()).or_insert(0);
        let turn = turns
            .get(*index)
            .or(turns.last())
            .cloned()
            .unwrap_or_else(|| Turn::text("The fake model server has no script for this prompt."));
        *index += 1;
        if matches!(turn, Turn::Hang(_)) {
            recorded.hangs += 1;
        }
        recorded.requests.push(RecordedRequest {
            method: method.to_string(),
            uri: uri.to_string(),
            kind: RequestKind::Main { key },
            body: Some(body),
        });
        self.changed.notify_all();
        (turn, recorded.requests.len() as u64)
    }

    /// Adds the usage one answer announced to [`ModelServer::tokens_sent`].
    pub fn sent(&self, input: u64, output: u64) {
        let mut recorded = self.lock();
        recorded.sent.input += input;
        recorded.sent.output += output;
        recorded.sent.answers += 1;
    }

    /// Records the API key a request presented.
    pub fn saw_key(&self, key: Option<&str>) {
        self.lock().keys.push(key.unwrap_or("(none)").to_owned());
    }

    /// Records a request that is not part of the main conversation.
    pub fn record(&self, method: &Method, uri: &Uri, kind: RequestKind, body: &[u8]) -> u64 {
        let mut recorded = self.lock();
        recorded.requests.push(RecordedRequest {
            method: method.to_string(),
            uri: uri.to_string(),
            kind,
            body: serde_json::from_slice(body).ok(),
        });
        self.changed.notify_all();
        recorded.requests.len() as u64
    }
}

/// A wire format a fake model API speaks: the name of its server thread and its routes.
pub trait Wire {
    /// The server thread's name.
    const NAME: &'static str;

    /// The routes, on the shared script and record.
    fn routes() -> Router<Arc<Shared>>;

    /// The answer to a request no route serves (see [`unserved`]): a 404 unless the API
    /// answers it otherwise.
    fn unserved(_method: &Method, _uri: &Uri) -> Response {
        StatusCode::NOT_FOUND.into_response()
    }
}

/// The fallback route of a [`Wire`]: records the request, answers with [`Wire::unserved`].
pub async fn unserved<W: Wire>(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    shared.record(&method, &uri, RequestKind::Other, &body);
    W::unserved(&method, &uri)
}

/// A running fake model API speaking `W` (e.g. `FakeOpenAi`); stops when dropped.
pub struct FakeApi<W> {
    server: ModelServer,
    wire: PhantomData<W>,
}

impl<W> std::ops::Deref for FakeApi<W> {
    type Target = ModelServer;

    fn deref(&self) -> &ModelServer {
        &self.server
    }
}

impl<W: Wire> FakeApi<W> {
    /// Starts the server on `127.0.0.1:0`, on a thread of its own.
    pub fn start(script: Script) -> std::io::Result<Self> {
        Ok(Self {
            server: ModelServer::start(script, W::NAME, W::routes)?,
            wire: PhantomData,
        })
    }

    /// Starts the server and configures an agent against it with `configure`; panics with
    /// the reason when either fails (a test cannot go on without them).
    pub fn start_for<A>(
        script: Script,
        configure: impl FnOnce(&Self) -> std::io::Result<A>,
    ) -> (Self, A) {
        let fake = Self::start(script)
            .unwrap_or_else(|error| panic!("start the {} server: {error}", W::NAME));
        let agent = configure(&fake)
            .unwrap_or_else(|error| panic!("configure the agent for {}: {error}", W::NAME));
        (fake, agent)
    }
}

/// A running fake model server; stops when dropped.
pub struct ModelServer {
    base_url: String,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ModelServer {
    /// Serves `router` (built on the shared state) on `127.0.0.1:0`, on a thread of its own.
    pub fn start(
        script: Script,
        name: &str,
        router: impl FnOnce() -> Router<Arc<Shared>>,
    ) -> std::io::Result<Self> {
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
        let app = router().with_state(Arc::clone(&shared));
        std::thread::Builder::new()
            .name(name.to_owned())
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

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The usage every answer announced, summed (what a meter on the wire must count).
    pub fn tokens_sent(&self) -> TokensSent {
        self.shared.lock().sent
    }

    /// The API keys the requests presented, in order.
    pub fn keys_seen(&self) -> Vec<String> {
        self.shared.lock().keys.clone()
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

    /// Every request as `METHOD URI KIND BODY` lines, for failure messages.
    pub fn traffic(&self) -> String {
        self.requests()
            .iter()
            .map(|request| {
                let body = request
                    .body
                    .as_ref()
                    .map(|body| {
                        let text = body.to_string();
                        text.chars().take(600).collect::<String>()
                    })
                    .unwrap_or_default();
                format!(
                    "{} {} {:?} {body}\n",
                    request.method, request.uri, request.kind
                )
            })
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// A rough token count for `bytes` of text (about four bytes a token).
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

/// `text` in pieces of at most `chars` characters.
pub fn split_chars(text: &str, chars: usize) -> Vec<String> {
    let all: Vec<char> = text.chars().collect();
    all.chunks(chars.max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

/// Whether a model request offers the agent tools (the main conversation does; titles and
/// checks do not).
pub fn offers_tools(request: &Value) -> bool {
    request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty())
}

/// One server-sent event named `event` carrying `data`.
pub fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// A `text/event-stream` response of `events`; when `hang`, the stream then never ends.
pub fn event_stream(events: Vec<Bytes>, hang: bool) -> Response {
    let chunks = futures::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>));
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

/// An HTTP error response with a JSON body.
pub fn json_error(status: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body.clone()),
    )
        .into_response()
}
