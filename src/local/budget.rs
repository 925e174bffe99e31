//! Usage totals of a local run, derived from its stored attempts (the same rule as the
//! cluster's: [`UsageTotals::add_attempt`] once per ended attempt).

use crate::engine::budget::UsageTotals;
use crate::local::store::AttemptRow;

/// The totals of the ended attempts among `attempts`: an attempt that ended without the
/// runner's result reported nothing, so its cost is unknown.
pub fn attempt_totals<'a>(attempts: impl IntoIterator<Item = &'a AttemptRow>) -> UsageTotals {
    UsageTotals::of_attempts(
        attempts
            .into_iter()
            .filter(|attempt| attempt.ended_at_ms.is_some())
            .map(|attempt| {
                let details = &attempt.details;
                details.result.is_some().then_some(&details.usage)
            }),
    )
}

/// How many of the ended `attempts` reported no tokens (no result, or a zero count): a
/// token budget cannot count them.
pub fn tokens_unreported<'a>(attempts: impl IntoIterator<Item = &'a AttemptRow>) -> u32 {
    let count = attempts
        .into_iter()
        .filter(|attempt| attempt.ended_at_ms.is_some())
        .filter(|attempt| {
            attempt.details.result.is_none() || attempt.details.usage.total_tokens() == 0
        })
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// How many of `attempts` answered their turn (a stop reason) without reporting any
/// tokens: their agent does not report tokens, so a token budget never counts its work. A
/// crash's missing count is not one of them (the turn was cut off before the agent said).
pub fn answered_without_tokens<'a>(attempts: impl IntoIterator<Item = &'a AttemptRow>) -> u32 {
    let count = attempts
        .into_iter()
        .filter(|attempt| attempt.details.stop_reason.is_some())
        .filter(|attempt| attempt.details.usage.total_tokens() == 0)
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The totals of `task`'s ended attempts.
pub fn task_totals(task: &str, attempts: &[AttemptRow]) -> UsageTotals {
    attempt_totals(attempts.iter().filter(|attempt| attempt.task == task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::{Tokens, Usage};
    use crate::local::store::EndDetails;
    use crate::local::testing;

    fn ended(task: &str, number: u32, cost: Option<f64>, result: bool) -> AttemptRow {
        AttemptRow {
            ended_at_ms: Some(2_000),
            details: EndDetails {
                usage: Usage {
                    tokens: Tokens::new(10, 5),
                    cost_usd: cost,
                },
                result: result.then(|| "{}".to_owned()),
                ..EndDetails::default()
            },
            ..testing::attempt(task, number, "done")
        }
    }

    #[test]
    fn ended_attempts_are_summed_with_their_reported_costs() {
        let attempts = [
            ended("a", 1, Some(0.25), true),
            ended("a", 2, Some(0.5), true),
        ];
        let totals = attempt_totals(&attempts);
        assert_eq!(
            (totals.tokens(), totals.cost_text()),
            (30, "$0.75".to_owned())
        );
    }

    #[test]
    fn an_attempt_without_a_result_has_an_unknown_cost() {
        let attempts = [ended("a", 1, None, false)];
        let totals = attempt_totals(&attempts);
        assert_eq!((totals.tokens(), totals.attempts_with_unknown_cost), (0, 1));
    }

    #[test]
    fn a_running_attempt_is_not_counted_yet() {
        let running = AttemptRow {
            ended_at_ms: None,
            ..ended("a", 1, Some(1.0), true)
        };
        assert_eq!(attempt_totals(&[running]), UsageTotals::default());
    }

    #[test]
    fn a_tasks_totals_leave_out_other_tasks() {
        let attempts = [
            ended("a", 1, Some(0.25), true),
            ended("b", 1, Some(0.5), true),
        ];
        assert_eq!(task_totals("b", &attempts).cost_text(), "$0.50");
    }
}
