//! What one attempt is run with.

use std::path::PathBuf;
use std::time::Duration;

use super::events::EventLog;

/// Default idle timeout: no ACP traffic for this long counts as a hang.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default total timeout of one attempt.
pub const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_secs(2 * 60 * 60);
/// Default grace period between `session/cancel` (or closing stdin) and killing the agent.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Everything [`run_attempt`](super::run_attempt) needs to drive one attempt.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// The task name (`RALPH_TASK`).
    pub task: String,
    /// The attempt identity, e.g. `<task>-a<N>` (`RALPH_ATTEMPT`).
    pub attempt: Option<String>,
    /// The prompt text sent with `session/prompt`.
    pub prompt: String,
    /// The agent's working directory; file access is confined to it.
    pub workspace: PathBuf,
    /// The agent program and its arguments.
    pub agent_command: Vec<String>,
    /// A file touched (at most once a second) while the agent sends ACP traffic.
    pub heartbeat_file: Option<PathBuf>,
    /// No ACP traffic for this long: cancel, grace, kill; the attempt crashed.
    pub idle_timeout: Duration,
    /// The attempt ran this long: cancel, grace, kill; the attempt crashed.
    pub total_timeout: Duration,
    /// Time the agent gets to stop after `session/cancel` before its process group is killed.
    pub grace: Duration,
    /// Regexes that mark a crash when a stderr line matches (in addition to the defaults).
    pub crash_patterns: Vec<String>,
    /// Regexes that mark quota exhaustion (in addition to the built-in recognisers).
    pub exhaustion_patterns: Vec<String>,
    /// Globs of tool titles, commands or paths whose permission requests are refused.
    pub deny: Vec<String>,
    /// Where the JSON event lines go.
    pub events: EventLog,
    /// Copy the agent's stderr to the runner's stderr.
    pub relay_stderr: bool,
}

impl RunnerConfig {
    /// A configuration with the default timeouts, patterns and policy.
    pub fn new(
        task: impl Into<String>,
        prompt: impl Into<String>,
        workspace: impl Into<PathBuf>,
        agent_command: Vec<String>,
    ) -> Self {
        Self {
            task: task.into(),
            attempt: None,
            prompt: prompt.into(),
            workspace: workspace.into(),
            agent_command,
            heartbeat_file: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            total_timeout: DEFAULT_TOTAL_TIMEOUT,
            grace: DEFAULT_GRACE,
            crash_patterns: Vec::new(),
            exhaustion_patterns: Vec::new(),
            deny: Vec::new(),
            events: EventLog::discard(),
            relay_stderr: true,
        }
    }
}
