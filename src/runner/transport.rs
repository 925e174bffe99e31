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
/// are not JSON objects go to `noise` instead of the ACP connection.
///
/// Stdout is read by its own task (returned), so every line the agent printed reaches
/// `noise` even when the connection ends first (e.g. a program that printed its usage and
/// exited before `initialize` could be written): await the task to read stdout to its end.
pub fn agent_lines(
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

/// Reads the agent's stdout to its end: JSON objects to `json` (while the connection
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
/// Whether a line can be a JSON-RPC message (checked cheaply: a JSON object starts with `{`).
fn is_json_object(line: &str) -> bool {
    line.trim_start().starts_with('{')
}
