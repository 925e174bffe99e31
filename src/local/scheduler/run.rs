//! The state of one `ralph run` invocation and its reactions to events.

use std::collections::HashMap;
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedSender;

use super::live::Live;
use super::{RunError, RunOptions, RunOutcome};
use crate::engine::attempt::AttemptResult;
use crate::engine::conclusion::{AgentRest, Gate, outcome_message};
use crate::engine::dag::{Dag, FeatureOutcome, OutcomeInputs, TaskNode, TaskPhase};
use crate::engine::lifecycle::{self, Action, FeatureGate, RunView, TaskView};
use crate::local::display::Display;
use crate::local::executor::{self, AttemptFiles, AttemptReport};
use crate::local::feature::LocalFeature;
use crate::local::prompt;
use crate::local::run_event::RunEvent;
use crate::local::store::{NewEvent, Store, TaskRow, Transition, keys};

/// One invocation of the run loop.
pub struct Run<'a> {
    pub(super) store: &'a mut Store,
    pub(super) feature: &'a LocalFeature,
    pub(super) options: &'a RunOptions,
    pub(super) display: &'a mut Display,
    pub(super) reports: UnboundedSender<AttemptReport>,
    pub(super) tasks: HashMap<String, TaskRow>,
    pub(super) dag: Dag,
    pub(super) live: HashMap<String, Live>,
    pub(super) iterations_at_start: u32,
    pub(super) started: u32,
    pub(super) stopped: Option<String>,
    pub(super) interrupted_at: Option<Instant>,
    pub(super) halted: Option<String>,
    pub(super) agent_rest: Option<AgentRest>,
    pub(super) wake_at_ms: Option<i64>,
    pub(super) announced_wait_ms: Option<i64>,
    pub(super) next_renewal_ms: i64,
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

impl<'a> Run<'a> {
    /// Loads the tasks from the store, builds the DAG and persists the phases it derives.
    pub fn load(
        store: &'a mut Store,
        feature: &'a LocalFeature,
        options: &'a RunOptions,
        display: &'a mut Display,
        reports: UnboundedSender<AttemptReport>,
        now_ms: i64,
    ) -> Result<Run<'a>, RunError> {
        let rows = store.tasks()?;
        let dag = Dag::new(rows.iter().filter(|r| !r.removed).map(node).collect())?;
        let iterations_at_start = store.iterations()?;
        let stopped = store.meta(keys::STOPPED)?;
        let agent_rest = store
            .meta(keys::AGENT_REST)?
            .and_then(|json| serde_json::from_str::<StoredRest>(&json).ok())
            .map(|rest| AgentRest {
                until_ms: rest.until_ms,
                message: rest.message,
            })
            .filter(|rest| rest.until_ms > now_ms);
        store.set_meta(keys::OUTCOME, None)?;
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
            halted: None,
            agent_rest,
            wake_at_ms: None,
            announced_wait_ms: None,
            next_renewal_ms: now_ms + claim_ms / 3,
        };
        let loaded = run.dag.loaded_transitions().to_vec();
        let mut transition = Transition::default();
        run.record_transitions(&loaded, &mut transition);
        run.store.apply(&transition, now_ms)?;
        if let Some(rest) = &run.agent_rest {
            run.display.show(&RunEvent::Warning {
                task: None,
                message: rest_message(rest, now_ms),
            });
        }
        Ok(run)
    }

    /// The agent is out of quota: no task starts before the rest ends, also after a restart.
    pub(super) fn rest_agent(&mut self, rest: &AgentRest) -> Result<(), RunError> {
        let stored = StoredRest {
            until_ms: rest.until_ms,
            message: rest.message.clone(),
        };
        let json = serde_json::to_string(&stored).ok();
        self.store.set_meta(keys::AGENT_REST, json.as_deref())?;
        self.agent_rest = Some(rest.clone());
        Ok(())
    }

    pub(super) fn claim_ms(&self) -> i64 {
        i64::try_from(self.options.claim_duration.as_millis()).unwrap_or(i64::MAX)
    }

    pub(super) fn interrupting(&self) -> bool {
        self.interrupted_at.is_some()
    }

    /// The most attempts in all: the feature's `maxIterations`, or this run's `--limit`.
    fn max_iterations(&self) -> Option<u32> {
        let limit = self
            .options
            .limit
            .map(|l| self.iterations_at_start.saturating_add(l));
        match (self.feature.max_iterations, limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the feature allows for tasks that are not running.
    fn gate(&self) -> FeatureGate {
        Gate {
            suspended: self.interrupting() || self.feature.suspend || self.halted.is_some(),
            stopped: self.stopped.is_some(),
            parallelism: self.options.parallel,
            running: self.live.len(),
            iterations_used: u64::from(self.iterations_at_start + self.started),
            max_iterations: self.max_iterations().map(u64::from),
            budget_spent: false,
        }
        .next(0)
    }

    pub(super) fn wake_at(&mut self, at_ms: i64) {
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
        if let Some(rest) = &self.agent_rest {
            if rest.until_ms > now_ms {
                let until = rest.until_ms;
                self.wake_at(until);
                self.announce_wait(now_ms);
                return Ok(());
            }
            self.agent_rest = None;
            self.store.set_meta(keys::AGENT_REST, None)?;
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
        self.announce_wait(now_ms);
        Ok(())
    }

    /// Says once how long the run waits when nothing runs and the next attempt is later.
    fn announce_wait(&mut self, now_ms: i64) {
        let Some(until_ms) = self.wake_at_ms.filter(|&at| at > now_ms) else {
            return;
        };
        if self.live.is_empty() && self.announced_wait_ms != Some(until_ms) {
            self.announced_wait_ms = Some(until_ms);
            self.display.show(&RunEvent::Waiting {
                until_ms,
                wait_ms: until_ms - now_ms,
            });
        }
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
        if let Some(reason) = &self.halted {
            self.store.set_meta(keys::OUTCOME, Some("Halted"))?;
            return Ok(Some(RunOutcome::Halted {
                reason: reason.clone(),
            }));
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
            let max = self.max_iterations();
            let inputs = OutcomeInputs {
                suspended: self.feature.suspend,
                iterations_used: u64::from(self.iterations_at_start + self.started),
                max_iterations: max.map(u64::from),
                budget_reached: false,
            };
            let Some(outcome) = self.dag.outcome(inputs) else {
                return Ok(None);
            };
            (outcome, outcome_message(outcome, &self.dag.counts()))
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
            Some(row) => {
                let summaries = self.blocker_summaries(row)?;
                prompt::render(self.feature, &self.tasks, row, &summaries)
            }
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

    /// What each done dependency of `row` did: the journal of its successful attempt.
    fn blocker_summaries(&self, row: &TaskRow) -> Result<HashMap<String, String>, RunError> {
        let mut summaries = HashMap::new();
        for blocker in &row.spec.depends_on {
            let attempts = self.store.attempts(Some(blocker))?;
            let journal = attempts
                .iter()
                .rev()
                .find(|a| a.outcome.as_deref() == Some("done"))
                .and_then(|a| a.result.as_deref())
                .and_then(|json| serde_json::from_str::<AttemptResult>(json).ok())
                .map(|result| result.sigils.journal.join("\n"))
                .filter(|journal| !journal.trim().is_empty());
            if let Some(journal) = journal {
                summaries.insert(blocker.clone(), journal);
            }
        }
        Ok(summaries)
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
            gate: if self.interrupting() || self.halted.is_some() {
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

    pub(super) fn signal(&self, task: &str, signal: Signal) {
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
    pub(super) fn kill(&self, task: &str) {
        if let Some(live) = self.live.get(task)
            && live.is_running()
            && let Some(pid) = live.pid
            && (live.child || crate::local::process::is_alive(pid, live.pid_start))
        {
            crate::local::process::kill_runner(pid);
        }
    }
}

/// The agent's rest as the store keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRest {
    until_ms: i64,
    message: String,
}

/// What the display says while the agent rests.
fn rest_message(rest: &AgentRest, now_ms: i64) -> String {
    let wait =
        std::time::Duration::from_secs(u64::try_from((rest.until_ms - now_ms) / 1000).unwrap_or(0));
    format!(
        "the agent is out of quota ({}); waiting {} before the next attempt",
        rest.message,
        humantime::format_duration(wait)
    )
}

fn send_signal(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        // The process may have exited meanwhile; its end is reported separately.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}
