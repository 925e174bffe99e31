//! What model calls cost: US dollars per million tokens by kind, per model. A model is
//! priced by the longest entry that is its name or a prefix of it followed by `-`
//! (`claude-sonnet-4` prices `claude-sonnet-4-5-20250929`). A model no entry prices has an
//! unknown cost, never 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::attempt::Tokens;
use crate::engine::budget::{MicroUsd, UsdError};

/// US dollars per million tokens of each kind, as decimal strings (`"3.00"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    /// Per million input tokens.
    pub input: MicroUsd,
    /// Per million output tokens.
    pub output: MicroUsd,
    /// Per million tokens read from the prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<MicroUsd>,
    /// Per million tokens written to the prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<MicroUsd>,
}

/// Prices by model name (or name prefix).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

/// Defaults for the models the known agents use (USD per million tokens: input, output,
/// cache read, cache write), as the providers listed them in 2026; override them per
/// Feature or cluster-wide.
const DEFAULTS: &[(&str, &str, &str, &str, &str)] = &[
    ("claude-opus-4", "5", "25", "0.50", "6.25"),
    ("claude-opus-4-0", "15", "75", "1.50", "18.75"),
    ("claude-opus-4-1", "15", "75", "1.50", "18.75"),
    ("claude-sonnet-4", "3", "15", "0.30", "3.75"),
    ("claude-haiku-4", "1", "5", "0.10", "1.25"),
    ("claude-3-5-haiku", "0.80", "4", "0.08", "1"),
    ("gpt-5", "1.25", "10", "0.125", "1.25"),
    ("gpt-5-mini", "0.25", "2", "0.025", "0.25"),
    ("gpt-5-nano", "0.05", "0.40", "0.005", "0.05"),
    ("gpt-5.5", "1.25", "10", "0.125", "1.25"),
    ("gpt-4.1", "2", "8", "0.50", "2"),
    ("gemini-2.5-pro", "1.25", "10", "0.31", "1.25"),
    ("gemini-2.5-flash", "0.30", "2.50", "0.075", "0.30"),
    ("gemini-2.5-flash-lite", "0.10", "0.40", "0.025", "0.10"),
];

impl PriceTable {
    /// The built-in prices.
    pub fn defaults() -> PriceTable {
        let price = |text: &str| MicroUsd::parse(text).unwrap_or_default();
        let prices = DEFAULTS
            .iter()
            .map(|(model, input, output, read, write)| {
                let entry = ModelPrice {
                    input: price(input),
                    output: price(output),
                    cache_read: Some(price(read)),
                    cache_write: Some(price(write)),
                };
                ((*model).to_owned(), entry)
            })
            .collect();
        PriceTable { prices }
    }

    /// A table of exactly these prices.
    pub fn from_entries(prices: BTreeMap<String, ModelPrice>) -> PriceTable {
        PriceTable { prices }
    }

    /// Whether the table prices nothing.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// These prices with `overrides` put over them (same model: the override wins).
    pub fn with(mut self, overrides: &PriceTable) -> PriceTable {
        for (model, price) in &overrides.prices {
            self.prices.insert(model.clone(), price.clone());
        }
        self
    }

    /// Reads a table written as YAML or JSON: `{MODEL: {input: "3", output: "15",
    /// cacheRead: "0.30", cacheWrite: "3.75"}}`.
    pub fn parse(text: &str) -> Result<PriceTable, PriceError> {
        serde_yaml_ng::from_str(text).map_err(|error| PriceError(error.to_string()))
    }

    /// The price of `model`: its own entry, else the longest entry it extends with `-`.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        self.prices
            .iter()
            .filter(|(prefix, _)| {
                model
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, price)| price)
    }

    /// What `tokens` of `model` cost; `None` when the table does not price the model.
    pub fn cost(&self, model: &str, tokens: &Tokens) -> Option<MicroUsd> {
        let price = self.price(model)?;
        let per_million = |count: u64, price: MicroUsd| u128::from(count) * u128::from(price.0);
        let sum = per_million(tokens.input, price.input)
            + per_million(tokens.output, price.output)
            + per_million(tokens.cache_read, price.cache_read.unwrap_or(price.input))
            + per_million(tokens.cache_write, price.cache_write.unwrap_or(price.input));
        let micros = sum.div_ceil(1_000_000);
        Some(MicroUsd(u64::try_from(micros).unwrap_or(u64::MAX)))
    }
}

/// A price table that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the price table cannot be read: {0} (write MODEL: {{input: \"3.00\", output: \"15.00\"}}, \
     US dollars per million tokens as quoted decimal strings)"
)]
pub struct PriceError(String);

impl From<UsdError> for PriceError {
    fn from(error: UsdError) -> Self {
        PriceError(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dated_model_name_is_priced_by_the_longest_matching_entry() {
        let table = PriceTable::defaults();
        let opus_41 = table.price("claude-opus-4-1-20250805").expect("priced");
        assert_eq!(opus_41.input, MicroUsd(15_000_000));
        let opus = table.price("claude-opus-4-8").expect("priced");
        assert_eq!(opus.input, MicroUsd(5_000_000));
    }

    #[test]
    fn a_prefix_counts_only_up_to_a_dash() {
        assert!(PriceTable::defaults().price("gpt-50").is_none());
    }

    #[test]
    fn cost_adds_every_kind_at_its_price_rounded_up_to_a_millionth() {
        let table = PriceTable::defaults();
        let tokens = Tokens {
            input: 1_000,
            output: 100,
            cache_read: 10_000,
            cache_write: 0,
        };
        // 1000 * 3 + 100 * 15 + 10000 * 0.30 = 7500 micro-dollars
        assert_eq!(
            table.cost("claude-sonnet-4-5", &tokens),
            Some(MicroUsd(7_500))
        );
    }

    #[test]
    fn a_model_the_table_does_not_know_has_no_cost() {
        assert_eq!(
            PriceTable::defaults().cost("llama-99", &Tokens::new(10, 10)),
            None
        );
    }

    #[test]
    fn an_override_replaces_the_default_of_its_model() {
        let overrides =
            PriceTable::parse("gpt-5.5: {input: \"2\", output: \"20\"}").expect("reads");
        let table = PriceTable::defaults().with(&overrides);
        assert_eq!(
            table.cost("gpt-5.5", &Tokens::new(1_000_000, 0)),
            Some(MicroUsd(2_000_000))
        );
    }

    #[test]
    fn an_unreadable_price_names_the_format() {
        let error = PriceTable::parse("m: {input: 3, output: \"x\"}").expect_err("refused");
        assert!(
            error.to_string().contains("quoted decimal strings"),
            "{error}"
        );
    }
}
