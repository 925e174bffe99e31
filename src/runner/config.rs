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
    /// How long the agent may be idle and run, and how long it gets to stop.
    pub timeouts: Timeouts,
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
    /// Whether to offer the agent the client's file system (`fs/*` requests).
    pub client_fs: ClientFs,
    /// A verification attempt: edits, writes and deletes are refused (tool calls and
    /// `fs/write_text_file`).
    pub read_only: bool,
    /// `verify.command`, run in the workspace after a done verdict.
    pub check: Option<super::check::CheckCommand>,
    /// The model to ask the agent for (its ACP `model` session option), when the Feature
    /// chose one; `None`: the agent's default.
    pub model: Option<String>,
    /// How the agent process is confined by the kernel (Landlock; docs/security.md).
    pub confinement: Confinement,
    /// The runner's own files besides the heartbeat (its binary, the result file), which
    /// confinement keeps out of the agent's reach.
    pub runner_files: Vec<PathBuf>,
    /// The model gateway between the agent and its model API (docs/gateway.md).
    pub gateway: GatewaySettings,
    /// Where the tasks a final message proposes (`<ralph:propose-tasks>`) are written, in
    /// an agent Pod of a planning Feature; `None`: they stay in the final message only.
    pub proposal_file: Option<PathBuf>,
}

/// How long an attempt's agent may be idle and run, and how long it gets to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// No ACP traffic for this long: cancel, grace, kill; the attempt crashed.
    pub idle: Duration,
    /// The attempt ran this long: cancel, grace, kill; the attempt crashed.
    pub total: Duration,
    /// Time the agent gets to stop after `session/cancel` before its process group is killed.
    pub grace: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: DEFAULT_IDLE_TIMEOUT,
            total: DEFAULT_TOTAL_TIMEOUT,
            grace: DEFAULT_GRACE,
        }
    }
}

pub use crate::api::agent::{ClientFs, Confinement};

/// Agents whose use of the client file system is broken: gemini-cli's write tool reads
/// the file first and does not recognise any not-found error, so new files fail.
const AGENTS_WITHOUT_CLIENT_FS: &[&str] = &["gemini", "@google/gemini-cli"];

impl ClientFs {
    /// The `ralph runner` flags that select this setting (none for the default).
    pub fn runner_args(self) -> Vec<String> {
        let value = match self {
            ClientFs::Auto => return Vec::new(),
            ClientFs::Always => "always",
            ClientFs::Never => "never",
        };
        vec!["--client-fs".to_string(), value.to_string()]
    }

    /// Whether to advertise the capability to the agent `agent_command` starts.
    pub fn advertise(self, agent_command: &[String]) -> bool {
        match self {
            ClientFs::Always => true,
            ClientFs::Never => false,
            ClientFs::Auto => !agent_command.iter().any(|word| {
                let name = std::path::Path::new(word)
                    .file_name()
                    .and_then(|name| name.to_str())
                    .unwrap_or(word);
                AGENTS_WITHOUT_CLIENT_FS
                    .iter()
                    .any(|agent| name == *agent || word.contains(agent))
            }),
        }
    }
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
            timeouts: Timeouts::default(),
            crash_patterns: Vec::new(),
            exhaustion_patterns: Vec::new(),
            deny: Vec::new(),
            events: EventLog::discard(),
            relay_stderr: true,
            client_fs: ClientFs::Auto,
            read_only: false,
            check: None,
            model: None,
            confinement: Confinement::BestEffort,
            runner_files: Vec::new(),
            gateway: GatewaySettings::default(),
            proposal_file: None,
        }
    }
}

/// Whether the runner puts a gateway between the agent and its model API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GatewayMode {
    /// On for the agents ralph knows (claude-agent-acp, codex-acp, gemini-cli) when a
    /// credential for their API is in the environment; off otherwise.
    #[default]
    Auto,
    /// Off: the agent gets the environment as it is, keys included.
    Off,
}

/// The gateway settings of one attempt.
#[derive(Clone, Debug, Default)]
pub struct GatewaySettings {
    /// On or off.
    pub mode: GatewayMode,
    /// The API the agent speaks (default: from the agent command).
    pub provider: Option<crate::gateway::Provider>,
    /// The real endpoint (default: the provider's base URL variable in the runner's
    /// environment, else the provider's public API).
    pub upstream: Option<String>,
    /// Prices of the models (default: the built-in table).
    pub prices: Option<crate::gateway::PriceTable>,
    /// The attempt's share of the Feature's budget.
    pub allowance: crate::gateway::Allowance,
    /// A gateway someone else runs (the agent Pod's sidecar): its meter is read at the end.
    pub remote: Option<String>,
    /// Where the gateway listens (default: a free port on 127.0.0.1), for agents whose
    /// endpoint is written in their configuration (codex's `model_providers`).
    pub listen: Option<std::net::SocketAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| word.to_string()).collect()
    }

    #[test]
    fn auto_leaves_the_client_fs_off_for_gemini() {
        assert!(!ClientFs::Auto.advertise(&command(&["/usr/bin/gemini", "--acp"])));
        assert!(!ClientFs::Auto.advertise(&command(&["npx", "@google/gemini-cli", "--acp"])));
    }

    #[test]
    fn auto_offers_the_client_fs_to_other_agents() {
        assert!(ClientFs::Auto.advertise(&command(&["claude-agent-acp"])));
        assert!(ClientFs::Auto.advertise(&command(&["codex-acp"])));
    }

    #[test]
    fn always_and_never_override_the_agent_default() {
        assert!(ClientFs::Always.advertise(&command(&["gemini", "--acp"])));
        assert!(!ClientFs::Never.advertise(&command(&["claude-agent-acp"])));
    }
}
