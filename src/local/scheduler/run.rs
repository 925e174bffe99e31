//! The effects of one `ralph run` invocation: the [`Planner`] decides, [`Run`] carries the
//! decisions out on the store, the runner processes, their signals and the display.

use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedSender;

use super::live::Live;
use super::planner::{Concluded, Launch, Loaded, Planner, Rest};
use super::{RunOptions, RunOutcome, SchedulerError};
use crate::engine::attempt::{AttemptResult, LandlockState};
use crate::engine::dag::AutoTransition;
use crate::engine::lifecycle::{Action, AttemptEnd};
use crate::engine::policy::FeatureEffect;
use crate::engine::selection::Selection;
use crate::engine::verification::AttemptKind;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport};
use crate::local::display::Display;
use crate::local::executor::{self, AttemptFiles, AttemptReport, Ended, Report};
use crate::local::feature::LocalFeature;
use crate::local::process::{self, ProcessId};
use crate::local::prompt;
use crate::local::run_event::RunEvent;
use crate::local::store::{AttemptClose, EndDetails, NewEvent, Store, Transition, keys};
use crate::local::verify;
use crate::local::worktree::AttemptWorktree;
use crate::runner::confine::RUNNER_FILE_IN_WORKSPACE;

#[path = "resume.rs"]
mod resume;

/// One invocation of the run loop.
pub struct Run<'a> {
    store: &'a mut Store,
    options: &'a RunOptions,
    display: &'a mut Display,
    reports: UnboundedSender<AttemptReport>,
    plan: Planner<'a>,
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run").field("plan", &self.plan).finish()
    }
}

impl<'a> Run<'a> {
    /// Loads the tasks from the store, builds the DAG and persists the phases it derives.
    pub fn load(
        store: &'a mut Store,
        feature: &'a LocalFeature,
        options: &'a RunOptions,
        display: &'a mut Display,
        reports: UnboundedSender<AttemptReport>,
        now_ms: i64,
    ) -> Result<Run<'a>, SchedulerError> {
        let loaded = Loaded {
            rows: store.tasks()?,
            iterations: store.iterations()?,
            stopped: store.meta(keys::STOPPED)?,
            rests: crate::local::selection::load_rests(store)?,
            spent: crate::local::budget::attempt_totals(&store.attempts(None)?),
            tokens_unreported: crate::local::budget::answered_without_tokens(
                &store.attempts(None)?,
            ),
        };
        let plan = Planner::new(feature, options, loaded, now_ms)?;
        store.set_meta(keys::OUTCOME, None)?;
        let mut run = Run {
            store,
            options,
            display,
            reports,
            plan,
        };
        let mut transition = Transition::default();
        run.record_transitions(&run.plan.loaded_transitions(), &mut transition);
        run.store.apply(&transition, now_ms)?;
        for message in run.plan.budget_warnings_at_start() {
            run.display.show(&RunEvent::Warning {
                task: None,
                message,
            });
        }
        Ok(run)
    }

    /// When the loop must look again even if no runner reports.
    pub fn next_wake(&self, now_ms: i64) -> Option<i64> {
        self.plan.next_wake(now_ms)
    }

    /// Starts ready tasks, in the DAG's order, while the feature has capacity.
    pub fn schedule(&mut self, now_ms: i64) -> Result<(), SchedulerError> {
        if let Rest::Resting { until_ms, message } = self.plan.begin_turn(now_ms) {
            if self.plan.wait_to_announce(now_ms).is_some() {
                self.display.show(&RunEvent::Warning {
                    task: None,
                    message,
                });
                self.display.show(&RunEvent::Waiting {
                    until_ms,
                    wait_ms: until_ms - now_ms,
                });
            }
            return Ok(());
        }
        let ready = self.plan.ready();
        if !ready.is_empty() {
            let claims = self.store.claims().unwrap_or_default();
            let mut slots = self.plan.start_pass();
            for task in ready {
                let Some(actions) = self.plan.ready_actions(&mut slots, &task, &claims, now_ms)
                else {
                    break;
                };
                self.execute(&task, actions, now_ms)?;
            }
        }
        self.announce_wait(now_ms);
        Ok(())
    }

    /// Says once how long the run waits when nothing runs and the next attempt is later.
    fn announce_wait(&mut self, now_ms: i64) {
        if let Some(until_ms) = self.plan.wait_to_announce(now_ms) {
            self.display.show(&RunEvent::Waiting {
                until_ms,
                wait_ms: until_ms - now_ms,
            });
        }
    }

    /// The outcome once nothing runs and nothing more will start, recorded in the store.
    pub fn finished(&mut self) -> Result<Option<RunOutcome>, SchedulerError> {
        let Some(outcome) = self.plan.outcome() else {
            return Ok(None);
        };
        let recorded = match &outcome {
            RunOutcome::Halted { .. } => "Halted".to_string(),
            RunOutcome::Interrupted => "Interrupted".to_string(),
            RunOutcome::Finished { outcome, message } => {
                let mut transition = Transition::default();
                transition.events.push(NewEvent::feature(
                    "finished",
                    format!("{outcome:?}: {message}"),
                ));
                self.store.apply(&transition, crate::clock::now_ms())?;
                format!("{outcome:?}")
            }
        };
        self.store.set_meta(keys::OUTCOME, Some(&recorded))?;
        Ok(Some(outcome))
    }

    /// Handles a runner's report.
    pub fn on_report(&mut self, report: AttemptReport, now_ms: i64) -> Result<(), SchedulerError> {
        let Some(live) = self.plan.current(&report.task, &report.attempt) else {
            // A runner started in its worktree after its attempt was concluded (interrupted
            // while the worktree was prepared): it must not work, nor integrate anything.
            if let Report::Spawned(runner) = report.report {
                process::kill_runner(runner.pid);
            }
            return Ok(());
        };
        match report.report {
            Report::Spawned(runner) => {
                live.process = Some(runner);
                self.store
                    .set_claim_process(&report.task, &report.attempt, runner)?;
            }
            Report::Activity(text) => self.display.show(&RunEvent::Activity {
                task: report.task,
                attempt: report.attempt,
                text,
            }),
            Report::Ended(ended) => {
                confinement_warnings(self.display, &report.task, &ended);
                live.ended = Some(*ended);
                self.decide_running(&report.task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Periodic work: renew the claims of live runners, look at runners of earlier runs.
    pub fn on_tick(&mut self, now_ms: i64) -> Result<(), SchedulerError> {
        let held = self.plan.renew_claims(now_ms);
        if !held.is_empty() {
            self.store
                .renew_claims(&held, now_ms + self.plan.claim_ms())?;
        }
        for task in self.plan.orphans() {
            self.poll_orphan(&task, now_ms)?;
        }
        Ok(())
    }

    /// Ctrl+C: the first cancels every running attempt gracefully; a second soon after
    /// kills them at once.
    pub fn on_interrupt(&mut self, now_ms: i64, now: Instant) -> Result<(), SchedulerError> {
        let interrupt = self.plan.interrupt(now);
        self.display.show(&RunEvent::Interrupting {
            attempts: interrupt.attempts,
            kill: interrupt.kill,
        });
        for task in interrupt.tasks {
            if interrupt.kill {
                self.kill(&task);
            } else {
                self.decide_running(&task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Asks the planner what to do about a running task's attempt, and does it.
    fn decide_running(&mut self, task: &str, now_ms: i64) -> Result<(), SchedulerError> {
        let actions = self.plan.running_actions(task, now_ms, ProcessId::is_alive);
        self.execute(task, actions, now_ms)
    }

    /// Carries out the lifecycle's actions for one task.
    fn execute(
        &mut self,
        task: &str,
        actions: Vec<Action>,
        now_ms: i64,
    ) -> Result<(), SchedulerError> {
        let mut transition = Transition::default();
        for action in actions {
            match action {
                // The store claims and records the attempt in one transaction (StartAttempt);
                // a local run starts at once, so it never waits with a claim to renew.
                Action::Claim { .. } | Action::RenewClaim => {}
                Action::StartAttempt { attempt } => {
                    self.flush(&mut transition, now_ms)?;
                    self.start(task, attempt, now_ms)?;
                }
                Action::Cancel => self.signal(task, Signal::SIGTERM),
                Action::Ingest(end) => self.ingest(task, &end, now_ms, &mut transition)?,
                Action::DeleteRun => {
                    if let Some(live) = self.plan.untrack(task)
                        && live.is_orphan()
                        && let Some(runner) = live.process
                        && runner.is_alive()
                    {
                        process::kill_runner(runner.pid);
                    }
                }
                Action::RequeueAt(at) => self.plan.wake_at(at),
            }
        }
        self.flush(&mut transition, now_ms)
    }

    fn flush(&mut self, transition: &mut Transition, now_ms: i64) -> Result<(), SchedulerError> {
        if *transition != Transition::default() {
            self.store.apply(transition, now_ms)?;
            *transition = Transition::default();
        }
        Ok(())
    }

    /// Starts attempt `number` of `task`: a new attempt (claim + Running in one
    /// transaction), or the already recorded one whose runner never started.
    fn start(&mut self, task: &str, number: u32, now_ms: i64) -> Result<(), SchedulerError> {
        let history = self.store.attempts(Some(task))?;
        let choice = match self.plan.choice(&history, now_ms) {
            Selection::Run(choice) => choice,
            // Every agent rests: the next loop turn waits for the first.
            Selection::Wait { .. } => return Ok(()),
        };
        if let Some(warning) = &choice.refused_hint {
            self.display.show(&RunEvent::Warning {
                task: Some(task.to_string()),
                message: warning.clone(),
            });
        }
        let (attempt, generation, kind) = match self.plan.launch(task, number) {
            None => return Ok(()),
            Some(Launch::Restart {
                attempt,
                generation,
            }) => (attempt, generation, verify::attempt_kind(&history, number)),
            Some(Launch::New) => {
                let generation = self.plan.task(task).map_or(0, |row| row.generation);
                let kind =
                    verify::next_attempt_kind(&self.plan.feature().verify, generation, &history);
                let attempt =
                    self.store
                        .start_attempt_as(task, kind, now_ms, self.plan.claim_ms())?;
                let transitions = self.plan.attempt_started(self.store.task(task)?)?;
                let mut transition = Transition::default();
                self.record_transitions(&transitions, &mut transition);
                self.flush(&mut transition, now_ms)?;
                (attempt.id, attempt.generation, kind)
            }
        };
        self.display.show(&RunEvent::Started {
            task: task.to_string(),
            attempt: attempt.clone(),
            generation,
            kind,
        });
        let text = match self.plan.task(task) {
            Some(row) => {
                let memory = prompt::recall(self.store, self.plan.feature(), row)?;
                match kind {
                    AttemptKind::Work => self.plan.prompt(task, memory),
                    AttemptKind::Verify => {
                        self.plan
                            .verification_prompt(task, memory, verify::reported_work(&history))
                    }
                }
            }
            None => String::new(),
        };
        let mut live = Live::started(attempt, number, generation, now_ms, self.plan.claim_ms());
        live.agent = choice.agent;
        live.model = choice.model;
        let mut transition = Transition::default();
        transition.events.push(NewEvent::attempt(
            task,
            &live.attempt,
            "selected",
            format!(
                "agent {}, model {}",
                live.agent,
                live.model.as_deref().unwrap_or("(the agent's default)")
            ),
        ));
        self.flush(&mut transition, now_ms)?;
        self.spawn_runner(task, live, &text, kind, now_ms)
    }

    /// Starts the runner of the attempt `live` with the prompt `text`; a runner that cannot
    /// start ends the attempt at once.
    fn spawn_runner(
        &mut self,
        task: &str,
        mut live: Live,
        text: &str,
        kind: AttemptKind,
        now_ms: i64,
    ) -> Result<(), SchedulerError> {
        let files = AttemptFiles::in_dir(self.store.attempt_dir(&live.attempt));
        let runner = crate::local::selection::runner_for(
            &self.options.runner,
            self.plan.feature(),
            &live.agent,
            live.model.as_deref(),
        );
        let mut command = verify::runner_command(&runner, &self.plan.feature().verify, kind);
        live.share = self.plan.budget_share();
        if let Some(share) = &live.share {
            command.runner_args.extend(share.runner_args());
        }
        let worktree = self.attempt_worktree(task, live.number, kind)?;
        let launch = executor::Launch {
            task,
            attempt: &live.attempt,
            files,
            prompt: text,
            reports: self.reports.clone(),
        };
        match executor::start(&command, launch, worktree) {
            Ok(pid) => {
                live.process = pid.map(|pid| ProcessId { pid, start: None });
                self.plan.track(task, live);
            }
            Err(error) => {
                live.ended = Some(executor::Ended {
                    exit_code: None,
                    result: Err(error.to_string()),
                    workspace: None,
                });
                self.plan.track(task, live);
                self.decide_running(task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Where attempt `number` of `task` works when the run uses worktrees: its own, or for
    /// a verifier the one of the work attempt it checks.
    fn attempt_worktree(
        &self,
        task: &str,
        number: u32,
        kind: AttemptKind,
    ) -> Result<Option<AttemptWorktree>, SchedulerError> {
        let Some(worktrees) = &self.options.worktrees else {
            return Ok(None);
        };
        let verifies = match kind {
            AttemptKind::Work => None,
            AttemptKind::Verify => self
                .store
                .attempts(Some(task))?
                .iter()
                .rev()
                .find(|a| a.kind == AttemptKind::Work && a.number < number)
                .map(|a| a.number),
        };
        Ok(Some(AttemptWorktree {
            worktrees: worktrees.clone(),
            task: task.to_string(),
            number,
            verifies,
            verifier_follows: self.plan.feature().verify.verification().agent,
        }))
    }

    /// Records how the current attempt of `task` ended and what the planner concluded:
    /// the attempt record, the task row, the feature's stop, the agent's rest, the events.
    fn ingest(
        &mut self,
        task: &str,
        end: &AttemptEnd,
        now_ms: i64,
        transition: &mut Transition,
    ) -> Result<(), SchedulerError> {
        if self.plan.task(task).is_none() {
            return Ok(());
        }
        let history = self.store.attempts(Some(task))?;
        let git = self
            .plan
            .live(task)
            .and_then(|live| live.ended.as_ref())
            .and_then(|ended| ended.workspace.clone());
        let Some(concluded) = self
            .plan
            .conclude(task, end, &history, now_ms, rand::random())?
        else {
            return Ok(());
        };
        if let Some(git) = git {
            self.record_git(task, &concluded.attempt, &git, transition);
        }
        if let FeatureEffect::Stop { reason } = concluded.next.feature() {
            transition.stop_feature = Some(reason.clone());
        }
        for other in &concluded.cancel {
            self.signal(other, Signal::SIGTERM);
        }
        if let Some((identity, rest)) = &concluded.rest {
            crate::local::selection::save_rest(self.store, identity, rest, now_ms)?;
        }
        let result = match end {
            AttemptEnd::Reported(result) => Some(result.as_ref()),
            _ => None,
        };
        let decision = &concluded.next.decision;
        transition.close = Some(attempt_close(&concluded, result, now_ms));
        transition.tasks.push(concluded.row.clone());
        // The conclusion spends the claim (`engine::lifecycle::is_spent`); here dropping the
        // spent row costs nothing, as it goes in the conclusion's own transaction.
        release(transition, task);
        transition.events.push(NewEvent::attempt(
            task,
            &concluded.attempt,
            decision.outcome.as_str(),
            format!("[{}] {}", decision.event.reason, decision.event.message),
        ));
        self.display.show(&ended_event(task, &concluded, now_ms));
        if let Some(message) = unused_model_hint(&concluded.row, result) {
            self.display.show(&RunEvent::Warning {
                task: Some(task.to_owned()),
                message,
            });
        }
        for warning in &concluded.budget_warnings {
            transition
                .events
                .push(NewEvent::feature("budget", warning.clone()));
            self.display.show(&RunEvent::Warning {
                task: None,
                message: warning.clone(),
            });
        }
        self.record_transitions(&concluded.transitions, transition);
        Ok(())
    }

    /// Records what the git steps of a worktree attempt did; an agent that said done and
    /// changed nothing is told about.
    fn record_git(
        &mut self,
        task: &str,
        attempt: &str,
        git: &WorkspaceReport,
        transition: &mut Transition,
    ) {
        let Some(message) = git.message.clone() else {
            return;
        };
        transition
            .events
            .push(NewEvent::attempt(task, attempt, "git", message.clone()));
        if git.outcome == WorkspaceOutcome::Unchanged {
            self.warn(task, message);
        }
    }

    /// Applies the DAG's own phase changes to the rows, the event log and the display.
    fn record_transitions(&mut self, transitions: &[AutoTransition], transition: &mut Transition) {
        for change in transitions {
            let Some(row) = self.plan.apply_transition(change) else {
                continue;
            };
            transition.tasks.push(row);
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

    /// Sends `signal` to the runner of `task`, if it still runs.
    fn signal(&self, task: &str, signal: Signal) {
        if let Some(pid) = self.running_pid(task) {
            send_signal(pid, signal);
        }
    }

    /// Kills the runner of `task` at once, if it still runs.
    fn kill(&self, task: &str) {
        if let Some(pid) = self.running_pid(task) {
            process::kill_runner(pid);
        }
    }

    /// The pid of `task`'s runner while it runs.
    fn running_pid(&self, task: &str) -> Option<u32> {
        let live = self.plan.live(task).filter(|live| live.is_running())?;
        let runner = live.process?;
        (live.child || runner.is_alive()).then_some(runner.pid)
    }

    fn warn(&mut self, task: &str, message: String) {
        self.display.show(&RunEvent::Warning {
            task: Some(task.to_string()),
            message,
        });
    }
}

/// The attempt's record once it ended: the outcome, the stop reason, what the engine said,
/// its usage and the result document (`result`, when the runner reported one).
fn attempt_close(
    concluded: &Concluded,
    result: Option<&AttemptResult>,
    now_ms: i64,
) -> AttemptClose {
    let next = &concluded.next;
    AttemptClose {
        id: concluded.attempt.clone(),
        ended_at_ms: now_ms,
        outcome: next.decision.outcome.as_str().to_string(),
        details: EndDetails {
            stop_reason: result
                .and_then(|r| r.stop_reason.as_ref())
                .map(|r| r.as_str().to_owned()),
            crash: next.crash.clone(),
            message: Some(next.message.clone()),
            usage: next.usage.clone(),
            result: result.and_then(|r| serde_json::to_string(r).ok()),
        },
    }
}

/// What the display says when an attempt ended.
fn ended_event(task: &str, concluded: &Concluded, now_ms: i64) -> RunEvent {
    let next = &concluded.next;
    RunEvent::Ended {
        task: task.to_string(),
        attempt: concluded.attempt.clone(),
        outcome: next.decision.outcome.as_str().to_string(),
        phase: concluded.row.phase,
        duration_ms: now_ms - concluded.started_at_ms,
        retry_at_ms: concluded.row.next_attempt_after_ms,
        // A misconfiguration is said once, when the run ends.
        message: next.crash.clone().or_else(|| {
            (next.is_warning() && !matches!(next.feature(), FeatureEffect::Halt { .. }))
                .then(|| next.message.clone())
        }),
    }
}

/// Adds `task` to the claims the transition releases (once).
fn release(transition: &mut Transition, task: &str) {
    if !transition.release.iter().any(|t| t == task) {
        transition.release.push(task.to_string());
    }
}

fn send_signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        // The process may have exited meanwhile; its end is reported separately.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// Warns of what weakened an attempt's confinement; a kernel without (full) Landlock and a
/// state directory in the workspace were warned of before the first attempt.
fn confinement_warnings(display: &mut Display, task: &str, ended: &Ended) {
    let Ok(result) = &ended.result else {
        return;
    };
    let Some(confinement) = &result.confinement else {
        return;
    };
    if confinement.landlock != LandlockState::Enforced {
        return;
    }
    let said_at_start = |problem: &&String| problem.starts_with(RUNNER_FILE_IN_WORKSPACE);
    for problem in confinement.problems.iter().filter(|p| !said_at_start(p)) {
        display.show(&RunEvent::Warning {
            task: Some(task.to_owned()),
            message: format!("confinement: {problem}"),
        });
    }
}

/// A `<next-model>` hint that came with a verdict that ended the task: there is no next
/// attempt to use it for, which the user is told instead of the hint vanishing.
fn unused_model_hint(
    row: &crate::local::store::TaskRow,
    result: Option<&crate::engine::attempt::AttemptResult>,
) -> Option<String> {
    let hint = result?.sigils.next_model.as_deref()?;
    (row.phase == crate::engine::dag::TaskPhase::Done).then(|| {
        format!(
            "<next-model>{hint}</next-model> came with the task done: a hint is for the same \
             task's next attempt, and a done task has none, so it is not used"
        )
    })
}
