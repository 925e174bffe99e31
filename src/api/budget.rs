//! A Feature's budget (`spec.budget`): cost and token limits over all its attempts.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::engine::budget::{Budget, MicroUsd, UsdError};

/// The message of the rule on `maxCostUSD` (the CRD's and the local manifest check's).
pub const MAX_COST_USD_RULE_MESSAGE: &str = "maxCostUSD must be a positive amount of US dollars \
     written as a quoted decimal string with at most 9 digits before and 6 after the point, \
     e.g. \"12.50\"";
/// The message of the rule that a budget sets a limit.
pub const EMPTY_BUDGET_MESSAGE: &str =
    "a budget needs maxCostUSD or maxTokens (remove budget for no limit)";

/// Limits on what a Feature's attempts may spend in all. Once a limit is reached no new
/// attempt starts; attempts already running finish and are counted; the feature ends with
/// outcome LimitReached. With the model gateway (spec.agent.gateway) each attempt gets a
/// share and is stopped mid-turn once it is used, and what the gateway metered is counted;
/// without it only what agents report is counted: an attempt whose agent reports no cost
/// (codex-acp) adds nothing to the cost, and the Feature's CostReported condition says so;
/// maxTokens bounds every agent that reports tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.maxCostUSD) || has(self.maxTokens)").message(EMPTY_BUDGET_MESSAGE))]
pub struct BudgetSpec {
    /// Most US dollars the attempts may cost (priced by the gateway, or as the agents report
    /// it): a quoted decimal string such as "12.50" (at most 6 decimals).
    #[serde(
        rename = "maxCostUSD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]{1,9}([.][0-9]{1,6})?$') && self.matches('[1-9]')").message(MAX_COST_USD_RULE_MESSAGE))]
    pub max_cost_usd: Option<String>,

    /// Most tokens (input plus output, as the gateway metered them or the agents reported
    /// them) the attempts may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
}

/// Why a budget cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `maxCostUSD` is not a positive decimal amount.
    #[error("spec.budget.maxCostUSD: {0}")]
    Cost(#[from] UsdError),
    /// `maxCostUSD` is zero.
    #[error("spec.budget.maxCostUSD: {MAX_COST_USD_RULE_MESSAGE}")]
    ZeroCost,
    /// Neither limit is set.
    #[error("spec.budget: {EMPTY_BUDGET_MESSAGE}")]
    Empty,
}

impl BudgetSpec {
    /// The engine's budget.
    pub fn budget(&self) -> Result<Budget, BudgetError> {
        if self.max_cost_usd.is_none() && self.max_tokens.is_none() {
            return Err(BudgetError::Empty);
        }
        let max_cost = match &self.max_cost_usd {
            Some(text) => match MicroUsd::parse(text)? {
                MicroUsd(0) => return Err(BudgetError::ZeroCost),
                cost => Some(cost),
            },
            None => None,
        };
        Ok(Budget {
            max_cost,
            max_tokens: self.max_tokens,
        })
    }
}

/// The budget of an optional `spec.budget`: unlimited when unset.
pub fn budget_of(spec: Option<&BudgetSpec>) -> Result<Budget, BudgetError> {
    spec.map_or(Ok(Budget::default()), BudgetSpec::budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cost: Option<&str>, tokens: Option<u64>) -> BudgetSpec {
        BudgetSpec {
            max_cost_usd: cost.map(str::to_owned),
            max_tokens: tokens,
        }
    }

    #[test]
    fn a_decimal_cost_becomes_exact_micro_dollars() {
        let budget = spec(Some("12.5"), Some(1000)).budget();
        assert_eq!(
            budget,
            Ok(Budget {
                max_cost: Some(MicroUsd(12_500_000)),
                max_tokens: Some(1000),
            })
        );
    }

    #[test]
    fn a_zero_cost_is_refused() {
        assert_eq!(
            spec(Some("0.00"), None).budget(),
            Err(BudgetError::ZeroCost)
        );
    }

    #[test]
    fn a_budget_without_limits_is_refused() {
        assert_eq!(spec(None, None).budget(), Err(BudgetError::Empty));
    }

    #[test]
    fn a_malformed_cost_names_the_field_and_an_example() {
        let error = spec(Some("$5"), None).budget().err().map(|e| e.to_string());
        let text = error.unwrap_or_default();
        assert!(text.starts_with("spec.budget.maxCostUSD: \"$5\""), "{text}");
        assert!(text.contains("\"12.50\""), "{text}");
    }

    #[test]
    fn no_budget_is_unlimited() {
        assert_eq!(budget_of(None).map(|b| b.is_unlimited()), Ok(true));
    }
}
