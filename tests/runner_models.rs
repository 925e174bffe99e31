//! `ralph runner --model` with the scripted agent: the model reaches the agent through its
//! ACP model option and is recorded; a model the agent does not offer, or an agent with no
//! model choice, is a misconfiguration (not a crash to retry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mentions.rs"]
mod mentions;
#[path = "support/scripted.rs"]
mod scripted;

use mentions::assert_mentions;
use ralph::engine::attempt::OutcomeClass;
use scripted::Scenario;

const OFFERS_TWO: &str = r#"
models: [small, large]
default:
  - text: "Done. <task-done>{task}</task-done>"
"#;

/// Runs the runner with `--model model` on the scripted agent playing `script`.
fn with_model(script: &str, model: &str) -> scripted::Run {
    Scenario::new("pick", script)
        .args(&["--model", model])
        .run()
}

#[test]
fn the_chosen_model_reaches_the_agent_and_is_recorded() {
    let run = with_model(OFFERS_TWO, "large");
    assert_eq!(run.result.outcome, OutcomeClass::Finished, "{}", run.stderr);
    assert_eq!(
        (
            run.result.ran_by.model.as_deref(),
            run.result.ran_by.requested_model.as_deref()
        ),
        (Some("large"), Some("large"))
    );
}

#[test]
fn a_model_the_agent_does_not_offer_is_a_misconfiguration_naming_what_it_offers() {
    let run = with_model(OFFERS_TWO, "huge");
    let problem = run.misconfiguration().problem;
    assert_mentions(&problem, &["\"huge\"", "small, large"]);
    assert!(run.result.sigils.task_done.is_none());
}

#[test]
fn an_agent_without_a_model_choice_cannot_be_given_a_model() {
    let script = "default:\n  - text: \"Done. <task-done>{task}</task-done>\"\n";
    let run = with_model(script, "large");
    let fix = run.misconfiguration().fix;
    assert_mentions(&fix, &["spec.model"]);
}

#[test]
fn without_a_model_the_agent_keeps_its_own() {
    let run = Scenario::new("pick", OFFERS_TWO).run();
    assert_eq!(run.result.outcome, OutcomeClass::Finished);
    assert_eq!(run.result.ran_by.model.as_deref(), Some("small"));
    assert_eq!(run.result.ran_by.requested_model, None);
}
