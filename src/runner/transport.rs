//! The agent's stdio as an ACP line transport that records every incoming line as
//! traffic.

use std::io;
use std::sync::Arc;

use agent_client_protocol::Lines;
use futures::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use super::activity::Activity;

/// Newline-delimited JSON-RPC over the agent's stdin and stdout.
pub fn agent_lines(
    stdin: ChildStdin,
    stdout: ChildStdout,
    activity: Arc<Activity>,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
> {
    let incoming = futures::stream::unfold(Some(BufReader::new(stdout).lines()), move |lines| {
        let activity = activity.clone();
        async move {
            let mut lines = lines?;
            match lines.next_line().await {
                Ok(Some(line)) => {
                    activity.touch();
                    Some((Ok(line), Some(lines)))
                }
                Ok(None) => None,
                Err(error) => Some((Err(error), None)),
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
