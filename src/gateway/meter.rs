//! What an attempt's model calls used, read from the wire, and the budget slice that
//! refuses the next call once it is spent.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::prices::PriceTable;
use super::usage::WireUsage;
use crate::engine::attempt::{Tokens, Usage};
pub use crate::engine::budget::Allowance;
use crate::engine::budget::MicroUsd;
use crate::sync::lock;

/// What the gateway saw in one attempt: the document `GET /_ralph/usage` answers, and what
/// the runner records as the attempt's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metered {
    /// Model calls forwarded.
    pub calls: u32,
    /// Model calls refused because the allowance was spent.
    pub refused_calls: u32,
    /// Tokens by kind, summed over the calls.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// What the calls cost at the price table's prices; absent when a call's model is not
    /// in the table (then the cost is unknown, not 0).
    #[serde(rename = "costUSD", default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
    /// Models of calls the price table does not price.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unpriced_models: BTreeSet<String>,
    /// The allowance, when one binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowance: Option<Allowance>,
    /// Why calls were refused (the first refusal), when any was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

impl Metered {
    /// The attempt's usage: the tokens, and the cost in dollars when every call was priced.
    pub fn usage(&self) -> Usage {
        Usage {
            tokens: self.tokens,
            cost_usd: self.cost.map(|cost| cost.0 as f64 / 1_000_000.0),
        }
    }

    /// What the allowance says about the next call: `Some(why)` once it is spent.
    fn spent(&self) -> Option<String> {
        let allowance = self.allowance?;
        if let Some(limit) = allowance.tokens
            && self.tokens.total() >= limit
        {
            return Some(format!(
                "the token budget of this attempt is spent: {} of {limit} tokens used \
                 (spec.budget.maxTokens of the Feature)",
                self.tokens.total()
            ));
        }
        let cost = self.cost.unwrap_or_default();
        match allowance.cost {
            Some(limit) if cost >= limit => Some(format!(
                "the cost budget of this attempt is spent: ${cost} of ${limit} used \
                 (spec.budget.maxCostUSD of the Feature)"
            )),
            _ => None,
        }
    }
}

/// The meter of one gateway: shared by its handlers.
#[derive(Debug)]
pub struct Meter {
    prices: PriceTable,
    state: Mutex<Metered>,
    /// Priced cost so far (kept apart: `Metered::cost` is unset once a call is unpriced).
    priced: Mutex<MicroUsd>,
}

impl Meter {
    /// A meter pricing calls with `prices` and refusing calls once `allowance` is spent.
    pub fn new(prices: PriceTable, allowance: Allowance) -> Meter {
        Meter {
            prices,
            state: Mutex::new(Metered {
                cost: Some(MicroUsd::default()),
                allowance: allowance.binds().then_some(allowance),
                ..Metered::default()
            }),
            priced: Mutex::new(MicroUsd::default()),
        }
    }

    /// Lets a model call through, or says why not (the allowance is spent).
    pub fn admit(&self) -> Result<(), String> {
        let mut state = lock(&self.state);
        let mut view = state.clone();
        view.cost = Some(*lock(&self.priced));
        match view.spent() {
            Some(why) => {
                state.refused_calls += 1;
                state.refusal.get_or_insert_with(|| why.clone());
                Err(why)
            }
            None => {
                state.calls += 1;
                Ok(())
            }
        }
    }

    /// Adds what one call used; `model` is the one asked for when the answer named none.
    pub(crate) fn record(&self, usage: &WireUsage, model: Option<&str>) {
        let tokens = usage.tokens();
        let model = usage.model.as_deref().or(model);
        let cost = model.and_then(|model| self.prices.cost(model, &tokens));
        let mut state = lock(&self.state);
        state.tokens.add(&tokens);
        match cost {
            Some(cost) => {
                let mut priced = lock(&self.priced);
                *priced = priced.saturating_add(cost);
                state.cost = state.cost.map(|total| total.saturating_add(cost));
            }
            None if tokens.total() > 0 || tokens.cache_read > 0 || tokens.cache_write > 0 => {
                state.cost = None;
                state
                    .unpriced_models
                    .insert(model.unwrap_or("(unnamed)").to_owned());
            }
            None => {}
        }
    }

    /// Everything seen so far.
    pub fn metered(&self) -> Metered {
        lock(&self.state).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(input: u64, output: u64, model: &str) -> WireUsage {
        WireUsage {
            input: Some(input),
            output: Some(output),
            model: Some(model.to_owned()),
            ..WireUsage::default()
        }
    }

    #[test]
    fn calls_are_summed_and_priced() {
        let meter = Meter::new(PriceTable::defaults(), Allowance::default());
        meter.record(&call(1_000, 100, "claude-sonnet-4-5"), None);
        meter.record(&call(2_000, 200, "claude-sonnet-4-5"), None);
        let metered = meter.metered();
        assert_eq!(metered.tokens, Tokens::new(3_000, 300));
        assert_eq!(metered.cost, Some(MicroUsd(13_500)));
    }

    #[test]
    fn one_unpriced_call_makes_the_cost_unknown_not_zero() {
        let meter = Meter::new(PriceTable::defaults(), Allowance::default());
        meter.record(&call(1_000, 100, "claude-sonnet-4-5"), None);
        meter.record(&call(10, 10, "llama-99"), None);
        let metered = meter.metered();
        assert_eq!(metered.cost, None);
        assert_eq!(metered.usage().cost_usd, None);
        assert!(metered.unpriced_models.contains("llama-99"));
    }

    #[test]
    fn the_call_after_the_token_allowance_is_reached_is_refused() {
        let allowance = Allowance {
            tokens: Some(1_000),
            cost: None,
        };
        let meter = Meter::new(PriceTable::defaults(), allowance);
        assert!(meter.admit().is_ok());
        meter.record(&call(900, 100, "claude-sonnet-4-5"), None);
        let why = meter.admit().expect_err("refused");
        assert!(why.contains("1000 of 1000 tokens"), "{why}");
        assert_eq!(
            (meter.metered().calls, meter.metered().refused_calls),
            (1, 1)
        );
    }

    #[test]
    fn the_cost_allowance_counts_priced_calls_even_when_another_is_unpriced() {
        let allowance = Allowance {
            tokens: None,
            cost: Some(MicroUsd(5_000)),
        };
        let meter = Meter::new(PriceTable::defaults(), allowance);
        meter.record(&call(1_000, 200, "claude-sonnet-4-5"), None);
        meter.record(&call(10, 10, "llama-99"), None);
        assert!(meter.admit().is_err());
    }
}
