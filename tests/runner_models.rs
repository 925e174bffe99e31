//! `ralph runner --model` with the scripted agent: the model reaches the agent through its
//! ACP model option and is recorded; a model the agent does not offer, or an agent with no
//! model choice, is a misconfiguration (not a crash to retry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/scripted.rs"]
mod scripted;

use ralph::engine::attempt::OutcomeClass;
use scripted::Scenario;

const OFFERS_TWO: &str = r#"
models: [small, large]
default:
  - text: "Done. <task-done>{task}</task-done>"
"#;

#[test]
fn the_chosen_model_reaches_the_agent_and_is_recorded() {
    let run = Scenario::new("pick", OFFERS_TWO)
        .args(&["--model", "large"])
        .run();
    assert_eq!(run.result.outcome, OutcomeClass::Finished, "{}", run.stderr);
    assert_eq!(
        (
            run.result.model.as_deref(),
            run.result.requested_model.as_deref()
        ),
        (Some("large"), Some("large"))
    );
}

#[test]
fn a_model_the_agent_does_not_offer_is_a_misconfiguration_naming_what_it_offers() {
    let run = Scenario::new("pick", OFFERS_TWO)
        .args(&["--model", "huge"])
        .run();
    assert_eq!(run.result.outcome, OutcomeClass::Misconfigured);
    let problem = run
        .result
        .misconfiguration
        .map(|m| m.problem)
        .unwrap_or_default();
    assert!(
        problem.contains("\"huge\"") && problem.contains("small, large"),
        "{problem}"
    );
    assert!(run.result.sigils.task_done.is_none());
}

#[test]
fn an_agent_without_a_model_choice_cannot_be_given_a_model() {
    let script = "default:\n  - text: \"Done. <task-done>{task}</task-done>\"\n";
    let run = Scenario::new("pick", script)
        .args(&["--model", "large"])
        .run();
    assert_eq!(run.result.outcome, OutcomeClass::Misconfigured);
    let fix = run
        .result
        .misconfiguration
        .map(|m| m.fix)
        .unwrap_or_default();
    assert!(fix.contains("spec.model"), "{fix}");
}

#[test]
fn without_a_model_the_agent_keeps_its_own() {
    let run = Scenario::new("pick", OFFERS_TWO).run();
    assert_eq!(run.result.outcome, OutcomeClass::Finished);
    assert_eq!(run.result.model.as_deref(), Some("small"));
    assert_eq!(run.result.requested_model, None);
}
