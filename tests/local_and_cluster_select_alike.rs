//! One table of task histories, pools and rests, given to both modes' adapters of the
//! selection (`engine::selection`): the controller's (Feature and Task objects) and the
//! local run's (feature spec and attempt rows with the runner's results). The same inputs
//! must choose the same agent and model, refuse the same `<next-model>` hints, and wait
//! until the same time.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::cluster_objects;
use ralph::api::pool::command_identity;

use cluster_objects::{hello_feature, hello_task};
use ralph::api::ModelPolicy;
use ralph::engine::conclusion::AgentRest;
use ralph::engine::selection::{ModelStrategy, Rests, Selection};
use ralph::local::feature::{LocalAgent, LocalFeature};
use ralph::local::store::{AttemptRow, EndDetails};
use ralph::local::testing as local_testing;

const NOW: i64 = 1_700_000_000_000;
const MODELS: [&str; 3] = ["haiku", "sonnet", "opus"];

/// One earlier attempt: the model it was given, how it ended, the agent's `<next-model>`.
type Past = (&'static str, &'static str, Option<&'static str>);

/// What both modes must agree on.
#[derive(Debug, PartialEq)]
enum Chosen {
    Run {
        agent: String,
        model: Option<String>,
        hint_refused: bool,
    },
    Wait {
        until_ms: i64,
    },
}

fn chosen(selection: Selection) -> Chosen {
    match selection {
        Selection::Run(choice) => Chosen::Run {
            agent: choice.agent,
            model: choice.model,
            hint_refused: choice.refused_hint.is_some(),
        },
        Selection::Wait { until_ms, .. } => Chosen::Wait { until_ms },
    }
}

/// Which agents rest, by pool name, until when.
type Resting = &'static [(&'static str, i64)];

fn rest(until_ms: i64) -> AgentRest {
    AgentRest {
        until_ms,
        message: "usage limit".to_owned(),
    }
}

fn cluster(strategy: ModelStrategy, history: &[Past], resting: Resting) -> Chosen {
    let feature = hello_feature(serde_json::json!({
        "fallbackAgents": [{"name": "spare", "image": "agent:1", "command": ["spare-agent"]}],
        "model": {"strategy": strategy, "models": MODELS},
    }));
    let attempts: Vec<serde_json::Value> = history
        .iter()
        .zip(1..)
        .map(|((model, outcome, hint), number)| {
            serde_json::json!({
                "number": number, "requestedModel": model, "outcome": outcome,
                "sigils": hint.map_or(serde_json::json!({}), |h| serde_json::json!({"nextModel": h})),
            })
        })
        .collect();
    let task = hello_task(
        serde_json::json!({"phase": "Pending", "attemptCount": history.len(), "attempts": attempts}),
    );
    let rests: Rests = resting
        .iter()
        .map(|(name, until)| {
            let agent = feature.spec.pool_agent(name).expect("pool agent");
            (agent.identity(), rest(*until))
        })
        .collect();
    chosen(ralph::controller::plan::selection::select(
        &feature, &task, &rests, NOW,
    ))
}

fn local(strategy: ModelStrategy, history: &[Past], resting: Resting) -> Chosen {
    let feature = LocalFeature {
        fallback_agents: vec![LocalAgent {
            name: "spare".to_owned(),
            command: vec!["spare-agent".to_owned()],
            env: Vec::new(),
        }],
        model: Some(ModelPolicy {
            strategy,
            models: MODELS.map(String::from).to_vec(),
        }),
        ..local_testing::feature(Vec::new())
    };
    let rows: Vec<AttemptRow> = history
        .iter()
        .zip(1..)
        .map(|((model, outcome, hint), number)| {
            let mut result = serde_json::to_value(ralph::engine::testing::result("t")).unwrap();
            result["requestedModel"] = serde_json::json!(model);
            if let Some(hint) = hint {
                result["sigils"]["nextModel"] = serde_json::json!(hint);
            }
            AttemptRow {
                details: EndDetails {
                    result: Some(result.to_string()),
                    ..EndDetails::default()
                },
                ..local_testing::attempt("t", number, outcome)
            }
        })
        .collect();
    let rests: Rests = resting
        .iter()
        .map(|(name, until)| {
            let command = ralph::local::selection::pool(&feature)
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| c.to_vec())
                .expect("pool agent");
            (command_identity(&command), rest(*until))
        })
        .collect();
    chosen(ralph::local::selection::select(
        &feature, &rows, &rests, NOW,
    ))
}

fn run(agent: &str, model: &str, hint_refused: bool) -> Chosen {
    Chosen::Run {
        agent: agent.to_owned(),
        model: Some(model.to_owned()),
        hint_refused,
    }
}

/// Asserts that, with the model `strategy`, after the attempts `history` and with the agents
/// `resting`, both modes choose `expected`.
fn assert_both_modes_choose(
    strategy: ModelStrategy,
    history: &[Past],
    resting: Resting,
    expected: Chosen,
) {
    assert_eq!(cluster(strategy, history, resting), expected, "cluster");
    assert_eq!(local(strategy, history, resting), expected, "local");
}

/// One `#[test]` per row: `strategy`, the attempts so far (model, outcome, model hint) and the
/// resting agents (name, until) => what both modes choose.
macro_rules! choice_tests {
    ($($test:ident: $strategy:ident, $history:expr, $resting:expr => $expected:expr;)*) => {
        $(
            #[test]
            fn $test() {
                let history: &[Past] = &$history;
                assert_both_modes_choose(ModelStrategy::$strategy, history, $resting, $expected);
            }
        )*
    };
}

choice_tests! {
    a_first_attempt_gets_the_first_model:
        Escalate, [], &[] => run("primary", "haiku", false);
    escalation_after_a_failure_gets_the_next_model:
        Escalate, [("haiku", "failed", None)], &[] => run("primary", "sonnet", false);
    escalation_after_a_crash_gets_the_next_model:
        Escalate, [("haiku", "failed", None), ("sonnet", "crashed", None)], &[]
        => run("primary", "opus", false);
    cost_optimized_goes_back_to_the_cheapest_unfailed_model:
        CostOptimized, [("opus", "failed", None)], &[] => run("primary", "haiku", false);
    a_next_model_hint_is_honoured:
        Fixed, [("haiku", "released", Some("opus"))], &[] => run("primary", "opus", false);
    a_next_model_hint_not_listed_is_refused:
        Fixed, [("haiku", "released", Some("gpt-9"))], &[] => run("primary", "haiku", true);
    an_exhausted_agent_hands_over_to_the_next_of_the_pool:
        Fixed, [("haiku", "exhausted", None)], &[("primary", NOW + 60_000)]
        => run("spare", "haiku", false);
    an_agent_is_back_after_its_reset_time:
        Fixed, [("haiku", "exhausted", None)], &[("primary", NOW)]
        => run("primary", "haiku", false);
    with_every_agent_resting_the_task_waits_for_the_first_reset:
        Fixed, [("haiku", "exhausted", None)], &[("primary", NOW + 60_000), ("spare", NOW + 30_000)]
        => Chosen::Wait { until_ms: NOW + 30_000 };
}
