//! The result of one agent attempt, as the runner reports it (the termination message of
//! the agent container, or the result file in local mode) and as the policy reads it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::sigils::Sigils;

/// Version of the [`AttemptResult`] document; bumped on an incompatible change.
pub const RESULT_SCHEMA_VERSION: u32 = 1;

/// Largest serialized [`AttemptResult`] the runner writes (the kubelet's termination-message limit).
pub const RESULT_MAX_BYTES: usize = 4096;

/// Why the agent's prompt turn ended (ACP `StopReason`, plus what the runner mapped onto it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The agent finished its turn.
    EndTurn,
    /// The model hit its output token limit.
    MaxTokens,
    /// The agent hit its limit of model requests in one turn.
    MaxTurnRequests,
    /// The agent refused to continue.
    Refusal,
    /// The turn was cancelled by the client (`session/cancel`).
    Cancelled,
    /// A stop reason this version does not know, kept verbatim.
    #[serde(untagged)]
    Other(String),
}

impl StopReason {
    /// The ACP name (`end_turn`, ...), or the unknown reason verbatim.
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            StopReason::Other(other) => other,
        }
    }

    /// The stop reason named `text` (unknown names are kept verbatim).
    pub fn parse(text: &str) -> StopReason {
        [
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::MaxTurnRequests,
            StopReason::Refusal,
            StopReason::Cancelled,
        ]
        .into_iter()
        .find(|known| known.as_str() == text)
        .unwrap_or_else(|| StopReason::Other(text.to_owned()))
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the agent process and its turn ended, as the runner classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OutcomeClass {
    /// The prompt turn returned a stop reason; the sigils say what the agent claims.
    Finished,
    /// The agent crashed: non-zero exit, no output, a crash pattern, or a hang past a timeout.
    Crashed,
    /// The agent ran out of quota or hit a usage limit; not the task's fault.
    Exhausted,
    /// The attempt was cancelled (runner signalled, or the user suspended the feature).
    Cancelled,
    /// The agent cannot run as configured (binary missing, not an ACP agent, authentication
    /// required, workspace not writable): retrying cannot help until the user fixes it.
    Misconfigured,
    /// The model gateway refused a model call because the attempt's share of the
    /// Feature's budget was spent: not the task's fault, not retried.
    LimitReached,
}

/// Tokens by kind: of one attempt ([`Usage`]) or summed over attempts
/// ([`UsageTotals`](super::budget::UsageTotals)); both flatten it, so their documents keep
/// these fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tokens {
    /// Input (prompt) tokens.
    #[serde(default, rename = "inputTokens")]
    pub input: u64,
    /// Output (completion) tokens.
    #[serde(default, rename = "outputTokens")]
    pub output: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default, rename = "cacheReadTokens")]
    pub cache_read: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, rename = "cacheWriteTokens")]
    pub cache_write: u64,
}

impl Tokens {
    /// `input` and `output` tokens, no cache use.
    pub fn new(input: u64, output: u64) -> Tokens {
        Tokens {
            input,
            output,
            ..Tokens::default()
        }
    }

    /// Adds other counts to these, saturating.
    pub fn add(&mut self, other: &Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }

    /// Input plus output tokens (what `maxTokens` counts; cache reads and writes are
    /// shown, not counted).
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// Token and cost usage of one attempt (or a sum of attempts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Tokens by kind.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// Cost in US dollars, when the agent reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds another usage record to this one.
    pub fn add(&mut self, other: &Usage) {
        self.tokens.add(&other.tokens);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }

    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.tokens.total()
    }
}

/// The agent ran out of quota; it should not be used again before `reset_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Exhaustion {
    /// What the agent said (truncated).
    pub message: String,
    /// When the quota resets, as Unix seconds, when the message says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<i64>,
}

/// A configuration problem that stops every attempt until the user fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Misconfiguration {
    /// What is wrong, naming the thing (command, file, variable).
    pub problem: String,
    /// What the user should do about it.
    pub fix: String,
    /// The condition reason naming the problem where one more precise than
    /// `AgentMisconfigured` is known (the kubelet's waiting reason of an agent Pod that
    /// could not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The agent and model that ran an attempt: one definition for the runner's result and the
/// Task status's attempt record (both flatten it, so their documents keep these fields).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RanBy {
    /// The agent's name and version, as it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,

    /// The model the agent used, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,

    /// The model the attempt asked the agent for (`spec.model`); unset: the agent's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,

    /// The ACP session mode the runner put the agent in (e.g. `default`, `plan`); unset:
    /// none could be set (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
}

/// What the agent process ran under: the kernel's confinement and what weakened it
/// (docs/security.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfinementReport {
    /// How Landlock confined the agent's file access.
    pub landlock: LandlockState,
    /// The kernel's Landlock ABI version, when it has Landlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abi: Option<i32>,
    /// What weakened the confinement: Landlock missing or partial, a runner file the agent
    /// could reach, an agent left in a mode that does not ask.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl ConfinementReport {
    /// Whether the kernel enforced the whole confinement and nothing weakened it.
    pub fn is_confined(&self) -> bool {
        self.landlock == LandlockState::Enforced && self.problems.is_empty()
    }
}

/// How Landlock confined an agent process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum LandlockState {
    /// Every access right ralph asks for is enforced.
    Enforced,
    /// The kernel enforces only part of them (an older Landlock ABI).
    Partial,
    /// The kernel has no Landlock (too old, disabled, or blocked by a seccomp profile).
    Unavailable,
    /// Confinement was turned off (`confinement: Disabled`), or the agent never started.
    #[default]
    Disabled,
}

/// When the attempt ran, in Unix milliseconds and durations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timings {
    /// When the runner started, Unix milliseconds.
    pub started_at_ms: i64,
    /// When the runner finished, Unix milliseconds.
    pub ended_at_ms: i64,
    /// From runner start to the agent's answer to `initialize`, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialize_ms: Option<u64>,
}

/// The compact, versioned report of one attempt (at most [`RESULT_MAX_BYTES`] as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptResult {
    /// Schema version, [`RESULT_SCHEMA_VERSION`].
    pub version: u32,
    /// The task the attempt was for.
    pub task: String,
    /// The attempt identity (e.g. `<task>-a<N>`), as given to the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<String>,
    /// How the attempt ended, as the runner classifies it.
    pub outcome: OutcomeClass,
    /// The stop reason of the prompt turn, when the agent answered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The agent process's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the agent process, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Sigils found in the agent's messages of this prompt turn.
    #[serde(default)]
    pub sigils: Sigils,
    /// A short summary of a crash (exit code, first stderr line, matched pattern, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
    /// Set when the attempt could not run as configured ([`OutcomeClass::Misconfigured`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misconfiguration: Option<Misconfiguration>,
    /// Set when the agent reported a usage limit or exhausted quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhaustion: Option<Exhaustion>,
    /// The agent and model that ran the attempt (`requestedModel`: `ralph runner --model`).
    #[serde(flatten)]
    pub ran_by: RanBy,
    /// Tokens and cost: what the model gateway metered on the wire when one ran, else what
    /// the agent reported.
    #[serde(default)]
    pub usage: Usage,
    /// What the agent itself reported, kept beside the gateway's figures (set only when a
    /// gateway metered the attempt), so a mismatch is visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_usage: Option<Usage>,
    /// Model calls the gateway forwarded (set only when a gateway metered the attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u32>,
    /// Why the gateway refused a model call ([`OutcomeClass::LimitReached`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_refusal: Option<String>,
    /// Start, end and latency figures.
    #[serde(default)]
    pub timings: Timings,
    /// How `verify.command` ended, when the runner ran it (after a done verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckReport>,
    /// What the agent process ran under (Landlock, problems), when it was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<ConfinementReport>,
    /// Names of fields shortened to keep the document under [`RESULT_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<String>,
    /// The final message proposed follow-up tasks (`<ralph:propose-tasks>`) and the runner
    /// wrote them to its proposal file (`ralph runner --proposal-file`); the result carries
    /// the flag, never the tasks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proposed: bool,
}

impl AttemptResult {
    /// The result of `attempt` of `task` that ended with `outcome`, nothing else observed.
    pub fn new(task: impl Into<String>, attempt: Option<String>, outcome: OutcomeClass) -> Self {
        AttemptResult {
            version: RESULT_SCHEMA_VERSION,
            task: task.into(),
            attempt,
            outcome,
            stop_reason: None,
            exit_code: None,
            signal: None,
            sigils: Sigils::default(),
            crash: None,
            misconfiguration: None,
            exhaustion: None,
            ran_by: RanBy::default(),
            usage: Usage::default(),
            reported_usage: None,
            model_calls: None,
            budget_refusal: None,
            timings: Timings::default(),
            check: None,
            confinement: None,
            truncated: Vec::new(),
            proposed: false,
        }
    }
}

/// Longest check reason carried into the next prompt (characters): the command, its exit
/// and its output tail.
pub(crate) const MAX_CHECK_REASON_CHARS: usize = 2400;

/// How `verify.command` ended, as the runner reports it in the attempt result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The command, as given (run with `sh -c` in the workspace).
    pub command: String,
    /// Its exit code; unset when it was killed or could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// It ran past its time limit and was killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Why it could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The end of its combined stdout and stderr (at most the configured bytes).
    #[serde(default)]
    pub output_tail: String,
}

impl CheckReport {
    /// True when the command exited 0 in time.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && self.error.is_none()
    }

    /// One sentence on how it failed, followed by the output tail (for the next prompt).
    pub fn failure(&self) -> String {
        let how = match (&self.error, self.timed_out, self.exit_code) {
            (Some(error), ..) => format!("could not run: {error}"),
            (None, true, _) => "ran past its time limit and was killed".to_owned(),
            (None, false, Some(code)) => format!("exited with code {code}"),
            (None, false, None) => "was killed by a signal".to_owned(),
        };
        let mut text = format!("verify.command `{}` {how}", self.command.trim());
        let tail = self.output_tail.trim();
        if !tail.is_empty() {
            text.push_str("; the end of its output:\n");
            text.push_str(tail);
        }
        bounded_tail(&text, MAX_CHECK_REASON_CHARS)
    }
}

/// The last `max` characters of `text`'s last lines, marking the cut at the start.
fn bounded_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let (head, _) = text.split_once('\n').unwrap_or((text, ""));
    let head: String = head.chars().take(max / 4).collect();
    let keep = max.saturating_sub(head.chars().count() + 2);
    let tail: String = text.chars().skip(count - keep).collect();
    format!("{head}\n…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result document as runners before the shared `RanBy` and `Tokens` wrote it, in
    /// their field order.
    const WRITTEN_BEFORE: &str = concat!(
        r#"{"version":1,"task":"t","attempt":"t-a1","outcome":"finished","#,
        r#""stopReason":"end_turn","exitCode":0,"sigils":{},"#,
        r#""agent":"claude-agent-acp 0.5","model":"sonnet","requestedModel":"sonnet","#,
        r#""usage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":2,"#,
        r#""cacheWriteTokens":1,"costUsd":0.25},"#,
        r#""timings":{"startedAtMs":1,"endedAtMs":2}}"#
    );

    #[test]
    fn a_result_written_before_reads_with_every_field() {
        let result: AttemptResult = serde_json::from_str(WRITTEN_BEFORE).expect("reads");
        assert_eq!(result.ran_by.agent.as_deref(), Some("claude-agent-acp 0.5"));
        assert_eq!(result.ran_by.model.as_deref(), Some("sonnet"));
        assert_eq!(result.ran_by.requested_model.as_deref(), Some("sonnet"));
        assert_eq!(
            result.usage.tokens,
            Tokens {
                input: 10,
                output: 5,
                cache_read: 2,
                cache_write: 1,
            }
        );
        assert_eq!(result.usage.cost_usd, Some(0.25));
    }

    #[test]
    fn a_result_written_before_is_written_again_byte_for_byte() {
        let result: AttemptResult = serde_json::from_str(WRITTEN_BEFORE).expect("reads");
        assert_eq!(
            serde_json::to_string(&result).ok().as_deref(),
            Some(WRITTEN_BEFORE)
        );
    }

    #[test]
    fn tokens_add_saturating() {
        let mut tokens = Tokens::new(u64::MAX - 1, 1);
        tokens.add(&Tokens::new(5, 2));
        assert_eq!((tokens.input, tokens.output), (u64::MAX, 3));
        assert_eq!(tokens.total(), u64::MAX);
    }
}
