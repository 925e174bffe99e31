//! Recognising crashes and quota exhaustion in what an agent prints (pure: the current
//! time is an argument).

use std::sync::LazyLock;

use regex::Regex;

use super::error::RunnerError;
use super::events::char_prefix;
use crate::engine::attempt::Exhaustion;

/// Stderr texts that mean the agent CLI failed, whatever it does next (some log the
/// error and hang).
pub(crate) const DEFAULT_CRASH_PATTERNS: &[&str] =
    &["No messages returned", "ECONNRESET", "ETIMEDOUT"];

/// Longest exhaustion message kept in the result.
const MAX_EXHAUSTION_MESSAGE: usize = 300;

/// Compiles a pattern written in this file. The test `every_built_in_pattern_compiles`
/// compiles them all, so a mistake in one fails the tests, never an attempt.
#[allow(
    clippy::expect_used,
    reason = "built-in patterns are constants, each compiled by a test"
)]
fn built_in(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a built-in pattern is a valid regex")
}

/// Definite usage-limit reports: Claude Code's `usage limit reached|<epoch>`, Codex's
/// `usage_limit_reached`, and the providers' "you've hit your usage limit" and
/// `insufficient_quota`. These are trusted even in the agent's message text.
static DEFINITE: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)usage limit reached|usage_limit_reached|usagelimitexceeded|you've hit your usage limit|insufficient_quota",
    )
});

/// Generic quota wording; trusted on stderr and in prompt errors only, since an agent may
/// well write about quotas in its normal output.
static GENERIC: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)quota exceeded|exceeded your (current )?quota|resource_exhausted|out of credits|credit balance is too low|usage limit",
    )
});

/// Rate-limit wording (HTTP 429 and its texts): exhaustion only with a stated reset time
/// (`retry-after`), which the agent then rests for; without one it is a transient failure.
static RATE_LIMIT: LazyLock<Regex> =
    LazyLock::new(|| built_in(r"(?i)rate.?limit|too many requests|\b429\b"));

/// Stderr lines that say nothing about a failure: warnings, deprecations, banners,
/// debug and info logging (also Claude Code's `[session/create] ... phase=...` trace
/// lines), stack frames.
static NOISE: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)^(\(node:\d+\)\s*)?(\[?(warn(ing)?|info|debug|trace|notice)\]?\b|\[[\w.-]+(/[\w.-]+)+\]\s|\(use `node --trace|deprecat|\[dep\d+\]|experimentalwarning|at\s+\S+.*[:(]\d+|[-=*#~]{3,}$)|deprecationwarning",
    )
});

/// Words that make a stderr line error-like.
static ERROR_LIKE: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)error|exception|\b(fail|fatal|panic|crash|refused|denied|unauthori[sz]ed|forbidden|cannot|can't|unable|not found|no such|invalid|missing|timed? ?out|abort)|\be[a-z]{4,}(refused|reset|notfound)\b",
    )
});

/// Messages saying the agent needs credentials it does not have.
static NEEDS_AUTHENTICATION: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)authentication (is )?required|auth_required|api[ _-]?key (is )?(missing|not (configured|set|found|provided))|(missing|no) api[ _-]?key|(invalid|incorrect) (x-)?api[ _-]?key|not (logged|signed) in|please (log ?in|sign in|login|authenticate)|run `?[a-z-]+ (auth )?login|login required|credentials (are )?(missing|not found)",
    )
});

/// An answer that reports a failed request instead of refusing (fast-agent turns an HTTP
/// 500 into a `refusal` reading "I hit an internal error ... (status=500)").
static ERROR_REPORT: LazyLock<Regex> = LazyLock::new(|| {
    built_in(
        r"(?i)\b(internal|server|upstream|api) error\b|\bstatus(_?code)?\s*[=:]\s*[45]\d\d\b|\bhttp(/[\d.]+)? [45]\d\d\b",
    )
});

/// Whether an agent's answer text is an error report (a failed request to its model).
pub(crate) fn is_error_report(text: &str) -> bool {
    ERROR_REPORT.is_match(text)
}

/// Whether a stderr line is noise for failure summaries.
pub(crate) fn is_noise(line: &str) -> bool {
    NOISE.is_match(line.trim())
}

/// Whether a line reads like an error report.
pub(crate) fn is_error_like(line: &str) -> bool {
    ERROR_LIKE.is_match(line)
}

/// Whether a message says the agent needs authentication it does not have.
pub(crate) fn needs_authentication(text: &str) -> bool {
    NEEDS_AUTHENTICATION.is_match(text)
}

/// Reset-time notations, each with how to turn its capture into Unix seconds.
static RESET_EPOCH: LazyLock<Regex> =
    LazyLock::new(|| built_in(r#"(?i)(?:limit reached\||resets?_?at"?\s*[:=]\s*"?)(\d{9,11})"#));
static RESET_IN_SECONDS: LazyLock<Regex> = LazyLock::new(|| {
    built_in(r#"(?i)(?:resets?_in_seconds"?\s*[:=]\s*|retry[- ]after"?\s*[:=]?\s*)(\d+)"#)
});
static RESET_IN_UNITS: LazyLock<Regex> = LazyLock::new(|| {
    built_in(r"(?i)(?:try again|resets?) in (\d+)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|h)\b")
});

/// The crash and exhaustion recognisers of one attempt.
#[derive(Clone, Debug)]
pub(crate) struct Patterns {
    crash: Vec<Regex>,
    exhaustion: Vec<Regex>,
}

impl Patterns {
    /// The default crash patterns plus `extra_crash`, and `extra_exhaustion` on top of
    /// the built-in exhaustion recognisers.
    pub(crate) fn new(
        extra_crash: &[String],
        extra_exhaustion: &[String],
    ) -> Result<Self, RunnerError> {
        let compile = |kind: &'static str, pattern: &str| {
            Regex::new(pattern).map_err(|source| RunnerError::Pattern {
                kind,
                pattern: pattern.to_string(),
                source: Box::new(source),
            })
        };
        let crash = DEFAULT_CRASH_PATTERNS
            .iter()
            .map(|pattern| regex::escape(pattern))
            .chain(extra_crash.iter().cloned())
            .map(|pattern| compile("crash", &pattern))
            .collect::<Result<_, _>>()?;
        let exhaustion = extra_exhaustion
            .iter()
            .map(|pattern| compile("exhaustion", pattern))
            .collect::<Result<_, _>>()?;
        Ok(Self { crash, exhaustion })
    }

    /// The crash pattern a stderr line matches, if any.
    pub(crate) fn crash_in(&self, line: &str) -> Option<&str> {
        self.crash
            .iter()
            .find(|pattern| pattern.is_match(line))
            .map(Regex::as_str)
    }

    /// Exhaustion reported on stderr or in a prompt error (every recogniser applies): quota
    /// wording, or a rate limit that states when to retry.
    pub(crate) fn exhaustion_in_diagnostic(&self, text: &str, now_unix: i64) -> Option<Exhaustion> {
        let matched = DEFINITE.is_match(text)
            || GENERIC.is_match(text)
            || self.exhaustion.iter().any(|pattern| pattern.is_match(text))
            || is_rate_limit_with_reset(text, now_unix);
        matched.then(|| exhaustion(text, now_unix))
    }

    /// Whether `text` is a definite usage-limit report (not just rate-limit wording):
    /// the agent cannot go on, so it is stopped at once.
    pub(crate) fn is_definite_exhaustion(&self, text: &str) -> bool {
        DEFINITE.is_match(text) || self.exhaustion.iter().any(|pattern| pattern.is_match(text))
    }
}

/// Whether `text` is a rate limit that says when to retry (`retry-after: 7`).
pub(crate) fn is_rate_limit_with_reset(text: &str, now_unix: i64) -> bool {
    RATE_LIMIT.is_match(text) && reset_time(text, now_unix).is_some()
}

fn exhaustion(text: &str, now_unix: i64) -> Exhaustion {
    let trimmed = text.trim();
    let message = if trimmed.len() > MAX_EXHAUSTION_MESSAGE {
        format!("{}…", char_prefix(trimmed, MAX_EXHAUSTION_MESSAGE))
    } else {
        trimmed.to_string()
    };
    Exhaustion {
        message,
        reset_at: reset_time(text, now_unix),
    }
}

/// The quota reset time a message states, as Unix seconds.
pub(crate) fn reset_time(text: &str, now_unix: i64) -> Option<i64> {
    if let Some(epoch) = RESET_EPOCH
        .captures(text)
        .and_then(|captures| captures[1].parse::<i64>().ok())
    {
        return Some(epoch);
    }
    if let Some(seconds) = RESET_IN_SECONDS
        .captures(text)
        .and_then(|captures| captures[1].parse::<i64>().ok())
    {
        return Some(now_unix.saturating_add(seconds));
    }
    let captures = RESET_IN_UNITS.captures(text)?;
    let amount = captures[1].parse::<i64>().ok()?;
    let unit = captures[2].to_ascii_lowercase();
    let scale = match unit.chars().next() {
        Some('h') => 3600,
        Some('m') => 60,
        _ => 1,
    };
    Some(now_unix.saturating_add(amount.saturating_mul(scale)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_pattern_compiles() {
        for pattern in [
            &DEFINITE,
            &GENERIC,
            &RATE_LIMIT,
            &NOISE,
            &ERROR_LIKE,
            &NEEDS_AUTHENTICATION,
            &ERROR_REPORT,
            &RESET_EPOCH,
            &RESET_IN_SECONDS,
            &RESET_IN_UNITS,
        ] {
            LazyLock::force(pattern);
        }
    }

    fn patterns() -> Patterns {
        Patterns::new(&[], &[]).unwrap()
    }

    #[test]
    fn default_crash_patterns_match_known_cli_failures() {
        let patterns = patterns();
        assert_eq!(
            patterns.crash_in("Error: No messages returned"),
            Some("No messages returned")
        );
        assert_eq!(patterns.crash_in("read ECONNRESET"), Some("ECONNRESET"));
        assert_eq!(patterns.crash_in("all good"), None);
    }

    #[test]
    fn extra_crash_patterns_are_regexes() {
        let patterns = Patterns::new(&["fatal: .* lost".into()], &[]).unwrap();
        assert!(patterns.crash_in("fatal: connection lost").is_some());
    }

    #[test]
    fn an_invalid_pattern_is_an_error_naming_it() {
        let error = Patterns::new(&["(".into()], &[]).unwrap_err();
        assert!(error.to_string().contains("invalid crash pattern `(`"));
    }

    #[test]
    fn claude_usage_limit_carries_its_reset_epoch() {
        let found = patterns()
            .exhaustion_in_diagnostic("Claude AI usage limit reached|1760000000", 0)
            .unwrap();
        assert_eq!(found.reset_at, Some(1_760_000_000));
    }

    #[test]
    fn codex_usage_limit_resets_relative_to_now() {
        let text = r#"{"type":"usage_limit_reached","resets_in_seconds":120}"#;
        let found = patterns().exhaustion_in_diagnostic(text, 1000).unwrap();
        assert_eq!(found.reset_at, Some(1120));
    }

    #[test]
    fn try_again_in_hours_is_read() {
        let text = "You've hit your usage limit. Try again in 2 hours.";
        let found = patterns().exhaustion_in_diagnostic(text, 0).unwrap();
        assert_eq!(found.reset_at, Some(7200));
    }

    #[test]
    fn a_rate_limit_without_a_reset_time_is_no_exhaustion() {
        let text = "429: rate limit exceeded";
        assert!(patterns().exhaustion_in_diagnostic(text, 0).is_none());
    }

    #[test]
    fn a_rate_limit_with_retry_after_rests_that_long_and_only_as_a_diagnostic() {
        let text = "429 Too many requests, please slow down (retry-after: 7)";
        let found = patterns().exhaustion_in_diagnostic(text, 100).unwrap();
        assert_eq!(found.reset_at, Some(107));
        assert!(!patterns().is_definite_exhaustion(text));
    }

    #[test]
    fn authentication_messages_of_known_agents_are_recognised() {
        for text in [
            "Authentication required",
            "Gemini API key is missing or not configured.",
            "Invalid API key · Please run /login",
            "Not logged in. Please run `codex login`.",
        ] {
            assert!(needs_authentication(text), "{text}");
        }
        assert!(!needs_authentication(
            "Using the API key from the environment"
        ));
    }

    #[test]
    fn warnings_and_stack_frames_are_noise_errors_are_not() {
        assert!(is_noise("(node:7) Warning: something"));
        assert!(is_noise("DeprecationWarning: punycode"));
        assert!(is_noise("    at foo (/x.js:1:2)"));
        assert!(!is_noise("Error: boom"));
        assert!(is_error_like("Error: boom"));
        assert!(is_error_like("request failed with status 500"));
        assert!(!is_error_like("Loaded cached credentials."));
    }

    #[test]
    fn exhaustion_without_a_stated_reset_has_none() {
        let found = patterns()
            .exhaustion_in_diagnostic("insufficient_quota", 0)
            .unwrap();
        assert_eq!(found.reset_at, None);
    }

    #[test]
    fn configured_exhaustion_patterns_apply_to_message_text() {
        let patterns = Patterns::new(&[], &["out of juice".into()]).unwrap();
        assert!(patterns.is_definite_exhaustion("I am out of juice"));
    }
}
