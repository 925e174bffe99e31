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

use super::activity::Activity;

/// Newline-delimited JSON-RPC over the agent's stdin and stdout; non-blank lines that
/// are not JSON objects go to `noise` instead of the ACP connection.
pub fn agent_lines(
    stdin: ChildStdin,
    stdout: ChildStdout,
    activity: Arc<Activity>,
    noise: mpsc::UnboundedSender<String>,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
> {
    let incoming = futures::stream::unfold(Some(BufReader::new(stdout).lines()), move |lines| {
        let activity = activity.clone();
        let noise = noise.clone();
        async move {
            let mut lines = lines?;
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        activity.touch();
                        if is_json_object(&line) {
                            return Some((Ok(line), Some(lines)));
                        }
                        if !line.trim().is_empty() {
                            // The supervisor stops listening once the attempt is over.
                            let _ = noise.send(line);
                        }
                    }
                    Ok(None) => return None,
                    Err(error) => return Some((Err(error), None)),
                }
            }
        }
    });
    let outgoing = futures::sink::unfold(stdin, |mut stdin, line: String| async move {
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok::<_, io::Error>(stdin)
    });
    Lines::new(outgoing, incoming)
}

/// Whether a line can be a JSON-RPC message (checked cheaply: a JSON object starts with `{`).
fn is_json_object(line: &str) -> bool {
    line.trim_start().starts_with('{')
}
