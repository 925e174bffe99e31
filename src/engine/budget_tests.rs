use super::*;

fn usage(input: u64, output: u64, cost: Option<f64>) -> Usage {
    Usage {
        tokens: Tokens::new(input, output),
        cost_usd: cost,
    }
}

fn totals(attempts: &[Option<Usage>]) -> UsageTotals {
    UsageTotals::of_attempts(attempts.iter().map(Option::as_ref))
}

fn usd(text: &str) -> MicroUsd {
    MicroUsd::parse(text).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn dollar_amounts_parse_exactly() {
    assert_eq!(usd("12.5"), MicroUsd(12_500_000));
    assert_eq!(usd("0.000001"), MicroUsd(1));
    assert_eq!(usd("7"), MicroUsd(7_000_000));
}

#[test]
fn malformed_dollar_amounts_are_refused() {
    for text in [
        "",
        ".5",
        "5.",
        "-1",
        "1e3",
        "1.1234567",
        "1234567890",
        "$5",
        "1,50",
    ] {
        assert!(MicroUsd::parse(text).is_err(), "{text:?} was accepted");
    }
}

#[test]
fn the_parser_accepts_exactly_what_the_crd_pattern_accepts() {
    let pattern = regex::Regex::new(USD_PATTERN).ok();
    for text in [
        "0",
        "0.5",
        "12.50",
        "999999999.999999",
        ".5",
        "5.",
        "1.1234567",
        "a",
    ] {
        let by_pattern = pattern.as_ref().is_some_and(|p| p.is_match(text));
        assert_eq!(MicroUsd::parse(text).is_ok(), by_pattern, "{text:?}");
    }
}

#[test]
fn dollar_amounts_print_with_at_least_two_decimals() {
    assert_eq!(MicroUsd(12_500_000).to_string(), "12.50");
    assert_eq!(MicroUsd(42_000).to_string(), "0.042");
    assert_eq!(MicroUsd(1).to_string(), "0.000001");
    assert_eq!(MicroUsd(3_000_000).to_string(), "3.00");
}

#[test]
fn a_printed_amount_parses_back_to_itself() {
    for micros in [0, 1, 42_000, 12_500_000, 999_999_999_999_999] {
        assert_eq!(usd(&MicroUsd(micros).to_string()), MicroUsd(micros));
    }
}

#[test]
fn reported_floating_point_dollars_round_to_the_nearest_millionth() {
    assert_eq!(MicroUsd::from_dollars(0.1 + 0.2), Some(MicroUsd(300_000)));
    assert_eq!(MicroUsd::from_dollars(-0.5), None);
    assert_eq!(MicroUsd::from_dollars(f64::NAN), None);
}

#[test]
fn totals_add_tokens_by_kind_and_reported_costs() {
    let t = totals(&[
        Some(usage(100, 20, Some(0.25))),
        Some(usage(50, 5, Some(0.5))),
    ]);
    assert_eq!(
        (t.tokens.input, t.tokens.output, t.tokens()),
        (150, 25, 175)
    );
    assert_eq!(t.cost_usd, Some(usd("0.75")));
    assert_eq!(t.attempts_with_unknown_cost, 0);
}

#[test]
fn an_attempt_without_a_reported_cost_is_counted_as_unknown_not_zero() {
    let t = totals(&[Some(usage(100, 20, None))]);
    assert_eq!(t.cost_usd, None);
    assert_eq!(t.attempts_with_unknown_cost, 1);
    assert_eq!(t.cost_text(), "unknown (1 attempt)");
}

#[test]
fn an_attempt_without_a_result_has_an_unknown_cost() {
    let t = totals(&[None, Some(usage(1, 1, Some(1.0)))]);
    assert_eq!(t.attempts_with_unknown_cost, 1);
    assert_eq!(t.cost_text(), "$1.00 + unknown (1 attempt)");
}

#[test]
fn no_attempts_cost_nothing_shown_as_a_dash() {
    assert_eq!(UsageTotals::default().cost_text(), "-");
}

#[test]
fn adding_totals_keeps_unknown_costs_apart() {
    let mut feature = totals(&[Some(usage(1, 1, Some(0.5)))]);
    feature.add(&totals(&[Some(usage(2, 2, None)), None]));
    assert_eq!(feature.cost_usd, Some(usd("0.5")));
    assert_eq!(feature.attempts_with_unknown_cost, 2);
    assert_eq!(feature.tokens(), 6);
}

#[test]
fn totals_serialize_cost_as_a_decimal_string_and_omit_an_unknown_one() {
    let known = serde_json::to_value(totals(&[Some(usage(1, 2, Some(0.1)))])).ok();
    assert_eq!(
        known,
        Some(serde_json::json!({
            "inputTokens": 1, "outputTokens": 2, "cacheReadTokens": 0,
            "cacheWriteTokens": 0, "costUSD": "0.10"
        }))
    );
    let unknown = serde_json::to_value(totals(&[Some(usage(1, 2, None))])).ok();
    let unknown = unknown.unwrap_or_default();
    assert!(unknown.get("costUSD").is_none(), "{unknown}");
    assert_eq!(unknown["attemptsWithUnknownCost"], 1);
}

#[test]
fn totals_read_back_what_they_wrote() {
    let t = totals(&[Some(usage(1, 2, Some(0.1))), None]);
    let json = serde_json::to_string(&t).unwrap_or_default();
    assert_eq!(serde_json::from_str::<UsageTotals>(&json).ok(), Some(t));
}

fn budget(cost: Option<&str>, tokens: Option<u64>) -> Budget {
    Budget {
        max_cost: cost.map(usd),
        max_tokens: tokens,
    }
}

#[test]
fn a_cost_budget_is_spent_once_the_reported_costs_reach_it() {
    let b = budget(Some("1.00"), None);
    assert_eq!(b.spent(&totals(&[Some(usage(0, 0, Some(0.99)))])), None);
    assert_eq!(
        b.spent(&totals(&[Some(usage(0, 0, Some(1.0)))])),
        Some(BudgetSpent::Cost {
            spent: usd("1"),
            limit: usd("1"),
        })
    );
}

#[test]
fn a_token_budget_counts_input_and_output_but_not_cache_tokens() {
    let b = budget(None, Some(100));
    let mut cached = usage(50, 49, None);
    cached.tokens.cache_read = 1_000;
    assert_eq!(b.spent(&totals(&[Some(cached)])), None);
    assert_eq!(
        b.spent(&totals(&[Some(usage(60, 45, None))])),
        Some(BudgetSpent::Tokens {
            spent: 105,
            limit: 100
        })
    );
}

#[test]
fn unknown_costs_do_not_spend_a_cost_budget() {
    let b = budget(Some("0.01"), None);
    assert_eq!(b.spent(&totals(&[Some(usage(10_000, 10_000, None))])), None);
}

#[test]
fn the_spent_message_names_the_budget_the_spending_and_the_limit() {
    let spent = BudgetSpent::Cost {
        spent: usd("5.2"),
        limit: usd("5"),
    };
    assert_eq!(
        spent.to_string(),
        "the cost budget is spent: $5.20 reported of maxCostUSD $5.00"
    );
}

#[test]
fn unknown_costs_under_a_cost_budget_give_a_warning() {
    let warning = budget(Some("5"), None).unknown_cost_warning(&totals(&[None, None]));
    let warning = warning.unwrap_or_default();
    assert!(
        warning.starts_with("2 attempts reported no cost"),
        "{warning}"
    );
    assert!(warning.contains("set budget.maxTokens"), "{warning}");
}

#[test]
fn unknown_costs_without_a_cost_budget_give_no_warning() {
    let unknown = totals(&[Some(usage(1, 1, None))]);
    assert_eq!(budget(None, Some(10)).unknown_cost_warning(&unknown), None);
    assert_eq!(
        budget(Some("5"), None).unknown_cost_warning(&totals(&[])),
        None
    );
}

#[test]
fn the_cost_column_marks_unknown_costs_with_a_question_mark() {
    assert_eq!(
        totals(&[Some(usage(1, 1, Some(0.5)))]).cost_column(),
        "$0.50"
    );
    assert_eq!(
        totals(&[Some(usage(1, 1, Some(0.5))), None]).cost_column(),
        "$0.50+?"
    );
    assert_eq!(totals(&[None]).cost_column(), "?");
    assert_eq!(UsageTotals::default().cost_column(), "-");
}

#[test]
fn a_budget_prints_its_limits() {
    assert_eq!(
        budget(Some("5"), Some(100)).to_string(),
        "maxCostUSD $5.00, maxTokens 100"
    );
    assert_eq!(Budget::default().to_string(), "none");
}

fn token_budget(limit: u64) -> Budget {
    Budget {
        max_cost: None,
        max_tokens: Some(limit),
    }
}

#[test]
fn a_lone_attempt_may_spend_what_is_left() {
    let spent = UsageTotals {
        tokens: Tokens::new(300, 100),
        ..UsageTotals::default()
    };
    let share = token_budget(1_000).share(&spent, &[], 1);
    assert_eq!(share.tokens, Some(600));
}

#[test]
fn parallel_attempts_split_what_the_running_ones_do_not_hold() {
    let budget = token_budget(1_000);
    let first = budget.share(&UsageTotals::default(), &[], 4);
    let second = budget.share(&UsageTotals::default(), &[first], 3);
    assert_eq!((first.tokens, second.tokens), (Some(250), Some(250)));
}

#[test]
fn a_share_of_a_budget_held_by_others_is_the_smallest_amount_not_zero() {
    let budget = Budget {
        max_cost: Some(MicroUsd(10_000_000)),
        max_tokens: None,
    };
    let spent = UsageTotals {
        cost_usd: Some(MicroUsd(9_000_000)),
        ..UsageTotals::default()
    };
    let held = Allowance {
        tokens: None,
        cost: Some(MicroUsd(2_000_000)),
    };
    assert_eq!(budget.share(&spent, &[held], 1).cost, Some(MicroUsd(1)));
}

#[test]
fn an_unset_limit_gives_no_share() {
    let share = token_budget(10).share(&UsageTotals::default(), &[], 1);
    assert_eq!(share.cost, None);
    assert_eq!(share.runner_args(), ["--budget-tokens", "10"]);
}

#[test]
fn a_budget_the_running_attempts_hold_whole_is_leased_out() {
    let budget = token_budget(1_000);
    let spent = UsageTotals {
        tokens: Tokens::new(400, 0),
        ..UsageTotals::default()
    };
    let held = Allowance {
        tokens: Some(600),
        cost: None,
    };
    assert!(budget.leased_out(&spent, &[held]));
    assert!(!budget.leased_out(&spent, &[]));
}
