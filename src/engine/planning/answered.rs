//! How a planning attempt's end is judged, in both modes: which ends have an answer to
//! read, and the words of an answer that was refused or never written.

use crate::engine::attempt::{AttemptResult, OutcomeClass};
use crate::engine::outcome::{
    AttemptOutcome, Decision, Event, EventKind, FeatureEffect, PhaseChange, PreviousAttempt,
};

/// What a refused answer's message starts with (the planning task's status message and its
/// attempt's recorded reason): the problems follow, joined by `; `.
pub(crate) const REFUSED_PREFIX: &str = "answer refused: ";

/// Why an ended planning attempt has no answer to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The planner's agent cannot run as configured.
    Halted(String),
    /// The planner's agent reached its quota or its budget share.
    Limit(String),
    /// The attempt crashed or was cancelled.
    Crashed(String),
}

/// Why the attempt of `result` has no answer to read, by its outcome class; `None` when it
/// finished: then its answer file is read.
pub(crate) fn unanswered(result: &AttemptResult) -> Option<Unanswered> {
    match result.outcome {
        OutcomeClass::Finished => None,
        OutcomeClass::Misconfigured => {
            let why = result
                .misconfiguration
                .as_ref()
                .map(|m| format!("{m:?}"))
                .or_else(|| result.crash.clone())
                .unwrap_or_else(|| "misconfigured".to_owned());
            Some(Unanswered::Halted(format!(
                "stopped: the planner's agent cannot run as configured: {why}"
            )))
        }
        OutcomeClass::Exhausted | OutcomeClass::LimitReached => {
            let why = result
                .exhaustion
                .as_ref()
                .map(|e| format!("{e:?}"))
                .or_else(|| result.crash.clone())
                .unwrap_or_else(|| format!("{:?}", result.outcome));
            Some(Unanswered::Limit(format!(
                "stopped: the planner's agent reached a limit (its quota or its budget \
                 share): {why}; run again later"
            )))
        }
        OutcomeClass::Crashed | OutcomeClass::Cancelled => Some(Unanswered::Crashed(
            result
                .crash
                .clone()
                .unwrap_or_else(|| format!("{:?}", result.outcome)),
        )),
    }
}

/// The problem of a finished attempt that wrote no task list to `path`.
pub(crate) fn not_written(path: &str) -> String {
    format!(
        "no answer: the task list was not written to {path} (write the file; your final \
         message is not read as the plan)"
    )
}

/// The message of an answer refused for `problems`.
pub(crate) fn refused_message(problems: &[String]) -> String {
    format!("{REFUSED_PREFIX}{}", problems.join("; "))
}

/// The problems a refused answer's message names; `None` for any other message.
pub(crate) fn refused_problems(message: &str) -> Option<Vec<String>> {
    let problems = message.strip_prefix(REFUSED_PREFIX)?;
    Some(problems.split("; ").map(str::to_owned).collect())
}

/// The decision on a finished planning attempt whose answer was valid: the planning task is
/// done. `base` is the decision the outcome policy took on the attempt's result.
pub(crate) fn planned(base: Decision, task: &str, tasks: usize, hash: &str) -> Decision {
    Decision {
        outcome: AttemptOutcome::Done,
        phase: PhaseChange::Done,
        verify_first: false,
        retry: None,
        event: Event {
            kind: EventKind::Normal,
            reason: "Planned",
            message: format!("task {task}: planned {tasks} tasks, plan {hash}"),
        },
        feature: FeatureEffect::None,
        agent_exhausted: None,
        previous_attempt: None,
        ..base
    }
}

/// The decision on a finished planning attempt whose answer was refused for `problems`:
/// planning again at once, with the problems in the next prompt, unless this was answer
/// `in_a_row` refused in a row and more than `max_invalid_answers` were: then planning
/// failed.
pub(crate) fn refused(
    base: Decision,
    problems: &[String],
    in_a_row: u32,
    max_invalid_answers: u32,
) -> Decision {
    let message = refused_message(problems);
    let (phase, event) = if in_a_row > max_invalid_answers {
        (
            PhaseChange::Failed,
            Event {
                kind: EventKind::Warning,
                reason: "PlanningFailed",
                message: format!(
                    "planning failed: {in_a_row} answers in a row were refused \
                     (spec.planning.maxInvalidAnswers is {max_invalid_answers}); the last one's \
                     problems: {}",
                    problems.join("; ")
                ),
            },
        )
    } else {
        (
            PhaseChange::Pending,
            Event {
                kind: EventKind::Warning,
                reason: "AnswerRefused",
                message: message.clone(),
            },
        )
    };
    Decision {
        outcome: AttemptOutcome::Failed,
        phase,
        verify_first: false,
        retry: None,
        event,
        feature: FeatureEffect::None,
        agent_exhausted: None,
        previous_attempt: Some(PreviousAttempt::Failed {
            reason: Some(message),
        }),
        ..base
    }
}

/// Refused answers in a row at the end of `reasons`: the recorded reasons of a planning
/// task's ended attempts, oldest first.
pub(crate) fn refused_in_a_row<'a>(
    reasons: impl DoubleEndedIterator<Item = Option<&'a str>>,
) -> u32 {
    let streak = reasons
        .rev()
        .take_while(|reason| reason.is_some_and(|r| r.starts_with(REFUSED_PREFIX)))
        .count();
    u32::try_from(streak).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::outcome::{Event, EventKind};

    fn base() -> Decision {
        Decision {
            outcome: AttemptOutcome::Released,
            phase: PhaseChange::Pending,
            verify_first: false,
            retry: Some(1),
            event: Event {
                kind: EventKind::Warning,
                reason: "NoVerdict",
                message: "no verdict".to_owned(),
            },
            feature: FeatureEffect::None,
            promise_complete: false,
            agent_exhausted: None,
            previous_attempt: None,
        }
    }

    fn problems() -> Vec<String> {
        vec![
            "task b: depends on c, which does not exist".to_owned(),
            "no task".to_owned(),
        ]
    }

    #[test]
    fn a_valid_answer_makes_the_planning_task_done_without_a_verdict() {
        let decision = planned(base(), "planning", 3, "abc");
        assert_eq!(decision.outcome, AttemptOutcome::Done);
        assert_eq!(decision.phase, PhaseChange::Done);
        assert_eq!(decision.retry, None);
        assert!(decision.event.message.contains("3 tasks, plan abc"));
    }

    #[test]
    fn a_refused_answer_is_planned_again_at_once_with_its_problems() {
        let decision = refused(base(), &problems(), 1, 2);
        assert_eq!(decision.phase, PhaseChange::Pending);
        assert_eq!(decision.retry, None, "no backoff, no retry counted");
        assert_eq!(
            decision.event.message,
            "answer refused: task b: depends on c, which does not exist; no task"
        );
        assert_eq!(refused_problems(&decision.event.message), Some(problems()));
    }

    #[test]
    fn more_refused_answers_in_a_row_than_allowed_fail_planning_naming_the_last_problems() {
        assert_eq!(
            refused(base(), &problems(), 2, 2).phase,
            PhaseChange::Pending
        );
        let failed = refused(base(), &problems(), 3, 2);
        assert_eq!(failed.phase, PhaseChange::Failed);
        assert!(
            failed.event.message.contains("maxInvalidAnswers is 2"),
            "{}",
            failed.event.message
        );
        assert!(
            failed.event.message.contains("depends on c"),
            "{}",
            failed.event.message
        );
    }

    #[test]
    fn refused_answers_are_counted_back_from_the_newest_attempt() {
        let refused = refused_message(&problems());
        let reasons = [
            Some(refused.as_str()),
            None,
            Some(refused.as_str()),
            Some(refused.as_str()),
        ];
        assert_eq!(refused_in_a_row(reasons.into_iter()), 2);
        assert_eq!(refused_in_a_row([Some("crashed")].into_iter()), 0);
    }

    #[test]
    fn only_a_refused_answers_message_names_problems() {
        assert_eq!(refused_problems("the agent crashed"), None);
    }
}
