//! The state of one `ralph run` invocation and its reactions to events.

use std::collections::HashMap;
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedSender;

use super::conclude;
use super::live::Live;
use super::{RunError, RunOptions, RunOutcome};
use crate::engine::attempt::{AttemptResult, StopReason};
use crate::engine::dag::{AutoTransition, Dag, FeatureOutcome, OutcomeInputs, TaskNode, TaskPhase};
use crate::engine::lifecycle::{self, Action, AttemptEnd, FeatureGate, RunView, TaskView};
use crate::engine::policy::FeatureEffect;
use crate::local::display::Display;
use crate::local::executor::{self, AttemptFiles, AttemptReport, Report};
use crate::local::feature::FeatureSpec;
use crate::local::prompt;
use crate::local::run_event::RunEvent;
use crate::local::store::{AttemptClose, NewEvent, Store, TaskRow, Transition, keys};

/// A second Ctrl+C within this window kills the runners instead of cancelling them.
const KILL_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);

/// How long an exhausted agent rests when it did not say when its quota resets.
const EXHAUSTED_PAUSE_MS: i64 = 60_000;

/// One invocation of the run loop.
pub struct Run<'a> {
    pub(super) store: &'a mut Store,
    pub(super) feature: &'a FeatureSpec,
    pub(super) options: &'a RunOptions,
    pub(super) display: &'a mut Display,
    pub(super) reports: UnboundedSender<AttemptReport>,
    pub(super) tasks: HashMap<String, TaskRow>,
    pub(super) dag: Dag,
    pub(super) live: HashMap<String, Live>,
    iterations_at_start: u32,
    started: u32,
    stopped: Option<String>,
    interrupted_at: Option<Instant>,
    agent_paused_until_ms: Option<i64>,
    wake_at_ms: Option<i64>,
    next_renewal_ms: i64,
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("feature", &self.feature.name)
            .field("live", &self.live.len())
            .finish()
    }
}

fn node(row: &TaskRow) -> TaskNode {
    TaskNode {
        name: row.spec.name.clone(),
        depends_on: row.spec.depends_on.clone(),
        parent: row.spec.parent.clone(),
        priority: row.spec.priority,
        order: row.order,
        phase: row.phase,
    }
}

fn stop_reason_text(reason: &StopReason) -> String {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(text)) => text,
        _ => format!("{reason:?}"),
    }
}

impl<'a> Run<'a> {
    /// Loads the tasks from the store, builds the DAG and persists the phases it derives.
    pub fn load(
        store: &'a mut Store,
        feature: &'a FeatureSpec,
        options: &'a RunOptions,
        display: &'a mut Display,
        reports: UnboundedSender<AttemptReport>,
        now_ms: i64,
    ) -> Result<Run<'a>, RunError> {
        let rows = store.tasks()?;
        let dag = Dag::new(rows.iter().filter(|r| !r.removed).map(node).collect())?;
        let iterations_at_start = store.iterations()?;
        let stopped = store.meta(keys::STOPPED)?;
        let claim_ms = i64::try_from(options.claim_duration.as_millis()).unwrap_or(i64::MAX);
        let mut run = Run {
            tasks: rows.into_iter().map(|r| (r.spec.name.clone(), r)).collect(),
            dag,
            store,
            feature,
            options,
            display,
            reports,
            live: HashMap::new(),
            iterations_at_start,
            started: 0,
            stopped,
            interrupted_at: None,
            agent_paused_until_ms: None,
            wake_at_ms: None,
            next_renewal_ms: now_ms + claim_ms / 3,
        };
        let loaded = run.dag.loaded_transitions().to_vec();
        let mut transition = Transition::default();
        run.record_transitions(&loaded, &mut transition);
        run.store.apply(&transition, now_ms)?;
        Ok(run)
    }

    pub(super) fn claim_ms(&self) -> i64 {
        i64::try_from(self.options.claim_duration.as_millis()).unwrap_or(i64::MAX)
    }

    fn interrupting(&self) -> bool {
        self.interrupted_at.is_some()
    }

    fn limit_reached(&self) -> bool {
        self.options
            .limit
            .is_some_and(|limit| self.started >= limit)
            || self
                .feature
                .max_iterations
                .is_some_and(|max| self.iterations_at_start + self.started >= max)
    }

    /// What the feature allows for tasks that are not running.
    fn gate(&self) -> FeatureGate {
        if self.interrupting() || self.feature.suspend {
            FeatureGate::Suspended
        } else if self.stopped.is_some() || self.limit_reached() {
            FeatureGate::Stopped
        } else if self.live.len() >= self.options.parallel {
            FeatureGate::AtCapacity
        } else {
            FeatureGate::Open
        }
    }

    fn wake_at(&mut self, at_ms: i64) {
        self.wake_at_ms = Some(self.wake_at_ms.map_or(at_ms, |w| w.min(at_ms)));
    }

    /// When the loop must look again even if no runner reports.
    pub fn next_wake(&self, now_ms: i64) -> Option<i64> {
        let orphans = self.live.values().any(|l| !l.child && l.ended.is_none());
        let poll = orphans.then_some(now_ms + 250);
        [self.wake_at_ms, Some(self.next_renewal_ms), poll]
            .into_iter()
            .flatten()
            .min()
    }

    /// Starts ready tasks, in the DAG's order, while the feature has capacity.
    pub fn schedule(&mut self, now_ms: i64) -> Result<(), RunError> {
        self.wake_at_ms = None;
        if let Some(until) = self.agent_paused_until_ms {
            if until > now_ms {
                self.wake_at(until);
                return Ok(());
            }
            self.agent_paused_until_ms = None;
        }
        let ready: Vec<String> = self.dag.ready().map(str::to_string).collect();
        for name in ready {
            let gate = self.gate();
            if gate != FeatureGate::Open {
                break;
            }
            if self.live.contains_key(&name) {
                continue;
            }
            let Some(row) = self.tasks.get(&name) else {
                continue;
            };
            let view = TaskView {
                name: name.clone(),
                phase: row.phase,
                ready: true,
                generation: row.generation,
                next_attempt_after_ms: row.next_attempt_after_ms,
                attempt: (row.attempt_count > 0).then_some(lifecycle::AttemptView {
                    number: row.attempt_count,
                    generation: row.generation,
                }),
                gate,
            };
            let claim = self.stale_claim(&name);
            let actions = lifecycle::decide(&view, claim.as_ref(), &RunView::NotStarted, now_ms);
            self.execute(&name, actions, now_ms)?;
        }
        Ok(())
    }

    /// A claim left in the store by an earlier run for a task that is not running.
    fn stale_claim(&self, task: &str) -> Option<lifecycle::ClaimView> {
        let claims = self.store.claims().ok()?;
        let claim = claims.into_iter().find(|c| c.task == task)?;
        Some(lifecycle::ClaimView {
            holder: claim.holder,
            renewed_at_ms: claim.expires_at_ms - self.claim_ms(),
            duration_ms: self.claim_ms(),
            fencing_token: 0,
        })
    }

    /// The outcome once nothing runs and nothing more will start.
    pub fn finished(&mut self) -> Result<Option<RunOutcome>, RunError> {
        if !self.live.is_empty() {
            return Ok(None);
        }
        if self.interrupting() {
            self.store.set_meta(keys::OUTCOME, Some("Interrupted"))?;
            return Ok(Some(RunOutcome::Interrupted));
        }
        let (outcome, message) = if let Some(reason) = &self.stopped {
            (
                FeatureOutcome::Failed,
                format!("an agent promised FAILURE: {reason}"),
            )
        } else {
            let limit = self.options.limit.map(|l| self.iterations_at_start + l);
            let max = match (self.feature.max_iterations, limit) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let inputs = OutcomeInputs {
                suspended: self.feature.suspend,
                iterations_used: u64::from(self.iterations_at_start + self.started),
                max_iterations: max.map(u64::from),
                budget_reached: false,
            };
            let Some(outcome) = self.dag.outcome(inputs) else {
                return Ok(None);
            };
            (outcome, self.outcome_message(outcome))
        };
        let mut transition = Transition::default();
        transition.events.push(NewEvent::feature(
            "finished",
            format!("{outcome:?}: {message}"),
        ));
        self.store.apply(&transition, super::now_ms())?;
        self.store
            .set_meta(keys::OUTCOME, Some(&format!("{outcome:?}")))?;
        Ok(Some(RunOutcome::Finished { outcome, message }))
    }

    fn outcome_message(&self, outcome: FeatureOutcome) -> String {
        let counts = self.dag.counts();
        match outcome {
            FeatureOutcome::Complete => format!("all {} tasks done", counts.total()),
            FeatureOutcome::Failed => format!(
                "{} done, {} failed, {} blocked",
                counts.done, counts.failed, counts.blocked
            ),
            FeatureOutcome::Blocked => format!(
                "nothing can run: {} pending, {} blocked, {} failed",
                counts.pending, counts.blocked, counts.failed
            ),
            FeatureOutcome::NoPlan => "the feature has no tasks".to_string(),
            FeatureOutcome::LimitReached => format!(
                "attempt limit reached ({} started in this run); {} of {} tasks done",
                self.started,
                counts.done,
                counts.total()
            ),
            FeatureOutcome::Suspended => "the feature is suspended (spec.suspend)".to_string(),
        }
    }

    /// Carries out the lifecycle's actions for one task.
    pub(super) fn execute(
        &mut self,
        task: &str,
        actions: Vec<Action>,
        now_ms: i64,
    ) -> Result<(), RunError> {
        let mut transition = Transition::default();
        for action in actions {
            match action {
                // The store claims and records the attempt in one transaction (StartAttempt).
                Action::Claim { .. } => {}
                Action::StartAttempt { attempt } => {
                    self.flush(&mut transition, now_ms)?;
                    self.start(task, attempt, now_ms)?;
                }
                Action::Cancel => self.signal(task, Signal::SIGTERM),
                Action::Ingest(end) => self.ingest(task, &end, now_ms, &mut transition)?,
                Action::ReleaseClaim => {
                    if !transition.release.iter().any(|t| t == task) {
                        transition.release.push(task.to_string());
                    }
                }
                Action::DeleteRun => {
                    if let Some(live) = self.live.remove(task)
                        && !live.child
                        && live.ended.is_none()
                        && let Some(pid) = live.pid
                        && crate::local::process::is_alive(pid, live.pid_start)
                    {
                        crate::local::process::kill_runner(pid);
                    }
                }
                Action::RequeueAt(at) => self.wake_at(at),
            }
        }
        self.flush(&mut transition, now_ms)
    }

    fn flush(&mut self, transition: &mut Transition, now_ms: i64) -> Result<(), RunError> {
        if *transition != Transition::default() {
            self.store.apply(transition, now_ms)?;
            *transition = Transition::default();
        }
        Ok(())
    }

    /// Starts attempt `number` of `task`: a new attempt (claim + Running in one
    /// transaction), or the already recorded one whose runner never started.
    fn start(&mut self, task: &str, number: u32, now_ms: i64) -> Result<(), RunError> {
        let Some(row) = self.tasks.get(task) else {
            return Ok(());
        };
        let restart = row.phase == TaskPhase::Running && row.attempt_count == number;
        let (attempt, generation) = if restart {
            let live = self.live.get(task);
            (
                lifecycle::attempt_id(task, number),
                live.map_or(row.generation, |l| l.generation),
            )
        } else {
            let attempt = self.store.start_attempt(task, now_ms, self.claim_ms())?;
            self.started += 1;
            let row = self.store.task(task)?;
            let transitions = self.dag.set_phase(task, TaskPhase::Running)?;
            self.tasks.insert(task.to_string(), row);
            let mut transition = Transition::default();
            self.record_transitions(&transitions, &mut transition);
            self.flush(&mut transition, now_ms)?;
            (attempt.id, attempt.generation)
        };
        self.display.show(&RunEvent::Started {
            task: task.to_string(),
            attempt: attempt.clone(),
            generation,
        });
        let files = AttemptFiles::in_dir(self.store.attempt_dir(&attempt));
        let text = match self.tasks.get(task) {
            Some(row) => prompt::render(self.feature, &self.tasks, row),
            None => String::new(),
        };
        let mut live = Live {
            attempt: attempt.clone(),
            number,
            generation,
            pid: None,
            pid_start: None,
            child: true,
            claimed: true,
            started_at_ms: now_ms,
            renewed_at_ms: now_ms,
            claim_ms: self.claim_ms(),
            ended: None,
        };
        match executor::start(
            &self.options.runner,
            task,
            &attempt,
            files,
            &text,
            self.reports.clone(),
        ) {
            Ok(pid) => {
                live.pid = Some(pid);
                self.live.insert(task.to_string(), live);
            }
            Err(error) => {
                live.ended = Some(executor::Ended {
                    exit_code: None,
                    result: Err(error.to_string()),
                });
                self.live.insert(task.to_string(), live);
                self.decide_running(task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Asks the lifecycle what to do about a running task's attempt, and does it.
    pub(super) fn decide_running(&mut self, task: &str, now_ms: i64) -> Result<(), RunError> {
        let (Some(live), Some(row)) = (self.live.get(task), self.tasks.get(task)) else {
            return Ok(());
        };
        let view = TaskView {
            name: task.to_string(),
            phase: TaskPhase::Running,
            ready: false,
            generation: row.generation,
            next_attempt_after_ms: row.next_attempt_after_ms,
            attempt: Some(live.attempt_view()),
            gate: if self.interrupting() {
                FeatureGate::Suspended
            } else {
                FeatureGate::Open
            },
        };
        let claim = live.claim_view();
        let run = live.run_view();
        let actions = lifecycle::decide(&view, claim.as_ref(), &run, now_ms);
        self.execute(task, actions, now_ms)
    }

    /// Records how the current attempt of `task` ended and applies the policy's decision.
    fn ingest(
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
        let context = conclude::context(self.feature, row);
        let retry = conclude::retry_policy(self.feature, row);
        let decision = conclude::judge(&context, &attempt, end, now_ms);
        let result: Option<&AttemptResult> = match end {
            AttemptEnd::Reported(result) => Some(result),
            _ => None,
        };
        let usage = result.map(|r| r.usage.clone()).unwrap_or_default();
        let Some(row) = self.tasks.get_mut(task) else {
            return Ok(());
        };
        conclude::apply(row, &decision, &retry, &usage, now_ms, rand::random());
        let row = row.clone();
        if let FeatureEffect::Stop { reason } = &decision.feature {
            self.stopped = Some(reason.clone());
            transition.stop_feature = Some(reason.clone());
        }
        if let Some(exhausted) = &decision.agent_exhausted {
            let until = exhausted
                .until
                .map_or(now_ms + EXHAUSTED_PAUSE_MS, |s| s.saturating_mul(1000));
            self.agent_paused_until_ms = Some(until);
        }
        let crash = result.and_then(|r| r.crash.clone()).or_else(|| match end {
            AttemptEnd::NoResult { reason } | AttemptEnd::ClaimLost { reason } => {
                Some(reason.clone())
            }
            _ => None,
        });
        transition.close = Some(AttemptClose {
            id: attempt.clone(),
            ended_at_ms: now_ms,
            outcome: decision.outcome.as_str().to_string(),
            stop_reason: result
                .and_then(|r| r.stop_reason.as_ref())
                .map(stop_reason_text),
            crash: crash.clone(),
            message: Some(decision.event.message.clone()),
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
            message: crash.or_else(|| {
                matches!(
                    decision.event.kind,
                    crate::engine::policy::EventKind::Warning
                )
                .then(|| decision.event.message.clone())
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
    fn record_transitions(&mut self, transitions: &[AutoTransition], transition: &mut Transition) {
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

    /// Handles a runner's report.
    pub fn on_report(&mut self, report: AttemptReport, now_ms: i64) -> Result<(), RunError> {
        let Some(live) = self.live.get_mut(&report.task) else {
            return Ok(());
        };
        if live.attempt != report.attempt {
            return Ok(());
        }
        match report.report {
            Report::Spawned { pid, start } => {
                live.pid = Some(pid);
                live.pid_start = start;
                self.store
                    .set_claim_process(&report.task, &report.attempt, pid, start)?;
            }
            Report::Activity(text) => self.display.show(&RunEvent::Activity {
                task: report.task,
                attempt: report.attempt,
                text,
            }),
            Report::Ended(ended) => {
                live.ended = Some(*ended);
                self.decide_running(&report.task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Periodic work: renew the claims of live runners, look at runners of earlier runs.
    pub fn on_tick(&mut self, now_ms: i64) -> Result<(), RunError> {
        if now_ms >= self.next_renewal_ms {
            let held: Vec<(String, String)> = self
                .live
                .iter()
                .filter(|(_, live)| live.child && live.is_running())
                .map(|(task, live)| (task.clone(), live.attempt.clone()))
                .collect();
            if !held.is_empty() {
                self.store.renew_claims(&held, now_ms + self.claim_ms())?;
            }
            for (task, _) in &held {
                if let Some(live) = self.live.get_mut(task) {
                    live.renewed_at_ms = now_ms;
                }
            }
            self.next_renewal_ms = now_ms + self.claim_ms() / 3;
        }
        let watched: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| !live.child && live.ended.is_none())
            .map(|(task, _)| task.clone())
            .collect();
        for task in watched {
            self.poll_orphan(&task, now_ms)?;
        }
        Ok(())
    }

    /// Ctrl+C: the first cancels every running attempt gracefully; a second within
    /// [`KILL_WINDOW`] kills them at once.
    pub fn on_interrupt(&mut self, now_ms: i64, now: Instant) -> Result<(), RunError> {
        let kill = self
            .interrupted_at
            .is_some_and(|at| now.duration_since(at) < KILL_WINDOW);
        self.interrupted_at = Some(now);
        let mut attempts: Vec<String> = self.live.values().map(|l| l.attempt.clone()).collect();
        attempts.sort();
        self.display
            .show(&RunEvent::Interrupting { attempts, kill });
        let tasks: Vec<String> = self.live.keys().cloned().collect();
        for task in tasks {
            if kill {
                self.kill(&task);
            } else {
                self.decide_running(&task, now_ms)?;
            }
        }
        Ok(())
    }

    fn signal(&self, task: &str, signal: Signal) {
        if let Some(live) = self.live.get(task)
            && live.is_running()
            && let Some(pid) = live.pid
            && (live.child || crate::local::process::is_alive(pid, live.pid_start))
        {
            send_signal(pid, signal);
        }
    }
}

impl Run<'_> {
    fn kill(&self, task: &str) {
        if let Some(live) = self.live.get(task)
            && live.is_running()
            && let Some(pid) = live.pid
            && (live.child || crate::local::process::is_alive(pid, live.pid_start))
        {
            crate::local::process::kill_runner(pid);
        }
    }
}

fn send_signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        // The process may have exited meanwhile; its end is reported separately.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}
