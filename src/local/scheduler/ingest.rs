//! Applying an attempt's end: the policy's decision on the task row, the DAG's derived
//! transitions, the attempt record and the events, as one store transaction.

use super::conclude;
use super::{Run, RunError};
use crate::engine::attempt::AttemptResult;
use crate::engine::dag::AutoTransition;
use crate::engine::lifecycle::{self, AttemptEnd};
use crate::engine::policy::FeatureEffect;
use crate::local::run_event::RunEvent;
use crate::local::store::{AttemptClose, NewEvent, Transition};

impl Run<'_> {
    /// Records how the current attempt of `task` ended and applies the policy's decision.
    pub(super) fn ingest(
        &mut self,
        task: &str,
        end: &AttemptEnd,
        now_ms: i64,
        transition: &mut Transition,
    ) -> Result<(), RunError> {
        let Some(row) = self.tasks.get(task) else {
            return Ok(());
        };
        let (attempt, started_at_ms) = match self.live.get(task) {
            Some(live) => (live.attempt.clone(), live.started_at_ms),
            None => (lifecycle::attempt_id(task, row.attempt_count), now_ms),
        };
        let history = self.store.attempts(Some(task))?;
        let jitter = rand::random();
        let Some(row) = self.tasks.get_mut(task) else {
            return Ok(());
        };
        let next = conclude::conclude(self.feature, row, &history, end, now_ms, jitter);
        let row = row.clone();
        let result: Option<&AttemptResult> = match end {
            AttemptEnd::Reported(result) => Some(result),
            _ => None,
        };
        match next.feature() {
            FeatureEffect::Stop { reason } => {
                self.stopped = Some(reason.clone());
                transition.stop_feature = Some(reason.clone());
            }
            FeatureEffect::Halt { reason } => {
                if self.halted.is_none() {
                    self.halted = Some(reason.clone());
                    // The other attempts use the same agent: stop them, uncharged.
                    let others: Vec<String> =
                        self.live.keys().filter(|t| *t != task).cloned().collect();
                    for other in others {
                        self.signal(&other, nix::sys::signal::Signal::SIGTERM);
                    }
                }
            }
            FeatureEffect::None => {}
        }
        if let Some(rest) = &next.agent_rest {
            self.rest_agent(rest)?;
        }
        let crash = next.crash.clone();
        let usage = next.usage.clone();
        let decision = &next.decision;
        transition.close = Some(AttemptClose {
            id: attempt.clone(),
            ended_at_ms: now_ms,
            outcome: decision.outcome.as_str().to_string(),
            stop_reason: result
                .and_then(|r| r.stop_reason.as_ref())
                .map(|r| r.as_str().to_owned()),
            crash: crash.clone(),
            message: Some(next.message.clone()),
            usage,
            result: result.and_then(|r| serde_json::to_string(r).ok()),
        });
        transition.tasks.push(row.clone());
        if decision.release_claim && !transition.release.iter().any(|t| t == task) {
            transition.release.push(task.to_string());
        }
        transition.events.push(NewEvent::attempt(
            task,
            &attempt,
            decision.outcome.as_str(),
            format!("[{}] {}", decision.event.reason, decision.event.message),
        ));
        self.display.show(&RunEvent::Ended {
            task: task.to_string(),
            attempt,
            outcome: decision.outcome.as_str().to_string(),
            phase: row.phase,
            duration_ms: now_ms - started_at_ms,
            retry_at_ms: row.next_attempt_after_ms,
            // A misconfiguration is said once, when the run ends.
            message: crash.or_else(|| {
                (next.is_warning() && !matches!(next.feature(), FeatureEffect::Halt { .. }))
                    .then(|| next.message.clone())
            }),
        });
        if !row.removed {
            let transitions = self.dag.set_phase(task, row.phase)?;
            self.record_transitions(&transitions, transition);
        }
        if let Some(at) = row.next_attempt_after_ms {
            self.wake_at(at);
        }
        Ok(())
    }

    /// Applies the DAG's own phase changes to the rows and the event log.
    pub(super) fn record_transitions(
        &mut self,
        transitions: &[AutoTransition],
        transition: &mut Transition,
    ) {
        for change in transitions {
            let Some(row) = self.tasks.get_mut(&change.task) else {
                continue;
            };
            row.phase = change.to;
            transition.tasks.push(row.clone());
            let reason = change.reason.to_string();
            transition.events.push(NewEvent::task(
                &change.task,
                "transition",
                format!("{:?} -> {:?}: {reason}", change.from, change.to),
            ));
            self.display.show(&RunEvent::Transition {
                task: change.task.clone(),
                from: change.from,
                to: change.to,
                reason,
            });
        }
    }
}
