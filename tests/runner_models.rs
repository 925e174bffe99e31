//! `ralph runner --model` with the scripted agent: the model reaches the agent through its
//! ACP model option and is recorded; a model the agent does not offer, or an agent with no
//! model choice, is a misconfiguration (not a crash to retry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{mentions, scripted};

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

/// An ACP agent in shell that offers models `fake` and `fake2` (current: `fake`) and says
/// which model it uses only in its answer to `session/set_config_option`, as mistral-vibe
/// does (no `config_option_update`).
const ANSWERS_ITS_MODEL: &str = r#"rid() { echo "$1" | grep -o '"id":"[^"]*"' | head -n 1 | cut -d: -f2; }
sel() { echo '[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"'"$1"'","options":[{"value":"fake","name":"Fake"},{"value":"fake2","name":"Fake 2"}]}]'; }
while read -r line; do
  id=$(rid "$line")
  case "$line" in
    *'"method":"initialize"'*) echo '{"jsonrpc":"2.0","id":'"$id"',"result":{"protocolVersion":1,"agentCapabilities":{}}}' ;;
    *'"method":"session/new"'*) echo '{"jsonrpc":"2.0","id":'"$id"',"result":{"sessionId":"s1","configOptions":'"$(sel fake)"'}}' ;;
    *'"method":"session/set_config_option"'*) echo '{"jsonrpc":"2.0","id":'"$id"',"result":{"configOptions":'"$(sel fake2)"'}}' ;;
    *'"method":"session/prompt"'*)
      echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done. <task-done>pick</task-done>"}}}}'
      echo '{"jsonrpc":"2.0","id":'"$id"',"result":{"stopReason":"end_turn"}}'
      exit 0 ;;
  esac
done"#;

#[test]
fn the_model_an_agent_answers_it_switched_to_is_recorded() {
    let run = Scenario::new("pick", "")
        .agent(&["sh", "-c", ANSWERS_ITS_MODEL])
        .args(&["--model", "fake2"])
        .run();
    assert_eq!(run.result.outcome, OutcomeClass::Finished, "{}", run.stdout);
    assert_eq!(run.result.ran_by.model.as_deref(), Some("fake2"));
}
