//! A scripted fake of the Gemini API (`POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`
//! and the calls gemini-cli makes beside it), for driving `gemini --acp` offline.
//!
//! A part of tests/support/real_agents.rs (it uses its siblings `fake_model` and `real_agent`).
//!
//! ```ignore
//! let fake = FakeGemini::start(Script::new().task("t-1", [Turn::text("<task-done>t-1</task-done>")]))?;
//! let launch = fake.gemini_cli(&home)?;
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::fake_model::{
    FakeApi, RequestKind, Script, Shared, TEXT_CHUNK_CHARS, Turn, Wire, estimate_tokens,
    event_stream, json_error, offers_tools, split_chars,
};
use super::real_agent::{AgentLaunch, installed_agent_bin};

/// The model gemini-cli is started with (`-m`).
pub const GEMINI_MODEL: &str = "gemini-2.5-pro";

/// The API key gemini-cli is started with; the fake accepts any key.
pub const FAKE_GEMINI_KEY: &str = "fake-gemini-key-for-tests";

/// The Gemini API.
pub struct Gemini;

impl Wire for Gemini {
    const NAME: &'static str = "fake-gemini";

    fn routes() -> Router<Arc<Shared>> {
        Router::new().fallback(dispatch)
    }
}

/// A running fake Gemini API; stops when dropped.
pub type FakeGemini = FakeApi<Gemini>;

impl FakeGemini {
    /// A call of gemini-cli's `run_shell_command` tool.
    pub fn shell(command: &str) -> Turn {
        Turn::shell_call("run_shell_command", command)
    }

    /// A call of gemini-cli's `write_file` tool (`file_path` absolute).
    pub fn write_file(file_path: &Path, content: &str) -> Turn {
        Turn::write_call("write_file", file_path, content)
    }

    /// `500 INTERNAL`, as the API answers an internal error.
    pub fn server_error() -> Turn {
        Turn::error(
            500,
            json!({ "error": { "code": 500, "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
                               "status": "INTERNAL" } }),
        )
    }

    /// `429 RESOURCE_EXHAUSTED` naming a per-day quota: the daily quota is used up.
    pub fn daily_quota_exhausted() -> Turn {
        Turn::error(
            429,
            json!({ "error": { "code": 429,
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    { "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                      "violations": [ { "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                                        "quotaDimensions": { "location": "global", "model": GEMINI_MODEL },
                                        "quotaValue": "50" } ] },
                    { "@type": "type.googleapis.com/google.rpc.Help",
                      "links": [ { "description": "Learn more about Gemini API quotas",
                                   "url": "https://ai.google.dev/gemini-api/docs/rate-limits" } ] }
                ] } }),
        )
    }

    /// `429 RESOURCE_EXHAUSTED` with no quota details: a plain rate limit.
    pub fn rate_limited() -> Turn {
        Turn::error(
            429,
            json!({ "error": { "code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                               "status": "RESOURCE_EXHAUSTED" } }),
        )
    }

    /// Writes `$HOME/.gemini/settings.json` under `home` and returns how to start
    /// `gemini --acp` against this server.
    pub fn gemini_cli(&self, home: &Path) -> std::io::Result<AgentLaunch> {
        let settings_dir = home.join(".gemini");
        std::fs::create_dir_all(&settings_dir)?;
        let settings = json!({
            "general": { "maxAttempts": 1, "disableAutoUpdate": true, "disableUpdateNag": true },
            "privacy": { "usageStatisticsEnabled": false },
            "telemetry": { "enabled": false },
            "security": { "auth": { "selectedType": "gemini-api-key" } },
        });
        std::fs::write(
            settings_dir.join("settings.json"),
            serde_json::to_string_pretty(&settings)?,
        )?;
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        Ok(AgentLaunch {
            program: installed_agent_bin("gemini").map_err(std::io::Error::other)?,
            args: vec!["--acp".to_owned(), "-m".to_owned(), GEMINI_MODEL.to_owned()],
            env: vec![
                ("HOME".to_owned(), path(home.to_path_buf())),
                ("GEMINI_API_KEY".to_owned(), FAKE_GEMINI_KEY.to_owned()),
                (
                    "GOOGLE_GEMINI_BASE_URL".to_owned(),
                    self.base_url().to_owned(),
                ),
                ("XDG_CONFIG_HOME".to_owned(), path(home.join(".config"))),
                ("XDG_CACHE_HOME".to_owned(), path(home.join(".cache"))),
                ("GEMINI_CLI_NO_RELAUNCH".to_owned(), "true".to_owned()),
                ("NO_BROWSER".to_owned(), "1".to_owned()),
            ],
            env_removed_prefixes: vec![
                "GEMINI_".to_owned(),
                "GOOGLE_".to_owned(),
                "VERTEX".to_owned(),
            ],
        })
    }
}

/// gemini-cli against a fake scripted with `script`, in the home `home`.
pub fn gemini(script: Script, home: &Path) -> (FakeGemini, AgentLaunch) {
    FakeGemini::start_for(script, |fake| fake.gemini_cli(home))
}

/// The text parts of every user turn in a Gemini request's `contents`, joined.
pub fn user_text(body: &Value) -> String {
    body.get("contents")
        .and_then(Value::as_array)
        .map(|contents| {
            contents
                .iter()
                .filter(|content| content.get("role").and_then(Value::as_str) == Some("user"))
                .filter_map(|content| content.get("parts").and_then(Value::as_array))
                .flatten()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The `functionResponse` parts of a Gemini request (what tools returned).
pub fn tool_responses(body: &Value) -> Vec<Value> {
    body.get("contents")
        .and_then(Value::as_array)
        .map(|contents| {
            contents
                .iter()
                .filter_map(|content| content.get("parts").and_then(Value::as_array))
                .flatten()
                .filter_map(|part| part.get("functionResponse").cloned())
                .collect()
        })
        .unwrap_or_default()
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let model = path
        .rsplit('/')
        .next()
        .and_then(|last| last.split_once(':'))
        .map_or(GEMINI_MODEL, |(model, _)| model)
        .to_owned();
    if method != Method::POST {
        shared.record(&method, &uri, RequestKind::Other, &body);
        return axum::Json(json!({})).into_response();
    }
    if path.ends_with(":countTokens") {
        shared.record(&method, &uri, RequestKind::Other, &body);
        return axum::Json(json!({ "totalTokens": estimate_tokens(body.len()) })).into_response();
    }
    let streamed = path.ends_with(":streamGenerateContent");
    if !streamed && !path.ends_with(":generateContent") {
        shared.record(&method, &uri, RequestKind::Other, &body);
        return json_error(
            404,
            &json!({ "error": { "code": 404, "status": "NOT_FOUND",
                                "message": format!("the fake Gemini API does not serve {method} {uri}") } }),
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return json_error(
            400,
            &json!({ "error": { "code": 400, "status": "INVALID_ARGUMENT", "message": "body is not JSON" } }),
        );
    };
    shared.saw_key(
        headers
            .get("x-goog-api-key")
            .and_then(|key| key.to_str().ok()),
    );
    let reply = Reply {
        model,
        input_tokens: estimate_tokens(body.len()),
    };
    if !offers_tools(&request) {
        shared.record(&method, &uri, RequestKind::Side, &body);
        shared.sent(reply.input_tokens, 1);
        return reply.side(&request, streamed);
    }
    let prompt = user_text(&request);
    let (turn, id) = shared.main_turn(&method, &uri, request, &prompt);
    if let Some(output) = output_sent(&turn, streamed) {
        shared.sent(reply.input_tokens, output);
    }
    match turn {
        Turn::Error { status, body } => json_error(status, &body),
        turn if streamed => reply.stream(&turn, id),
        turn => axum::Json(reply.whole(&turn, id)).into_response(),
    }
}

/// The output count the answer to `turn` ends with (a hanging stream's chunks count 0);
/// `None` when the answer carries no usage.
fn output_sent(turn: &Turn, streamed: bool) -> Option<u64> {
    match turn {
        Turn::Text(text) | Turn::MaxTokens(text) => Some(estimate_tokens(text.len())),
        Turn::Hang(text) if streamed => (!text.is_empty()).then_some(0),
        Turn::Hang(text) => Some(estimate_tokens(text.len())),
        Turn::ToolCall { arguments, .. } if streamed => {
            Some(estimate_tokens(arguments.to_string().len()))
        }
        Turn::ToolCall { .. } => Some(1),
        Turn::Error { .. } => None,
    }
}

/// What one response is made of, besides its turn.
struct Reply {
    model: String,
    input_tokens: u64,
}

impl Reply {
    fn chunk(
        &self,
        parts: Vec<Value>,
        finish_reason: Option<&str>,
        output_tokens: u64,
        id: u64,
    ) -> Value {
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        if let Some(reason) = finish_reason {
            candidate["finishReason"] = json!(reason);
        }
        json!({
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": self.input_tokens,
                "candidatesTokenCount": output_tokens,
                "totalTokenCount": self.input_tokens + output_tokens,
            },
            "modelVersion": self.model,
            "responseId": format!("fake-response-{id:04}"),
        })
    }

    /// The turn as server-sent events of `GenerateContentResponse` chunks.
    fn stream(&self, turn: &Turn, id: u64) -> Response {
        let mut chunks = Vec::new();
        match turn {
            Turn::Text(text) | Turn::MaxTokens(text) | Turn::Hang(text) => {
                let pieces = split_chars(text, TEXT_CHUNK_CHARS);
                let last = pieces.len().saturating_sub(1);
                for (index, piece) in pieces.iter().enumerate() {
                    let finish = match turn {
                        Turn::Text(_) if index == last => Some("STOP"),
                        Turn::MaxTokens(_) if index == last => Some("MAX_TOKENS"),
                        _ => None,
                    };
                    let tokens = if finish.is_some() {
                        estimate_tokens(text.len())
                    } else {
                        0
                    };
                    chunks.push(self.chunk(vec![json!({ "text": piece })], finish, tokens, id));
                }
            }
            Turn::ToolCall { name, arguments } => chunks.push(self.chunk(
                vec![json!({ "functionCall": { "name": name, "args": arguments } })],
                Some("STOP"),
                estimate_tokens(arguments.to_string().len()),
                id,
            )),
            Turn::Error { .. } => {}
        }
        let events = chunks
            .iter()
            .map(|chunk| Bytes::from(format!("data: {chunk}\r\n\r\n")))
            .collect();
        event_stream(events, matches!(turn, Turn::Hang(_)))
    }

    /// The turn as one `GenerateContentResponse`.
    fn whole(&self, turn: &Turn, id: u64) -> Value {
        match turn {
            Turn::Text(text) | Turn::Hang(text) => self.chunk(
                vec![json!({ "text": text })],
                Some("STOP"),
                estimate_tokens(text.len()),
                id,
            ),
            Turn::MaxTokens(text) => self.chunk(
                vec![json!({ "text": text })],
                Some("MAX_TOKENS"),
                estimate_tokens(text.len()),
                id,
            ),
            Turn::ToolCall { name, arguments } => self.chunk(
                vec![json!({ "functionCall": { "name": name, "args": arguments } })],
                Some("STOP"),
                1,
                id,
            ),
            Turn::Error { .. } => self.chunk(Vec::new(), Some("OTHER"), 0, id),
        }
    }

    /// A tool-less call (gemini-cli's next-speaker and routing checks, titles): JSON the
    /// checks accept when a schema is asked for, else a short text.
    fn side(&self, request: &Value, streamed: bool) -> Response {
        let wants_json = request
            .pointer("/generationConfig/responseMimeType")
            .and_then(Value::as_str)
            == Some("application/json");
        let text = if wants_json {
            json!({ "reasoning": "The model answered; the user speaks next.", "next_speaker": "user",
                    "model_choice": "pro" })
            .to_string()
        } else {
            "Ralph task".to_owned()
        };
        let chunk = self.chunk(vec![json!({ "text": text })], Some("STOP"), 1, 0);
        if streamed {
            event_stream(vec![Bytes::from(format!("data: {chunk}\r\n\r\n"))], false)
        } else {
            axum::Json(chunk).into_response()
        }
    }
}
