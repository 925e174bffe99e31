//! Loosely typed ACP messages the runner and the scripted agent share.
//!
//! The schema's `PromptResponse` only knows the five standard stop reasons and its
//! `SessionUpdate` only the update kinds of this schema version; an agent that sends
//! anything else would make the typed message fail to parse and the turn would be lost.
//! These wrappers keep the stop reason and the update as raw values, so the runner can
//! record an unknown stop reason verbatim and log an unknown update kind.

use agent_client_protocol::v1::schema::ContentBlock;
use agent_client_protocol::{JsonRpcNotification, JsonRpcRequest, JsonRpcResponse};
use serde::{Deserialize, Serialize};

/// `session/prompt`, answered with a raw stop reason.
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/prompt", response = RawPromptResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPrompt {
    /// The session the prompt is for.
    pub session_id: String,
    /// The prompt's content blocks.
    pub prompt: Vec<ContentBlock>,
}

/// The answer to `session/prompt`, with the stop reason kept as a string.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonRpcResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPromptResponse {
    /// Why the turn ended (`end_turn`, `max_tokens`, ... or an agent-specific value).
    pub stop_reason: String,
    /// Token usage of the turn (ACP `unstable_end_turn_token_usage`), when the agent sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TurnUsage>,
    /// Agent-specific extras (gemini-cli reports tokens in `_meta.quota`).
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

/// Token usage of one prompt turn, as the prompt response carries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnUsage {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_read_tokens: Option<u64>,
    /// Input tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_write_tokens: Option<u64>,
}

/// `session/update`, with the update kept as raw JSON.
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcNotification)]
#[notification(method = "session/update")]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSessionUpdate {
    /// The session the update belongs to.
    pub session_id: String,
    /// The update (`{"sessionUpdate": "agent_message_chunk", ...}`).
    pub update: serde_json::Value,
}

/// `session/new`, answered with the session's model information kept raw (the schema's
/// `NewSessionResponse` drops the unstable `models` field).
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/new", response = RawNewSessionResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawNewSession {
    /// The session's working directory.
    pub cwd: std::path::PathBuf,
    /// MCP servers for the session (none).
    pub mcp_servers: Vec<serde_json::Value>,
}

/// The answer to `session/new`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonRpcResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawNewSessionResponse {
    /// The new session.
    pub session_id: String,
    /// The unstable model state (`{"currentModelId": ..}`), when the agent sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<serde_json::Value>,
    /// The session's configuration options (a `model` selector among them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_options: Option<serde_json::Value>,
    /// The session's modes (`{"currentModeId", "availableModes"}`), when the agent has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<serde_json::Value>,
}
