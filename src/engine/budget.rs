//! Budgets and usage totals, one rule for both modes: what the attempts of a task or a
//! feature spent ([`UsageTotals`], derived from the attempts), and whether a feature's
//! budget ([`Budget`]) is spent ([`Budget::spent`]). Pure.
//!
//! Money is exact: US dollars in millionths ([`MicroUsd`]), written as a decimal string
//! (`"12.50"`) in manifests and status, never as a float.
//!
//! Unknown cost: an attempt whose agent reported no cost (codex-acp never does; an attempt
//! without a result reports nothing) adds nothing to `costUSD` and is counted in
//! `attemptsWithUnknownCost` instead. `maxCostUSD` is charged only with reported costs, so
//! [`Budget::unknown_cost_warning`] says so as soon as such an attempt exists; `maxTokens`
//! is the bound that holds for every agent that reports tokens.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::attempt::{Tokens, Usage};

/// Digits after the decimal point a dollar amount may have.
pub(crate) const USD_DECIMALS: usize = 6;
/// Digits before the decimal point a dollar amount may have.
pub(crate) const USD_INTEGER_DIGITS: usize = 9;
/// The shape of a dollar amount (a non-negative decimal), as the CRD checks it.
pub(crate) const USD_PATTERN: &str = "^[0-9]{1,9}([.][0-9]{1,6})?$";

const MICROS_PER_DOLLAR: u64 = 1_000_000;

/// An amount of US dollars in millionths: exact to add and compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MicroUsd(pub u64);

/// Why a dollar amount cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not an amount of US dollars: write a decimal string with at most \
     {USD_INTEGER_DIGITS} digits before and {USD_DECIMALS} after the point, e.g. \"12.50\""
)]
pub struct UsdError {
    /// The text given.
    pub text: String,
}

impl MicroUsd {
    /// Reads a decimal amount of dollars such as `"12.5"` or `"0.000250"`.
    pub fn parse(text: &str) -> Result<MicroUsd, UsdError> {
        let error = || UsdError {
            text: text.to_owned(),
        };
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        let shaped = (1..=USD_INTEGER_DIGITS).contains(&whole.len())
            && fraction.len() <= USD_DECIMALS
            && fraction.is_empty() != text.contains('.')
            && digits(whole)
            && digits(fraction);
        if !shaped {
            return Err(error());
        }
        let whole: u64 = whole.parse().map_err(|_| error())?;
        let padded = format!("{fraction:0<USD_DECIMALS$}");
        let fraction: u64 = padded.parse().map_err(|_| error())?;
        Ok(MicroUsd(whole * MICROS_PER_DOLLAR + fraction))
    }

    /// The amount an agent reported in (floating-point) dollars, rounded to the nearest
    /// millionth; `None` for a negative or non-finite report.
    pub fn from_dollars(dollars: f64) -> Option<MicroUsd> {
        let micros = (dollars * MICROS_PER_DOLLAR as f64).round();
        // `as` saturates; the range check keeps absurd reports out.
        (micros.is_finite() && micros >= 0.0 && micros < u64::MAX as f64)
            .then_some(MicroUsd(micros as u64))
    }

    /// The sum, saturating.
    pub fn saturating_add(self, other: MicroUsd) -> MicroUsd {
        MicroUsd(self.0.saturating_add(other.0))
    }
}

/// `12.50`, `0.042`, `3.00`: at least two decimals, no trailing zeros beyond them.
impl fmt::Display for MicroUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / MICROS_PER_DOLLAR;
        let fraction = format!("{:06}", self.0 % MICROS_PER_DOLLAR);
        let fraction = fraction.trim_end_matches('0');
        write!(f, "{whole}.{fraction:0<2}")
    }
}

impl Serialize for MicroUsd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MicroUsd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        MicroUsd::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for MicroUsd {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MicroUsd".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": USD_PATTERN,
        })
    }
}

/// Tokens by kind and cost, summed over attempts. Derived from the attempts: each ended
/// attempt is added once ([`UsageTotals::add_attempt`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Tokens by kind.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// US dollars the agents reported, as a decimal string; absent when no attempt
    /// reported a cost. Attempts without a reported cost are left out (see
    /// attemptsWithUnknownCost): then this is a lower bound.
    #[serde(rename = "costUSD", default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<MicroUsd>,
    /// Attempts whose cost is unknown: the agent reported none (codex-acp never does), or
    /// the attempt ended without a result.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts_with_unknown_cost: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl UsageTotals {
    /// The totals of these attempts' usage (`None`: the attempt reported nothing).
    pub fn of_attempts<'a>(attempts: impl IntoIterator<Item = Option<&'a Usage>>) -> Self {
        let mut totals = UsageTotals::default();
        for usage in attempts {
            totals.add_attempt(usage);
        }
        totals
    }

    /// Adds one ended attempt: its reported usage, or `None` when it reported nothing
    /// (its cost is then unknown).
    pub fn add_attempt(&mut self, usage: Option<&Usage>) {
        self.add(&UsageTotals::of_attempt(usage));
    }

    /// The totals of one ended attempt (`None`: it reported nothing).
    fn of_attempt(usage: Option<&Usage>) -> Self {
        let Some(usage) = usage else {
            return UsageTotals {
                attempts_with_unknown_cost: 1,
                ..UsageTotals::default()
            };
        };
        let cost_usd = usage.cost_usd.and_then(MicroUsd::from_dollars);
        UsageTotals {
            tokens: usage.tokens,
            cost_usd,
            attempts_with_unknown_cost: u32::from(cost_usd.is_none()),
        }
    }

    /// Adds other totals (a feature's totals are its tasks' totals added).
    pub fn add(&mut self, other: &UsageTotals) {
        self.tokens.add(&other.tokens);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or_default().saturating_add(b.unwrap_or_default())),
        };
        self.attempts_with_unknown_cost = self
            .attempts_with_unknown_cost
            .saturating_add(other.attempts_with_unknown_cost);
    }

    /// The tokens `maxTokens` counts: input plus output (cache reads and writes are shown,
    /// not counted).
    pub fn tokens(&self) -> u64 {
        self.tokens.total()
    }

    /// The cost for people: `$1.25`, `$1.25 + unknown (2 attempts)`, `unknown (3 attempts)`,
    /// or `-` when nothing was spent.
    pub fn cost_text(&self) -> String {
        let unknown = match self.attempts_with_unknown_cost {
            0 => None,
            1 => Some("unknown (1 attempt)".to_owned()),
            n => Some(format!("unknown ({n} attempts)")),
        };
        match (self.cost_usd, unknown) {
            (Some(cost), Some(unknown)) => format!("${cost} + {unknown}"),
            (Some(cost), None) => format!("${cost}"),
            (None, Some(unknown)) => unknown,
            (None, None) => "-".to_owned(),
        }
    }
}

impl UsageTotals {
    /// The cost in a table column: `$1.25`, `$1.25+?` (some unknown), `?` (all unknown),
    /// `-` (nothing spent).
    pub fn cost_column(&self) -> String {
        match (self.cost_usd, self.attempts_with_unknown_cost) {
            (Some(cost), 0) => format!("${cost}"),
            (Some(cost), _) => format!("${cost}+?"),
            (None, 0) => "-".to_owned(),
            (None, _) => "?".to_owned(),
        }
    }

    /// Tokens by kind for people: `240 tokens (input 200, output 40, cache read 0, cache
    /// write 0)`.
    pub fn tokens_text(&self) -> String {
        format!(
            "{} tokens (input {}, output {}, cache read {}, cache write {})",
            self.tokens(),
            self.tokens.input,
            self.tokens.output,
            self.tokens.cache_read,
            self.tokens.cache_write
        )
    }
}

impl fmt::Display for Budget {
    /// `maxCostUSD $5.00, maxTokens 100000`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(cost) = self.max_cost {
            parts.push(format!("maxCostUSD ${cost}"));
        }
        if let Some(tokens) = self.max_tokens {
            parts.push(format!("maxTokens {tokens}"));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A feature's budget: once either limit is spent, no new attempt starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Most US dollars the attempts may report in all.
    #[serde(
        rename = "maxCostUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_cost: Option<MicroUsd>,
    /// Most input plus output tokens the attempts may report in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Which budget is spent, and by how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetSpent {
    /// The reported costs reached `maxCostUSD`.
    Cost {
        /// Reported so far.
        spent: MicroUsd,
        /// The limit.
        limit: MicroUsd,
    },
    /// The reported tokens reached `maxTokens`.
    Tokens {
        /// Reported so far.
        spent: u64,
        /// The limit.
        limit: u64,
    },
}

impl fmt::Display for BudgetSpent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetSpent::Cost { spent, limit } => write!(
                f,
                "the cost budget is spent: ${spent} reported of maxCostUSD ${limit}"
            ),
            BudgetSpent::Tokens { spent, limit } => write!(
                f,
                "the token budget is spent: {spent} tokens reported of maxTokens {limit}"
            ),
        }
    }
}

impl Budget {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_cost.is_none() && self.max_tokens.is_none()
    }

    /// The budget that `totals` used up, if any (cost first). A budget is spent once the
    /// totals reach the limit: the attempt that crosses it finishes and is counted.
    pub fn spent(&self, totals: &UsageTotals) -> Option<BudgetSpent> {
        let cost = self.max_cost.and_then(|limit| {
            let spent = totals.cost_usd.unwrap_or_default();
            (spent >= limit).then_some(BudgetSpent::Cost { spent, limit })
        });
        let tokens = self.max_tokens.and_then(|limit| {
            let spent = totals.tokens();
            (spent >= limit).then_some(BudgetSpent::Tokens { spent, limit })
        });
        cost.or(tokens)
    }

    /// A warning while `maxCostUSD` is set and some attempts' cost is unknown: the cost
    /// budget counts only reported costs, so it may stop late, or never.
    pub fn unknown_cost_warning(&self, totals: &UsageTotals) -> Option<String> {
        let limit = self.max_cost?;
        let unknown = totals.attempts_with_unknown_cost;
        if unknown == 0 {
            return None;
        }
        let attempts = if unknown == 1 {
            "1 attempt".to_owned()
        } else {
            format!("{unknown} attempts")
        };
        let backstop = match self.max_tokens {
            Some(tokens) => format!("maxTokens ({tokens}) still bounds them"),
            None => "set budget.maxTokens to bound them".to_owned(),
        };
        Some(format!(
            "{attempts} reported no cost (the agent does not report it, or the attempt ended \
             without a result); maxCostUSD (${limit}) counts only reported costs, so it may \
             stop the feature late or never: {backstop}"
        ))
    }
}

/// The share of a Feature's budget one attempt may spend (the lease its model gateway
/// enforces); an unset limit does not bind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allowance {
    /// Input plus output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars, at the price table's prices.
    #[serde(rename = "costUSD", default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
}

impl Allowance {
    /// Whether any limit is set.
    pub fn binds(&self) -> bool {
        self.tokens.is_some() || self.cost.is_some()
    }

    /// The `ralph runner` flags that give an attempt this allowance.
    pub fn runner_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(tokens) = self.tokens {
            args.extend(["--budget-tokens".to_owned(), tokens.to_string()]);
        }
        if let Some(cost) = self.cost {
            args.extend(["--budget-cost".to_owned(), cost.to_string()]);
        }
        args
    }
}

impl Budget {
    /// The share of this budget a new attempt may spend: what is left after the ended
    /// attempts (`spent`) and the shares the running attempts hold (`leased`), split evenly
    /// over the `free_slots` attempts that may still start now (this one included). The
    /// shares of running attempts plus what ended attempts spent never exceed the budget, so
    /// concurrent attempts overshoot it by at most the model calls in flight when their
    /// shares run out. A share is never 0: every attempt may make one model call, so a
    /// feature whose budget is nearly spent makes progress (and spends it) instead of
    /// starting attempts that are refused at once.
    pub fn share(&self, spent: &UsageTotals, leased: &[Allowance], free_slots: u32) -> Allowance {
        self.split(spent, leased, u64::from(free_slots.max(1)))
    }

    /// Whether the ended attempts (`spent`) and the shares of the running ones (`leased`)
    /// hold the whole budget: then no new attempt starts until a running one ends (its
    /// unspent share comes back).
    pub fn leased_out(&self, spent: &UsageTotals, leased: &[Allowance]) -> bool {
        let (tokens, cost) = self.left(spent, leased);
        tokens == Some(0) || cost == Some(0)
    }

    /// What is left of each limit after `spent` and `leased`.
    fn left(&self, spent: &UsageTotals, leased: &[Allowance]) -> (Option<u64>, Option<u64>) {
        let tokens = self.max_tokens.map(|limit| {
            let held: u64 = leased.iter().filter_map(|a| a.tokens).sum();
            limit.saturating_sub(spent.tokens()).saturating_sub(held)
        });
        let cost = self.max_cost.map(|limit| {
            let held: u64 = leased.iter().filter_map(|a| a.cost).map(|c| c.0).sum();
            limit
                .0
                .saturating_sub(spent.cost_usd.unwrap_or_default().0)
                .saturating_sub(held)
        });
        (tokens, cost)
    }

    fn split(&self, spent: &UsageTotals, leased: &[Allowance], slots: u64) -> Allowance {
        let (tokens, cost) = self.left(spent, leased);
        Allowance {
            tokens: tokens.map(|left| (left / slots).max(1)),
            cost: cost.map(|left| MicroUsd((left / slots).max(1))),
        }
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
