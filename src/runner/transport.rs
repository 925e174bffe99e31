//! The agent's stdio as an ACP line transport that records every incoming line as
//! traffic and sets aside lines that cannot be JSON-RPC (a program that is not an ACP
//! agent, or one that prints to stdout).

use std::io;
use std::sync::Arc;

use agent_client_protocol::Lines;
use futures::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::activity::Activity;

/// Newline-delimited JSON-RPC over the agent's stdin and stdout; non-blank lines that
/// are not an agent's JSON-RPC messages (plain text, JSON log lines, echoed requests) go
/// to `noise` instead of the ACP connection.
///
/// Stdout is read by its own task (returned), so every line the agent printed reaches
/// `noise` even when the connection ends first (e.g. a program that printed its usage and
/// exited before `initialize` could be written): await the task to read stdout to its end.
pub(super) fn agent_lines(
    stdin: ChildStdin,
    stdout: ChildStdout,
    activity: Arc<Activity>,
    noise: mpsc::UnboundedSender<String>,
) -> (
    Lines<
        impl Sink<String, Error = io::Error> + Send + 'static,
        impl Stream<Item = io::Result<String>> + Send + 'static,
    >,
    JoinHandle<()>,
) {
    let (json_tx, json_rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_stdout(stdout, activity, json_tx, noise));
    let incoming = futures::stream::unfold(json_rx, |mut lines| async move {
        let line = lines.recv().await?;
        Some((line, lines))
    });
    let outgoing = futures::sink::unfold(stdin, |mut stdin, line: String| async move {
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok::<_, io::Error>(stdin)
    });
    (Lines::new(outgoing, incoming), reader)
}

/// Reads the agent's stdout to its end: JSON-RPC messages to `json` (while the connection
/// listens), other non-blank lines to `noise`.
async fn read_stdout(
    stdout: ChildStdout,
    activity: Arc<Activity>,
    json: mpsc::UnboundedSender<io::Result<String>>,
    noise: mpsc::UnboundedSender<String>,
) {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                activity.touch();
                if is_json_object(&line) {
                    // The connection may be gone (the attempt is over): keep reading for noise.
                    let _ = json.send(Ok(line));
                } else if !line.trim().is_empty() {
                    // The supervisor stops listening once the attempt is over.
                    let _ = noise.send(line);
                }
            }
            Ok(None) => return,
            Err(error) => {
                let _ = json.send(Err(error));
                return;
            }
        }
    }
}
/// Methods only a client sends: an agent never sends them, a program echoing its input
/// (`cat`) sends them back.
const CLIENT_METHODS: [&str; 9] = [
    "initialize",
    "authenticate",
    "session/new",
    "session/load",
    "session/prompt",
    "session/cancel",
    "session/set_mode",
    "session/set_model",
    "session/set_config_option",
];

/// The fields that tell an agent's JSON-RPC message from other JSON (log lines, echoes).
#[derive(serde::Deserialize)]
struct Envelope {
    jsonrpc: Option<String>,
    method: Option<String>,
}

/// Whether a line is a JSON-RPC 2.0 message an agent may send: a JSON object with
/// `"jsonrpc": "2.0"` whose method, if any, is not one of the client's own.
fn is_json_object(line: &str) -> bool {
    if !line.trim_start().starts_with('{') {
        return false;
    }
    serde_json::from_str::<Envelope>(line).is_ok_and(|envelope| {
        envelope.jsonrpc.as_deref() == Some("2.0")
            && !envelope
                .method
                .is_some_and(|method| CLIENT_METHODS.contains(&method.as_str()))
    })
}
