//! Verification in `ralph run` (docs/verification.md): which kind of attempt a task runs
//! next, its prompt, and the runner flags for it. The decisions are the engine's
//! ([`crate::engine::verification`]); this reads them off the store's attempt rows. A
//! verification attempt is its own runner process in the same workspace, read-only.

use std::collections::HashMap;

use crate::api::VerifySpec;
use crate::engine::prompt;
use crate::engine::verification::{self, AttemptKind, PastAttempt};
use crate::local::executor::RunnerCommand;
use crate::local::feature::LocalFeature;
use crate::local::scheduler::conclude::recorded_outcome;
use crate::local::store::{AttemptRow, TaskRow};

/// What the task's next attempt does, from its attempts (oldest first).
pub(crate) fn next_attempt_kind(
    verify: &VerifySpec,
    generation: i64,
    history: &[AttemptRow],
) -> AttemptKind {
    verification::next_attempt_kind(
        verify.agent,
        generation,
        history.iter().map(|a| PastAttempt {
            kind: a.kind,
            outcome: recorded_outcome(a.outcome.as_deref()),
            generation: Some(a.generation),
        }),
    )
}

/// What attempt `number` does, as the store recorded it when it started.
pub(crate) fn attempt_kind(history: &[AttemptRow], number: u32) -> AttemptKind {
    history
        .iter()
        .rev()
        .find(|a| a.number == number)
        .map(|a| a.kind)
        .unwrap_or_default()
}

/// The runner command of an attempt of `kind`: a work attempt runs `verify.command` after a
/// done verdict, a verification attempt runs read-only.
pub(crate) fn runner_command(
    base: &RunnerCommand,
    verify: &VerifySpec,
    kind: AttemptKind,
) -> RunnerCommand {
    let mut command = base.clone();
    match kind {
        AttemptKind::Work => command.runner_args.extend(verify.runner_args()),
        AttemptKind::Verify => command.runner_args.push("--read-only".to_owned()),
    }
    command
}

/// What the agent that reported the task done said about its work (its journal notes).
pub(crate) fn reported_work(history: &[AttemptRow]) -> Option<String> {
    let result = history
        .iter()
        .rev()
        .find(|a| a.kind == AttemptKind::Work)?
        .details
        .reported()?;
    let notes = result.sigils.journal.join("\n");
    (!notes.trim().is_empty()).then_some(notes)
}

/// The verification prompt for `row`, with what the worker reported.
pub(crate) fn prompt(
    feature: &LocalFeature,
    tasks: &HashMap<String, TaskRow>,
    row: &TaskRow,
    memory: crate::engine::memory::Recall,
    reported: Option<String>,
) -> String {
    let input = prompt::PromptInput {
        reported,
        ..crate::local::prompt::input(feature, tasks, row, memory)
    };
    prompt::render_verification(&input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::AttemptResult;
    use crate::local::store::EndDetails;
    use crate::local::testing;

    fn row(number: u32, kind: AttemptKind, outcome: &str) -> AttemptRow {
        AttemptRow {
            kind,
            ..testing::attempt("t", number, outcome)
        }
    }

    fn agent() -> VerifySpec {
        VerifySpec {
            agent: true,
            ..VerifySpec::default()
        }
    }

    #[test]
    fn the_attempt_after_done_work_verifies() {
        let history = [row(1, AttemptKind::Work, "done")];
        assert_eq!(
            next_attempt_kind(&agent(), 1, &history),
            AttemptKind::Verify
        );
    }

    #[test]
    fn without_a_verification_agent_every_attempt_works() {
        let history = [row(1, AttemptKind::Work, "done")];
        assert_eq!(
            next_attempt_kind(&VerifySpec::default(), 1, &history),
            AttemptKind::Work
        );
    }

    #[test]
    fn a_verification_runner_is_read_only_and_a_work_runner_checks() {
        let base = testing::runner_command();
        let verify = VerifySpec {
            agent: true,
            command: Some("make check".to_owned()),
            ..VerifySpec::default()
        };
        let verifier = runner_command(&base, &verify, AttemptKind::Verify);
        assert_eq!(verifier.runner_args, ["--read-only"]);
        let worker = runner_command(&base, &verify, AttemptKind::Work);
        assert_eq!(worker.runner_args[..2], ["--verify-command", "make check"]);
    }

    #[test]
    fn the_worker_report_is_its_journal() {
        let result = AttemptResult {
            sigils: crate::engine::sigils::parse("<journal>Added the API.</journal>"),
            ..crate::engine::testing::done("t")
        };
        let history = [
            AttemptRow {
                details: EndDetails {
                    result: serde_json::to_string(&result).ok(),
                    ..EndDetails::default()
                },
                ..row(1, AttemptKind::Work, "done")
            },
            row(2, AttemptKind::Verify, "failed"),
        ];
        assert_eq!(reported_work(&history).as_deref(), Some("Added the API."));
    }
}
