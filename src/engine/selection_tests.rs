use super::*;
use crate::engine::testing::named_cases;
use AttemptOutcome::{Crashed, Exhausted, Failed, Released};
use ModelStrategy::{CostOptimized, Escalate, Fixed};

const NOW: i64 = 1_800_000_000_000;

fn models() -> Vec<String> {
    ["haiku", "sonnet", "opus"].map(String::from).to_vec()
}

fn choice(strategy: ModelStrategy, models: &[String]) -> ModelChoice<'_> {
    ModelChoice { strategy, models }
}

fn attempt(model: &str, outcome: AttemptOutcome) -> TriedModel {
    TriedModel {
        model: Some(model.to_owned()),
        outcome: Some(outcome),
        next_model: None,
    }
}

fn hinting(model: &str, outcome: AttemptOutcome, hint: &str) -> TriedModel {
    TriedModel {
        next_model: Some(hint.to_owned()),
        ..attempt(model, outcome)
    }
}

const POOL: [PoolAgent<'static>; 2] = [
    PoolAgent {
        name: "main",
        identity: "id-main",
    },
    PoolAgent {
        name: "spare",
        identity: "id-spare",
    },
];

fn rest(identity: &str, until_ms: i64) -> Rests {
    Rests::from([(
        identity.to_owned(),
        AgentRest {
            until_ms,
            message: "usage limit".to_owned(),
        },
    )])
}

fn run(selection: Selection) -> Choice {
    match selection {
        Selection::Run(choice) => choice,
        Selection::Wait { message, .. } => panic!("expected a run, got a wait: {message}"),
    }
}

/// The choice for a task with `history`, among `models` under `strategy`, with `rests`.
fn chosen(
    strategy: ModelStrategy,
    models: &[String],
    history: &[TriedModel],
    rests: &Rests,
    now_ms: i64,
) -> Choice {
    run(select(
        &POOL,
        &choice(strategy, models),
        history,
        rests,
        now_ms,
    ))
}

/// The choice among [`models`] under `strategy` after `history`, with no agent resting.
fn choice_after(strategy: ModelStrategy, history: &[TriedModel]) -> Choice {
    chosen(strategy, &models(), history, &Rests::new(), NOW)
}

fn model_after(strategy: ModelStrategy, history: &[TriedModel]) -> Option<String> {
    choice_after(strategy, history).model
}

/// The agent of [`POOL`] that takes a task with `history` while `rests` hold at `now_ms`.
fn agent_after(history: &[TriedModel], rests: &Rests, now_ms: i64) -> String {
    chosen(Fixed, &[], history, rests, now_ms).agent
}

/// Asserts the model `strategy` picks after the attempts `history` (model and outcome, oldest
/// first).
fn assert_model_after(strategy: ModelStrategy, history: &[(&str, AttemptOutcome)], expected: &str) {
    let history: Vec<TriedModel> = history
        .iter()
        .map(|&(model, outcome)| attempt(model, outcome))
        .collect();
    assert_eq!(model_after(strategy, &history).as_deref(), Some(expected));
}

#[test]
fn without_models_the_agent_uses_its_default() {
    let choice = chosen(Escalate, &[], &[], &Rests::new(), NOW);
    assert_eq!(
        (choice.model, choice.reason),
        (None, ModelReason::AgentDefault)
    );
}

named_cases! { assert_model_after;
    fixed_keeps_the_first_model_after_a_failure(Fixed, &[("haiku", Failed)], "haiku");
    escalate_starts_with_the_cheapest_model(Escalate, &[], "haiku");
    escalate_moves_to_the_next_model_after_a_failed_attempt
        (Escalate, &[("haiku", Failed)], "sonnet");
    escalate_moves_to_the_next_model_after_a_crash
        (Escalate, &[("haiku", Failed), ("sonnet", Crashed)], "opus");
    escalate_stays_on_the_model_after_an_attempt_without_a_verdict
        (Escalate, &[("haiku", Failed), ("sonnet", Released)], "sonnet");
    escalate_stays_on_the_last_model_once_it_is_reached(Escalate, &[("opus", Failed)], "opus");
    /// The agent jumped to opus and failed there; haiku never failed this task.
    cost_optimized_goes_back_to_the_cheapest_model_that_has_not_failed
        (CostOptimized, &[("opus", Failed)], "haiku");
    cost_optimized_skips_every_model_that_failed
        (CostOptimized, &[("haiku", Failed), ("sonnet", Exhausted), ("haiku", Crashed)], "sonnet");
    cost_optimized_uses_the_last_model_when_all_failed
        (CostOptimized, &[("haiku", Failed), ("sonnet", Failed), ("opus", Failed)], "opus");
}

#[test]
fn the_agents_next_model_is_honoured_when_listed() {
    let history = [hinting("haiku", AttemptOutcome::Released, "opus")];
    let choice = choice_after(ModelStrategy::Fixed, &history);
    assert_eq!(
        (choice.model.as_deref(), choice.reason, choice.refused_hint),
        (Some("opus"), ModelReason::AgentHint, None)
    );
}

#[test]
fn a_next_model_not_listed_is_refused_with_a_warning_and_the_strategy_decides() {
    let history = [hinting("haiku", AttemptOutcome::Failed, "gpt-9")];
    let choice = choice_after(ModelStrategy::Escalate, &history);
    assert_eq!(choice.model.as_deref(), Some("sonnet"));
    let warning = choice.refused_hint.unwrap_or_default();
    assert!(
        warning.contains("\"gpt-9\"") && warning.contains("haiku, sonnet, opus"),
        "{warning}"
    );
}

#[test]
fn only_the_last_ended_attempts_hint_counts() {
    let history = [
        hinting("haiku", AttemptOutcome::Released, "opus"),
        attempt("opus", AttemptOutcome::Released),
    ];
    assert_eq!(model_after(Fixed, &history).as_deref(), Some("haiku"));
}

#[test]
fn the_first_agent_of_the_pool_takes_the_task() {
    assert_eq!(agent_after(&[], &Rests::new(), NOW), "main");
}

#[test]
fn a_resting_agent_leaves_the_task_to_the_next_of_the_pool() {
    let rests = rest("id-main", NOW + 60_000);
    assert_eq!(agent_after(&[], &rests, NOW), "spare");
}

#[test]
fn an_agent_is_back_in_the_pool_once_its_reset_time_passed() {
    let rests = rest("id-main", NOW + 60_000);
    assert_eq!(agent_after(&[], &rests, NOW + 60_000), "main");
}

#[test]
fn agents_sharing_an_identity_rest_together() {
    let pool = [
        PoolAgent {
            name: "a",
            identity: "same",
        },
        PoolAgent {
            name: "b",
            identity: "same",
        },
    ];
    let selection = select(
        &pool,
        &choice(Fixed, &[]),
        &[],
        &rest("same", NOW + 1_000),
        NOW,
    );
    assert!(matches!(selection, Selection::Wait { .. }), "{selection:?}");
}

#[test]
fn when_every_agent_rests_the_task_waits_for_the_first_reset_and_says_until_when() {
    let mut rests = rest("id-main", NOW + 120_000);
    rests.extend(rest("id-spare", NOW + 60_000));
    let selection = select(&POOL, &choice(Fixed, &[]), &[], &rests, NOW);
    let Selection::Wait { until_ms, message } = selection else {
        panic!("expected a wait: {selection:?}");
    };
    assert_eq!(until_ms, NOW + 60_000);
    assert!(
        message.contains("spare until 2027-01-15T08:01:00Z")
            && message.contains("main until 2027-01-15T08:02:00Z"),
        "{message}"
    );
}

#[test]
fn a_crash_does_not_take_an_agent_out_of_the_pool() {
    let history = [attempt("haiku", AttemptOutcome::Crashed)];
    assert_eq!(agent_after(&history, &Rests::new(), NOW), "main");
}
