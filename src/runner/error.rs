//! Errors of the runner layer: problems that stop the runner from driving an attempt at
//! all. Everything the agent does wrong is an outcome in the result, not an error.

use std::path::PathBuf;

/// Why the runner could not drive or report an attempt.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No agent command was given.
    #[error("no agent command given (pass it after `--`)")]
    NoAgentCommand,
    /// The workspace directory does not exist or cannot be resolved.
    #[error("workspace {path}: {source}")]
    Workspace {
        /// The workspace as given.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The agent process could not be started.
    #[error("cannot start agent `{command}`: {source}")]
    Spawn {
        /// The program that failed to start.
        command: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A crash or exhaustion pattern is not a valid regular expression.
    #[error("invalid {kind} pattern `{pattern}`: {source}")]
    Pattern {
        /// `crash` or `exhaustion`.
        kind: &'static str,
        /// The pattern as given.
        pattern: String,
        /// The regex error.
        source: Box<regex::Error>,
    },
    /// A deny pattern is not a valid glob.
    #[error("invalid deny pattern `{pattern}`: {reason}")]
    DenyPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The result document could not be serialized.
    #[error("cannot serialize the result: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The result file could not be written.
    #[error("cannot write the result to {path}: {source}")]
    WriteResult {
        /// The result file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}
