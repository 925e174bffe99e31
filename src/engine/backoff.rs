//! Retry backoff: `base * 2^attempt + uniform(0, base)`, capped; randomness injected.

use std::time::Duration;

/// How often and how patiently a failed or crashed task is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBackoff {
    /// Delay before the first retry (also the jitter range).
    pub base: Duration,
    /// Longest delay, jitter included.
    pub cap: Duration,
    /// Retries allowed before a task fails for good.
    pub max_retries: u32,
}

impl Default for RetryBackoff {
    /// 10 s base, 10 min cap, 3 retries.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(600),
            max_retries: 3,
        }
    }
}

impl RetryBackoff {
    /// The retry rule of one task under its feature's settings (`self`): the task's own
    /// `maxRetries`, when it sets one, replaces the feature's; the backoff is the feature's.
    pub fn for_task(self, task_max_retries: Option<u32>) -> Self {
        Self {
            max_retries: task_max_retries.unwrap_or(self.max_retries),
            ..self
        }
    }

    /// The wait before a retry: `min(cap, base * 2^retry + jitter * base)`.
    ///
    /// `retry` is the number of retries already used before this one (0 for the first retry);
    /// `jitter` is uniform in `[0, 1)`, supplied by the caller (values outside are clamped).
    /// Never overflows, however large `retry` is.
    pub fn delay(&self, retry: u32, jitter: f64) -> Duration {
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let exponential = 2u32
            .checked_pow(retry)
            .and_then(|factor| self.base.checked_mul(factor))
            .unwrap_or(Duration::MAX);
        exponential
            .saturating_add(self.base.mul_f64(jitter))
            .min(self.cap)
    }

    /// When the retry may start, Unix milliseconds: `now_ms` plus [`RetryBackoff::delay`].
    pub fn next_attempt_after(&self, now_ms: i64, retry: u32, jitter: f64) -> i64 {
        let delay_ms = i64::try_from(self.delay(retry, jitter).as_millis()).unwrap_or(i64::MAX);
        now_ms.saturating_add(delay_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_s_own_retry_limit_replaces_the_feature_s() {
        let feature = RetryBackoff::default();
        assert_eq!(feature.for_task(Some(7)).max_retries, 7);
        assert_eq!(feature.for_task(Some(7)).base, feature.base);
    }

    #[test]
    fn a_task_without_a_retry_limit_has_the_feature_s() {
        let feature = RetryBackoff::default();
        assert_eq!(feature.for_task(None), feature);
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn defaults_are_ten_seconds_ten_minutes_three_retries() {
        let policy = RetryBackoff::default();
        assert_eq!(
            (policy.base, policy.cap, policy.max_retries),
            (secs(10), secs(600), 3)
        );
    }

    #[test]
    fn first_retry_without_jitter_waits_the_base() {
        assert_eq!(RetryBackoff::default().delay(0, 0.0), secs(10));
    }

    #[test]
    fn each_retry_doubles_the_delay() {
        let policy = RetryBackoff::default();
        let delays: Vec<_> = (0..4).map(|retry| policy.delay(retry, 0.0)).collect();
        assert_eq!(delays, [secs(10), secs(20), secs(40), secs(80)]);
    }

    #[test]
    fn jitter_adds_its_fraction_of_the_base() {
        assert_eq!(RetryBackoff::default().delay(1, 0.5), secs(25));
    }

    #[test]
    fn delay_is_capped_jitter_included() {
        let policy = RetryBackoff {
            cap: secs(325),
            ..RetryBackoff::default()
        };
        assert_eq!(policy.delay(5, 0.0), secs(320));
        assert_eq!(policy.delay(5, 0.9), secs(325));
        assert_eq!(RetryBackoff::default().delay(6, 0.0), secs(600));
    }

    #[test]
    fn huge_retry_numbers_stay_at_the_cap() {
        assert_eq!(RetryBackoff::default().delay(u32::MAX, 0.999), secs(600));
    }

    #[test]
    fn huge_base_saturates_instead_of_overflowing() {
        let policy = RetryBackoff {
            base: Duration::MAX,
            cap: Duration::MAX,
            max_retries: 3,
        };
        assert_eq!(policy.delay(3, 0.5), Duration::MAX);
    }

    #[test]
    fn jitter_outside_the_unit_range_is_clamped() {
        let policy = RetryBackoff::default();
        assert_eq!(policy.delay(0, -3.0), secs(10));
        assert_eq!(policy.delay(0, 7.0), secs(20));
        assert_eq!(policy.delay(0, f64::NAN), secs(10));
    }

    #[test]
    fn next_attempt_is_now_plus_the_delay_in_milliseconds() {
        assert_eq!(
            RetryBackoff::default().next_attempt_after(1_000, 2, 0.25),
            1_000 + 42_500
        );
    }

    #[test]
    fn next_attempt_saturates_at_the_end_of_time() {
        let policy = RetryBackoff {
            base: Duration::MAX,
            cap: Duration::MAX,
            max_retries: 1,
        };
        assert_eq!(policy.next_attempt_after(5, 0, 0.0), i64::MAX);
    }
}
