//! Watching the agent's stderr live: relay each line, keep the lines a failure summary
//! needs, and raise an alarm on a crash pattern or a usage-limit report.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::mpsc;

use super::patterns::{self, Patterns};
use crate::clock::now_ms;
use crate::engine::attempt::Exhaustion;
use crate::sync::lock;

/// What the watcher reports to the supervisor.
#[derive(Debug)]
pub(super) enum StderrAlarm {
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

/// Error-like lines kept for summaries.
const KEPT_ERROR_LINES: usize = 5;

/// What the agent's stderr said that a failure summary can use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StderrDigest {
    /// The first non-empty line that is not noise (warnings, banners, stack frames).
    pub first_line: Option<String>,
    /// The first few error-like lines (error, failed, exception, fatal, ...).
    pub error_lines: Vec<String>,
    /// The first line saying the agent needs authentication.
    pub auth_line: Option<String>,
}

impl StderrDigest {
    /// Takes in one stderr line.
    pub(crate) fn record(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() || patterns::is_noise(line) {
            return;
        }
        if self.auth_line.is_none() && patterns::needs_authentication(line) {
            self.auth_line = Some(line.to_string());
        }
        if self.error_lines.len() < KEPT_ERROR_LINES && patterns::is_error_like(line) {
            self.error_lines.push(line.to_string());
        }
        self.first_line.get_or_insert_with(|| line.to_string());
    }

    /// The line that best says what went wrong: the first error-like line, else the
    /// first line that is not noise.
    pub(crate) fn summary_line(&self) -> Option<&str> {
        self.error_lines
            .first()
            .or(self.first_line.as_ref())
            .map(String::as_str)
    }
}

/// The digest, shared between the watcher and the attempt.
pub(super) type SharedDigest = Arc<Mutex<StderrDigest>>;

/// Reads stderr to its end.
pub(super) async fn watch(
    stderr: ChildStderr,
    patterns: Patterns,
    relay: bool,
    digest: SharedDigest,
    alarms: mpsc::UnboundedSender<StderrAlarm>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if relay {
            // A closed runner stderr must not stop the watch.
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        lock(&digest).record(&line);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(lines: &[&str]) -> StderrDigest {
        let mut digest = StderrDigest::default();
        for line in lines {
            digest.record(line);
        }
        digest
    }

    #[test]
    fn the_summary_prefers_an_error_line_over_earlier_noise_and_chatter() {
        let digest = digest(&[
            "(node:12) [DEP0040] DeprecationWarning: The `punycode` module is deprecated.",
            "Loaded cached credentials.",
            "Error: connect ECONNREFUSED 127.0.0.1:443",
        ]);
        assert_eq!(
            digest.summary_line(),
            Some("Error: connect ECONNREFUSED 127.0.0.1:443")
        );
    }

    #[test]
    fn without_an_error_line_the_first_meaningful_line_is_the_summary() {
        let digest = digest(&["Warning: something odd", "", "starting up"]);
        assert_eq!(digest.summary_line(), Some("starting up"));
    }

    #[test]
    fn stack_frames_are_noise() {
        let digest = digest(&["    at Object.<anonymous> (/app/index.js:1:1)"]);
        assert_eq!(digest.summary_line(), None);
    }

    #[test]
    fn an_authentication_message_is_kept() {
        let digest = digest(&["Gemini API key is missing or not configured."]);
        assert_eq!(
            digest.auth_line.as_deref(),
            Some("Gemini API key is missing or not configured.")
        );
    }
}
