//! Classifying what happened in an attempt into the result's outcome class, stop reason
//! and crash summary (pure).

use std::time::Duration;

use serde_json::Value;

use super::patterns::{self, Patterns};
use super::reports;
use super::stderr::StderrDigest;
use super::turn::Phase;
use crate::engine::attempt::{Exhaustion, Misconfiguration, OutcomeClass, StopReason};
use crate::engine::sigils::Sigils;

/// `data.errorKind` values (claude-agent-acp) that mean the account ran out of quota. A
/// `rate_limit` is one only with quota wording or a stated reset time
/// ([`patterns::is_rate_limit_with_reset`]): a plain 429 is a transient failure.
const EXHAUSTION_ERROR_KINDS: &[&str] = &[
    "billing_error",
    "quota_exhausted",
    "usage_limit",
    "usage_limit_reached",
];

/// How the prompt turn ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TurnEnd {
    /// The agent answered the prompt with a stop reason.
    Answered {
        /// The stop reason as sent.
        stop_reason: String,
    },
    /// The agent answered the prompt with a JSON-RPC error.
    Failed {
        /// The error code.
        code: i32,
        /// The error message.
        message: String,
        /// The error data (claude-agent-acp puts `errorKind` here).
        data: Option<Value>,
    },
    /// The agent answered `initialize` or `session/new` with a JSON-RPC error.
    SetupFailed {
        /// How far the conversation got (which request failed).
        phase: Phase,
        /// The error code.
        code: i32,
        /// The error message, with its data.
        message: String,
    },
    /// The conversation ended without an answer (the agent died or closed its output).
    Unanswered {
        /// How far the conversation got.
        phase: Phase,
        /// What the connection reported.
        detail: String,
    },
}

/// Why the runner stopped the agent before the turn ended by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Interruption {
    /// The runner was told to cancel (signal, or the caller's token).
    Cancelled,
    /// No ACP traffic for this long.
    IdleTimeout(Duration),
    /// The attempt ran this long.
    TotalTimeout(Duration),
    /// The agent printed something other than JSON-RPC on stdout before answering
    /// `initialize`; it was killed at once.
    NotAcp {
        /// The first such line.
        line: String,
    },
    /// A stderr line matched a crash pattern; the agent was killed at once.
    CrashPattern {
        /// The pattern.
        pattern: String,
        /// The line.
        line: String,
    },
}

/// Everything the classification looks at.
#[derive(Clone, Debug)]
pub(crate) struct Observations {
    /// How the turn ended.
    pub turn: TurnEnd,
    /// Whether and why the runner stopped the agent.
    pub interruption: Option<Interruption>,
    /// The agent's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the agent, when one did.
    pub signal: Option<i32>,
    /// The agent command (for naming it in problems).
    pub command: String,
    /// What the agent's stderr said.
    pub stderr: StderrDigest,
    /// An error the agent reported in a session update that no answer followed.
    pub reported_error: Option<String>,
    /// Whether the turn carried answer text.
    pub answered: bool,
    /// The turn's last answer text (its first KiB).
    pub last_message: String,
    /// The last permission the runner refused in the turn (what and why).
    pub refused_permission: Option<String>,
    /// A usage-limit report seen anywhere in the attempt.
    pub exhaustion: Option<Exhaustion>,
    /// Session updates received after the prompt was sent.
    pub updates_in_turn: usize,
    /// The sigils of the turn.
    pub sigils: Sigils,
}

/// The classification.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Classification {
    /// The outcome class.
    pub outcome: OutcomeClass,
    /// The stop reason, when the agent answered one (or one was mapped from an error).
    pub stop_reason: Option<StopReason>,
    /// The crash summary, for crashes.
    pub crash: Option<String>,
    /// The problem and its fix, for configuration errors.
    pub misconfiguration: Option<Misconfiguration>,
}

/// Classifies one attempt.
pub(crate) fn classify(observations: &Observations) -> Classification {
    let stop_reason = answered_stop_reason(&observations.turn);
    let verdict = |outcome, crash: Option<String>| Classification {
        outcome,
        stop_reason: stop_reason.clone(),
        crash,
        misconfiguration: None,
    };
    if observations.interruption == Some(Interruption::Cancelled) {
        return verdict(OutcomeClass::Cancelled, None);
    }
    if let Some(misconfiguration) = misconfiguration(observations) {
        return Classification {
            misconfiguration: Some(misconfiguration),
            ..verdict(OutcomeClass::Misconfigured, None)
        };
    }
    if observations.exhaustion.is_some() && !claims_task(observations) {
        return verdict(OutcomeClass::Exhausted, None);
    }
    if let Some(interruption) = &observations.interruption {
        return verdict(
            OutcomeClass::Crashed,
            Some(interruption_summary(
                interruption,
                &observations.turn,
                &observations.stderr,
            )),
        );
    }
    match &observations.turn {
        // Not cancelled by the runner (that is an interruption, classified above).
        TurnEnd::Answered { .. } if stop_reason == Some(StopReason::Cancelled) => verdict(
            OutcomeClass::Crashed,
            Some(unrequested_cancel_summary(observations)),
        ),
        TurnEnd::Answered { .. } => {
            if let Some(cut_off) = cut_off(observations) {
                return Classification {
                    stop_reason: Some(cut_off),
                    ..verdict(OutcomeClass::Finished, None)
                };
            }
            match answered_crash(observations, stop_reason.as_ref()) {
                Some(summary) => verdict(OutcomeClass::Crashed, Some(summary)),
                None => verdict(OutcomeClass::Finished, None),
            }
        }
        TurnEnd::Failed {
            code,
            message,
            data,
        } => failed_prompt(*code, message, data.as_ref()),
        TurnEnd::SetupFailed {
            phase,
            code,
            message,
        } => verdict(
            OutcomeClass::Crashed,
            Some(setup_failed_summary(observations, *phase, *code, message)),
        ),
        TurnEnd::Unanswered { phase, detail } => verdict(
            OutcomeClass::Crashed,
            Some(unanswered_summary(observations, *phase, detail)),
        ),
    }
}

/// Why `initialize` or `session/new` failed: the error answer, and when the agent is gone
/// the exit too (it says how, the answer says why).
fn setup_failed_summary(
    observations: &Observations,
    phase: Phase,
    code: i32,
    message: &str,
) -> String {
    let request = phase.pending_request();
    let message = message.trim();
    if observations.exit_code.is_some() || observations.signal.is_some() {
        format!(
            "{}; its answer to {request} was error {code}: {message}",
            unanswered_summary(observations, phase, message)
        )
    } else {
        format!("the agent answered {request} with error {code}: {message}")
    }
}

fn claims_task(observations: &Observations) -> bool {
    observations.sigils.task_done.is_some() || observations.sigils.task_failed.is_some()
}

/// A configuration error the attempt revealed: not an ACP agent, a command that cannot
/// run, or missing credentials (only when the attempt failed).
fn misconfiguration(observations: &Observations) -> Option<Misconfiguration> {
    let command = &observations.command;
    if let Some(Interruption::NotAcp { line }) = &observations.interruption {
        return Some(not_acp(command, line));
    }
    let failed = match &observations.turn {
        TurnEnd::Answered { .. } => {
            observations.reported_error.is_some() && cut_off(observations).is_none()
        }
        _ => true,
    };
    if !failed || claims_task(observations) {
        return None;
    }
    if let Some(detail) = authentication_problem(observations) {
        return Some(Misconfiguration {
            problem: format!("the agent `{command}` needs authentication: {detail}"),
            fix: "give the agent its credentials: an API key in its environment (for a \
                  Feature, spec.agent.env or a Secret in spec.agent.envFrom) or a login in its HOME"
                .into(),
            reason: None,
        });
    }
    let unstarted = matches!(
        &observations.turn,
        TurnEnd::Unanswered {
            phase: Phase::Starting,
            ..
        } | TurnEnd::SetupFailed {
            phase: Phase::Starting,
            ..
        }
    );
    match observations.exit_code {
        Some(127) if unstarted => Some(Misconfiguration {
            problem: format!(
                "the agent command `{command}` was not found (exit code 127{})",
                stderr_note(&observations.stderr)
            ),
            fix: "install the agent in the image (or on PATH) or correct the agent command".into(),
            reason: None,
        }),
        Some(126) if unstarted => Some(Misconfiguration {
            problem: format!(
                "the agent command `{command}` is not executable (exit code 126{})",
                stderr_note(&observations.stderr)
            ),
            fix: "make the agent program executable or correct the agent command".into(),
            reason: None,
        }),
        Some(code) if unstarted && observations.stderr.summary_line().is_some() => {
            Some(Misconfiguration {
                problem: format!(
                    "the agent `{command}` exited with code {code} before answering \
                     initialize{}",
                    stderr_note(&observations.stderr)
                ),
                fix: "run the agent command by hand and fix what it says (a flag, its \
                      configuration file or its environment): it stops before it speaks ACP"
                    .into(),
                reason: None,
            })
        }
        _ => None,
    }
}

/// The misconfiguration of a program that does not speak ACP on stdout.
pub(crate) fn not_acp(command: &str, line: &str) -> Misconfiguration {
    Misconfiguration {
        problem: format!(
            "`{command}` is not an ACP agent: it printed `{}` on stdout where an ACP agent \
             answers ralph's `initialize` with JSON-RPC",
            super::events::char_prefix(line.trim(), 200)
        ),
        fix: "run the agent in its ACP mode (e.g. `claude-agent-acp`, `codex-acp`, \
              `gemini --acp`) and make sure nothing else writes to its stdout"
            .into(),
        reason: None,
    }
}

/// What says the agent lacks credentials: an `auth_required` error (-32000) or
/// authentication wording in an error or on stderr.
fn authentication_problem(observations: &Observations) -> Option<String> {
    const AUTH_REQUIRED: i32 = -32000;
    let error = match &observations.turn {
        TurnEnd::Failed { code, message, .. } | TurnEnd::SetupFailed { code, message, .. }
            if *code == AUTH_REQUIRED || patterns::needs_authentication(message) =>
        {
            Some(message.trim().to_string())
        }
        _ => None,
    };
    error
        .or_else(|| {
            observations
                .reported_error
                .clone()
                .filter(|error| patterns::needs_authentication(error))
        })
        .or_else(|| observations.stderr.auth_line.clone())
}

fn stderr_note(stderr: &StderrDigest) -> String {
    stderr
        .summary_line()
        .map(|line| format!(": {line}"))
        .unwrap_or_default()
}

/// The agent's last word on stderr before it went silent: the cause of an idle timeout
/// (gemini-cli retrying a failing model server says so only there).
fn stderr_cause(stderr: &StderrDigest) -> String {
    stderr
        .error_lines
        .last()
        .map(|line| format!("; its stderr said: {line}"))
        .unwrap_or_default()
}

fn interruption_summary(
    interruption: &Interruption,
    turn: &TurnEnd,
    stderr: &StderrDigest,
) -> String {
    match interruption {
        Interruption::CrashPattern { pattern, line } => {
            format!("crash pattern `{pattern}` on stderr: {}", line.trim())
        }
        Interruption::IdleTimeout(limit) => format!(
            "idle timeout: no ACP traffic for {}{}{}",
            crate::clock::format_duration(*limit),
            stop_note(turn),
            stderr_cause(stderr)
        ),
        Interruption::TotalTimeout(limit) => format!(
            "total timeout: the attempt ran for {}{}",
            crate::clock::format_duration(*limit),
            stop_note(turn)
        ),
        // Classified earlier; kept total for the summary's sake.
        Interruption::Cancelled => "cancelled".into(),
        Interruption::NotAcp { line } => format!("not an ACP agent: {}", line.trim()),
    }
}

/// The stop reason behind an error reporting that the model's answer was cut short
/// (codex-acp: "Incomplete response returned, reason: max_output_tokens" and `end_turn`).
fn cut_off(observations: &Observations) -> Option<StopReason> {
    let error = observations.reported_error.as_deref()?;
    stop_reason_for_error_kind(reports::incomplete_response_reason(error)?)
}

/// Why a turn the agent ended as `cancelled` without a `session/cancel` is a crash:
/// codex-acp does that when the runner refuses a permission with its `cancel` option.
fn unrequested_cancel_summary(observations: &Observations) -> String {
    match &observations.refused_permission {
        Some(refusal) => format!(
            "the agent cancelled its own turn after the runner refused permission for {refusal}"
        ),
        None => {
            "the agent cancelled its own turn (the runner did not send session/cancel)".to_string()
        }
    }
}

/// Why an answered turn is still a crash: an error reported in the turn that no answer
/// followed, no output at all, or an empty turn beside an error on stderr.
fn answered_crash(observations: &Observations, stop_reason: Option<&StopReason>) -> Option<String> {
    if claims_task(observations) {
        return None;
    }
    if let Some(error) = &observations.reported_error {
        return Some(format!(
            "the agent reported an error and ended its turn without an answer: {error}"
        ));
    }
    if stop_reason == Some(&StopReason::Refusal)
        && patterns::is_error_report(&observations.last_message)
    {
        return Some(format!(
            "the agent ended its turn as a refusal whose text is an error report: {}",
            observations.last_message.trim()
        ));
    }
    if stop_reason != Some(&StopReason::EndTurn) {
        return None;
    }
    if observations.updates_in_turn == 0 {
        return Some(format!(
            "no output: the agent ended its turn without sending anything{}",
            stderr_note(&observations.stderr)
        ));
    }
    if !observations.answered
        && let Some(line) = observations.stderr.error_lines.first()
    {
        return Some(format!(
            "the agent ended its turn without an answer after an error on stderr: {line}"
        ));
    }
    None
}

fn failed_prompt(code: i32, message: &str, data: Option<&Value>) -> Classification {
    let kind = error_kind(data);
    if let Some(mapped) = kind.and_then(stop_reason_for_error_kind) {
        return Classification {
            outcome: OutcomeClass::Finished,
            stop_reason: Some(mapped),
            crash: None,
            misconfiguration: None,
        };
    }
    let kind_note = kind
        .map(|kind| format!(" (errorKind {kind})"))
        .unwrap_or_default();
    Classification {
        outcome: OutcomeClass::Crashed,
        stop_reason: None,
        crash: Some(format!(
            "the agent answered the prompt with error {code}: {}{kind_note}",
            message.trim()
        )),
        misconfiguration: None,
    }
}

/// A usage-limit report in a prompt error (its `errorKind`, message or data).
pub(crate) fn exhaustion_in_error(
    message: &str,
    data: Option<&Value>,
    patterns: &Patterns,
    now_unix: i64,
) -> Option<Exhaustion> {
    let text = match data {
        Some(data) => format!("{message} {data}"),
        None => message.to_string(),
    };
    if let Some(found) = patterns.exhaustion_in_diagnostic(&text, now_unix) {
        return Some(found);
    }
    let kind = error_kind(data)?;
    EXHAUSTION_ERROR_KINDS.contains(&kind).then(|| Exhaustion {
        message: format!("{} (errorKind {kind})", message.trim()),
        reset_at: super::patterns::reset_time(&text, now_unix),
    })
}

fn error_kind(data: Option<&Value>) -> Option<&str> {
    data?.get("errorKind")?.as_str()
}

fn stop_reason_for_error_kind(kind: &str) -> Option<StopReason> {
    match kind {
        "max_output_tokens" | "max_tokens" => Some(StopReason::MaxTokens),
        "max_turns" | "max_turn_requests" => Some(StopReason::MaxTurnRequests),
        "refusal" => Some(StopReason::Refusal),
        _ => None,
    }
}

fn answered_stop_reason(turn: &TurnEnd) -> Option<StopReason> {
    let TurnEnd::Answered { stop_reason } = turn else {
        return None;
    };
    Some(StopReason::parse(stop_reason))
}

fn stop_note(turn: &TurnEnd) -> &'static str {
    match turn {
        TurnEnd::Answered { .. } => "; the agent stopped after session/cancel",
        _ => "; the agent did not stop within the grace period and was killed",
    }
}

fn unanswered_summary(observations: &Observations, phase: Phase, detail: &str) -> String {
    let mut summary = match (observations.exit_code, observations.signal) {
        (Some(code), _) => format!("agent exited with code {code} {}", phase.describe()),
        (None, Some(signal)) => format!(
            "agent was killed by signal {signal} ({}) {}",
            signal_name(signal),
            phase.describe()
        ),
        (None, None) => format!("agent stopped responding {}: {detail}", phase.describe()),
    };
    if observations.exit_code == Some(0) && observations.updates_in_turn == 0 {
        summary.push_str(" (no output)");
    }
    if let Some(line) = observations.stderr.summary_line() {
        summary.push_str(": ");
        summary.push_str(line);
    }
    summary
}

fn signal_name(signal: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(signal)
        .map(|signal| signal.as_str())
        .unwrap_or("unknown signal")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn observations(turn: TurnEnd) -> Observations {
        Observations {
            turn,
            interruption: None,
            exit_code: None,
            signal: None,
            command: "agent".into(),
            stderr: StderrDigest::default(),
            reported_error: None,
            answered: true,
            last_message: String::new(),
            refused_permission: None,
            exhaustion: None,
            updates_in_turn: 3,
            sigils: Sigils::default(),
        }
    }

    /// The verdict on a turn that ended as `turn`, with what `seen` adds to the observations.
    fn classify_turn(turn: TurnEnd, seen: impl FnOnce(&mut Observations)) -> Classification {
        let mut observations = observations(turn);
        seen(&mut observations);
        classify(&observations)
    }

    fn answered(stop_reason: &str) -> TurnEnd {
        TurnEnd::Answered {
            stop_reason: stop_reason.into(),
        }
    }

    fn unanswered() -> TurnEnd {
        TurnEnd::Unanswered {
            phase: Phase::Prompted,
            detail: "incoming transport closed".into(),
        }
    }

    fn prompt_error(code: i32, message: &str, data: Option<serde_json::Value>) -> TurnEnd {
        TurnEnd::Failed {
            code,
            message: message.into(),
            data,
        }
    }

    /// The verdict on a prompt answered with an internal error of this `errorKind`.
    fn classify_prompt_error(message: &str, error_kind: &str) -> Classification {
        let data = json!({ "errorKind": error_kind });
        classify(&observations(prompt_error(-32603, message, Some(data))))
    }

    fn usage_limit(reset_at: Option<i64>) -> Option<Exhaustion> {
        Some(Exhaustion {
            message: "usage limit reached".into(),
            reset_at,
        })
    }

    /// The problem of a verdict that must be a misconfiguration.
    #[track_caller]
    fn misconfiguration_problem(verdict: Classification) -> String {
        assert_eq!(verdict.outcome, OutcomeClass::Misconfigured);
        verdict.misconfiguration.unwrap().problem
    }

    #[track_caller]
    fn assert_crash(verdict: Classification, summary: &str) {
        assert_eq!(verdict.outcome, OutcomeClass::Crashed);
        assert_eq!(verdict.crash.as_deref(), Some(summary));
    }

    #[test]
    fn end_turn_with_output_is_finished() {
        let verdict = classify(&observations(answered("end_turn")));
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
        assert_eq!(verdict.stop_reason, Some(StopReason::EndTurn));
    }

    #[test]
    fn end_turn_without_any_output_is_a_crash() {
        let verdict = classify_turn(answered("end_turn"), |o| o.updates_in_turn = 0);
        assert_eq!(verdict.outcome, OutcomeClass::Crashed);
        assert!(verdict.crash.unwrap().starts_with("no output"));
    }

    #[test]
    fn an_unknown_stop_reason_is_kept_verbatim() {
        let verdict = classify(&observations(answered("paused")));
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
        assert_eq!(
            verdict.stop_reason,
            Some(StopReason::Other("paused".into()))
        );
    }

    #[test]
    fn a_max_output_tokens_error_maps_to_max_tokens() {
        let verdict = classify_prompt_error(
            "Claude's response exceeded the output token maximum",
            "max_output_tokens",
        );
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
        assert_eq!(verdict.stop_reason, Some(StopReason::MaxTokens));
    }

    #[test]
    fn any_other_prompt_error_is_a_crash_naming_it() {
        let verdict = classify_prompt_error("API Error: 500", "server_error");
        assert_crash(
            verdict,
            "the agent answered the prompt with error -32603: API Error: 500 (errorKind server_error)",
        );
    }

    #[test]
    fn a_non_zero_exit_names_the_code_and_first_stderr_line() {
        let verdict = classify_turn(unanswered(), |o| {
            o.exit_code = Some(1);
            o.stderr.first_line = Some("fatal: out of cheese".into());
        });
        assert_crash(
            verdict,
            "agent exited with code 1 before answering the prompt: fatal: out of cheese",
        );
    }

    #[test]
    fn a_kill_names_the_signal() {
        let verdict = classify_turn(unanswered(), |o| o.signal = Some(9));
        assert_crash(
            verdict,
            "agent was killed by signal 9 (SIGKILL) before answering the prompt",
        );
    }

    #[test]
    fn cancellation_wins_over_everything() {
        let verdict = classify_turn(answered("cancelled"), |o| {
            o.interruption = Some(Interruption::Cancelled);
            o.exhaustion = usage_limit(None);
        });
        assert_eq!(verdict.outcome, OutcomeClass::Cancelled);
        assert_eq!(verdict.stop_reason, Some(StopReason::Cancelled));
    }

    #[test]
    fn exhaustion_without_a_task_sigil_is_exhausted() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.exhaustion = usage_limit(Some(5))
        });
        assert_eq!(verdict.outcome, OutcomeClass::Exhausted);
    }

    #[test]
    fn a_task_sigil_outweighs_an_exhaustion_report() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.exhaustion = usage_limit(None);
            o.sigils.task_done = Some("t".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
    }

    #[test]
    fn an_idle_timeout_is_a_crash_even_when_the_agent_stopped() {
        let verdict = classify_turn(answered("cancelled"), |o| {
            o.interruption = Some(Interruption::IdleTimeout(Duration::from_secs(300)));
        });
        assert_crash(
            verdict,
            "idle timeout: no ACP traffic for 5m; the agent stopped after session/cancel",
        );
    }

    #[test]
    fn a_rate_limit_error_kind_without_a_reset_is_no_exhaustion() {
        let patterns = Patterns::new(&[], &[]).unwrap();
        let found = exhaustion_in_error(
            "API Error: 429",
            Some(&json!({"errorKind": "rate_limit"})),
            &patterns,
            0,
        );
        assert_eq!(found, None);
    }

    #[test]
    fn a_reported_error_without_an_answer_is_a_crash_naming_it() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.reported_error = Some("HTTP 500".into());
        });
        assert_crash(
            verdict,
            "the agent reported an error and ended its turn without an answer: HTTP 500",
        );
    }

    #[test]
    fn a_task_sigil_outweighs_a_reported_error() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.reported_error = Some("HTTP 500".into());
            o.sigils.task_done = Some("t".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
    }

    #[test]
    fn an_auth_required_prompt_error_is_misconfigured() {
        let verdict = classify(&observations(prompt_error(
            -32000,
            "Authentication required",
            None,
        )));
        let problem = misconfiguration_problem(verdict);
        assert!(
            problem.ends_with("needs authentication: Authentication required"),
            "{problem}"
        );
    }

    #[test]
    fn authentication_wording_on_stderr_of_a_finished_turn_is_no_misconfiguration() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.stderr.auth_line = Some("Please log in again later".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
    }

    #[test]
    fn an_exit_127_before_initialize_is_a_missing_command() {
        let starting = TurnEnd::Unanswered {
            phase: Phase::Starting,
            detail: "closed".into(),
        };
        let verdict = classify_turn(starting, |o| o.exit_code = Some(127));
        let problem = misconfiguration_problem(verdict);
        assert!(problem.contains("was not found"), "{problem}");
    }

    #[test]
    fn an_exit_127_after_initialize_is_a_crash() {
        let verdict = classify_turn(unanswered(), |o| o.exit_code = Some(127));
        assert_eq!(verdict.outcome, OutcomeClass::Crashed);
    }

    #[test]
    fn cancellation_wins_over_misconfiguration() {
        let verdict = classify_turn(unanswered(), |o| {
            o.interruption = Some(Interruption::Cancelled);
            o.stderr.auth_line = Some("Authentication required".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Cancelled);
    }

    #[test]
    fn a_setup_error_from_a_running_agent_names_the_request() {
        let verdict = classify(&observations(TurnEnd::SetupFailed {
            phase: Phase::Initialized,
            code: -32603,
            message: "Internal error: no model".into(),
        }));
        assert_eq!(
            verdict.crash.unwrap(),
            "the agent answered session/new with error -32603: Internal error: no model"
        );
    }

    #[test]
    fn codexs_max_output_tokens_error_then_end_turn_is_a_max_tokens_stop() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.reported_error =
                Some("Incomplete response returned, reason: max_output_tokens".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Finished);
        assert_eq!(verdict.stop_reason, Some(StopReason::MaxTokens));
        assert_eq!(verdict.crash, None);
    }

    #[test]
    fn an_incomplete_response_for_an_unmapped_reason_is_a_crash() {
        let verdict = classify_turn(answered("end_turn"), |o| {
            o.reported_error = Some("Incomplete response returned, reason: upstream_error".into());
        });
        assert_eq!(verdict.outcome, OutcomeClass::Crashed);
    }

    #[test]
    fn a_turn_the_agent_cancelled_after_a_refused_permission_is_a_crash_naming_it() {
        let verdict = classify_turn(answered("cancelled"), |o| {
            o.refused_permission = Some("`rm -rf /srv`: /srv is outside the workspace".into());
        });
        assert_eq!(verdict.stop_reason, Some(StopReason::Cancelled));
        assert_crash(
            verdict,
            "the agent cancelled its own turn after the runner refused permission for `rm -rf /srv`: /srv is outside the workspace",
        );
    }

    #[test]
    fn a_turn_the_agent_cancelled_unasked_is_no_user_cancellation() {
        let verdict = classify_turn(answered("cancelled"), |o| {
            o.sigils.task_done = Some("t".into());
        });
        assert_crash(
            verdict,
            "the agent cancelled its own turn (the runner did not send session/cancel)",
        );
    }
}
