//! Watching the agent's stderr live: relay each line, remember the first one, and raise
//! an alarm on a crash pattern or a usage-limit report.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::mpsc;

use super::events::now_ms;
use super::patterns::Patterns;
use crate::engine::attempt::Exhaustion;

/// What the watcher reports to the supervisor.
#[derive(Debug)]
pub enum StderrAlarm {
    /// A line matched a crash pattern.
    Crash {
        /// The pattern.
        pattern: String,
        /// The line.
        line: String,
    },
    /// A line reported quota exhaustion.
    Exhausted {
        /// What was found.
        found: Exhaustion,
        /// A definite usage-limit report (the agent cannot go on), not rate-limit wording.
        definite: bool,
    },
}

/// The first non-empty stderr line, for crash summaries.
pub type FirstLine = Arc<Mutex<Option<String>>>;

/// Reads stderr to its end.
pub async fn watch(
    stderr: ChildStderr,
    patterns: Patterns,
    relay: bool,
    first_line: FirstLine,
    alarms: mpsc::UnboundedSender<StderrAlarm>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if relay {
            // A closed runner stderr must not stop the watch.
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        if !line.trim().is_empty() {
            let mut first = match first_line.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            first.get_or_insert_with(|| line.clone());
        }
        let alarm = if let Some(pattern) = patterns.crash_in(&line) {
            Some(StderrAlarm::Crash {
                pattern: pattern.to_string(),
                line,
            })
        } else {
            patterns
                .exhaustion_in_diagnostic(&line, now_ms() / 1000)
                .map(|found| StderrAlarm::Exhausted {
                    found,
                    definite: patterns.is_definite_exhaustion(&line),
                })
        };
        if let Some(alarm) = alarm {
            // The supervisor stops listening once the attempt is over.
            let _ = alarms.send(alarm);
        }
    }
}
