//! The pure half of a local run: from the tasks, the attempts in flight and the time, what
//! must happen next: which tasks start, which claims renew, when to look again, how an
//! attempt's end changes the task, whether the run is over. No store, no processes, no
//! display: [`super::run::Run`] performs the effects.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::conclude;
use super::live::Live;
use super::{RunOptions, RunOutcome};
use crate::engine::budget::{Allowance, Budget, BudgetSpent, UsageTotals};
use crate::engine::conclusion::{AgentRest, Gate, NextState, limit_message};
use crate::engine::dag::{
    AutoTransition, Dag, DagErrors, FeatureOutcome, OutcomeInputs, PhaseError, TaskNode, TaskPhase,
};
use crate::engine::feature_plan::{self, Slots};
use crate::engine::lifecycle::{
    self, Action, AttemptEnd, ClaimView, FeatureGate, RunView, TaskView,
};
use crate::engine::memory::Recall;
use crate::engine::policy::FeatureEffect;
use crate::engine::selection::{Rests, Selection};
use crate::local::feature::LocalFeature;
use crate::local::process::ProcessId;
use crate::local::prompt;
use crate::local::store::{AttemptRow, ClaimRow, TaskRow};

/// A second Ctrl+C within this window kills the runners instead of cancelling them.
const KILL_WINDOW: Duration = Duration::from_secs(3);
/// How often runners left by an earlier run are looked at, ms.
const ORPHAN_POLL_MS: i64 = 250;

/// Whether the runner process `pid` (started at the given time) still runs.
pub(super) type Liveness = fn(&ProcessId) -> bool;

/// What the store holds when a run begins.
#[derive(Debug)]
pub(super) struct Loaded {
    /// Every task row (also removed ones whose attempt still runs).
    pub rows: Vec<TaskRow>,
    /// Attempts started over the feature's life.
    pub iterations: u32,
    /// Why the feature stopped for good, if it did.
    pub stopped: Option<String>,
    /// The agents' rests recorded by earlier runs, by agent identity.
    pub rests: Rests,
    /// What the ended attempts spent (derived from the stored attempts).
    pub spent: UsageTotals,
    /// Attempts that answered without reporting tokens
    /// ([`crate::local::budget::answered_without_tokens`]).
    pub tokens_unreported: u32,
}

/// Where the agents of the pool stand at the start of a loop turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Rest {
    /// An agent of the pool is available.
    Working,
    /// Every agent of the pool rests: nothing starts this turn.
    Resting {
        /// When the first rest ends, Unix ms.
        until_ms: i64,
        /// Which agents rest until when (engine::selection's message).
        message: String,
    },
}

/// What a Ctrl+C does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Interrupt {
    /// A second Ctrl+C in the window: kill the runners rather than cancel them.
    pub kill: bool,
    /// The attempts in flight, sorted.
    pub attempts: Vec<String>,
    /// Their tasks.
    pub tasks: Vec<String>,
}

/// How attempt `number` of a task starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Launch {
    /// A new attempt: the store claims and records it.
    New,
    /// The attempt already recorded, whose runner never started.
    Restart {
        /// Its ID.
        attempt: String,
        /// The generation it was spawned for.
        generation: i64,
    },
}

/// An attempt's end, concluded and applied to the task.
#[derive(Debug)]
pub(super) struct Concluded {
    /// The attempt that ended.
    pub attempt: String,
    /// When it started, Unix ms.
    pub started_at_ms: i64,
    /// The engine's conclusion.
    pub next: NextState,
    /// The task row after it.
    pub row: TaskRow,
    /// The other attempts to cancel (the agent cannot run as configured).
    pub cancel: Vec<String>,
    /// What the feature's budget says after this attempt, said once each: it is spent,
    /// or a cost budget now has attempts of unknown cost.
    pub budget_warnings: Vec<String>,
    /// The agent (by identity) that rests after this attempt, and until when.
    pub rest: Option<(String, AgentRest)>,
    /// The phase changes the DAG derives from it, not yet applied to the rows.
    pub transitions: Vec<AutoTransition>,
}

/// The state of one local run and the decisions taken on it.
#[derive(Debug)]
pub(super) struct Planner<'a> {
    feature: &'a LocalFeature,
    parallel: usize,
    limit: Option<u32>,
    claim_ms: i64,
    tasks: HashMap<String, TaskRow>,
    dag: Dag,
    live: HashMap<String, Live>,
    iterations_at_start: u32,
    started: u32,
    stopped: Option<String>,
    interrupted_at: Option<Instant>,
    halted: Option<String>,
    rests: Rests,
    spent: UsageTotals,
    /// Attempts that answered without reporting tokens.
    tokens_unreported: u32,
    wake_at_ms: Option<i64>,
    announced_wait_ms: Option<i64>,
    next_renewal_ms: i64,
}

/// The task row as the DAG sees it.
fn node(row: &TaskRow) -> TaskNode {
    TaskNode {
        name: row.spec.name.clone(),
        depends_on: row.spec.fields.depends_on.clone(),
        parent: row.spec.fields.parent.clone(),
        priority: row.spec.fields.priority,
        order: row.order,
        phase: row.phase,
    }
}

impl<'a> Planner<'a> {
    /// Plans a run of `feature` over what the store holds; a rest that is over is dropped.
    pub(super) fn new(
        feature: &'a LocalFeature,
        options: &RunOptions,
        loaded: Loaded,
        now_ms: i64,
    ) -> Result<Self, DagErrors> {
        let dag = Dag::new(
            loaded
                .rows
                .iter()
                .filter(|r| !r.removed)
                .map(node)
                .collect(),
        )?;
        let claim_ms = i64::try_from(options.claim_duration.as_millis()).unwrap_or(i64::MAX);
        Ok(Planner {
            feature,
            parallel: options.parallel,
            limit: options.limit,
            claim_ms,
            tasks: loaded
                .rows
                .into_iter()
                .map(|r| (r.spec.name.clone(), r))
                .collect(),
            dag,
            live: HashMap::new(),
            iterations_at_start: loaded.iterations,
            started: 0,
            stopped: loaded.stopped,
            interrupted_at: None,
            halted: None,
            rests: loaded
                .rests
                .into_iter()
                .filter(|(_, rest)| rest.until_ms > now_ms)
                .collect(),
            spent: loaded.spent,
            tokens_unreported: loaded.tokens_unreported,
            wake_at_ms: None,
            announced_wait_ms: None,
            next_renewal_ms: now_ms + claim_ms / 3,
        })
    }

    /// How long a claim lasts unless renewed, ms.
    pub(super) fn claim_ms(&self) -> i64 {
        self.claim_ms
    }

    /// The phase changes the DAG derived when it was built.
    pub(super) fn loaded_transitions(&self) -> Vec<AutoTransition> {
        self.dag.loaded_transitions().to_vec()
    }

    /// Applies one of the DAG's phase changes to its row; the row after it.
    pub(super) fn apply_transition(&mut self, change: &AutoTransition) -> Option<TaskRow> {
        let row = self.tasks.get_mut(&change.task)?;
        row.phase = change.to;
        Some(row.clone())
    }

    /// Until when and why every agent of the pool rests at `now_ms`, if they all do.
    pub(super) fn pool_wait(&self, now_ms: i64) -> Option<(i64, String)> {
        match self.choice(&[], now_ms) {
            Selection::Wait { until_ms, message } => Some((until_ms, message)),
            Selection::Run(_) => None,
        }
    }

    /// The agent and model of a task's next attempt (`history`: its attempts, oldest first).
    pub(super) fn choice(&self, history: &[AttemptRow], now_ms: i64) -> Selection {
        crate::local::selection::select(self.feature, history, &self.rests, now_ms)
    }

    /// Starts a loop turn: forgets the last wake-up time and looks at the pool's rests.
    pub(super) fn begin_turn(&mut self, now_ms: i64) -> Rest {
        self.wake_at_ms = None;
        match self.pool_wait(now_ms) {
            Some((until_ms, message)) => {
                self.wake_at(until_ms);
                Rest::Resting { until_ms, message }
            }
            None => Rest::Working,
        }
    }

    /// The tasks the DAG says may run, in its order.
    pub(super) fn ready(&self) -> Vec<String> {
        self.dag.ready().map(str::to_string).collect()
    }

    fn interrupting(&self) -> bool {
        self.interrupted_at.is_some()
    }

    /// The most attempts in all: the feature's `maxIterations`, or this run's `--limit`.
    fn max_iterations(&self) -> Option<u32> {
        let limit = self
            .limit
            .map(|l| self.iterations_at_start.saturating_add(l));
        match (self.feature.max_iterations, limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The budget the ended attempts spent, if any.
    pub(super) fn budget_spent(&self) -> Option<BudgetSpent> {
        self.feature.budget.spent(&self.spent)
    }

    /// The share of the budget an attempt starting now may spend (`ralph runner
    /// --budget-tokens/--budget-cost`, enforced by its model gateway); `None` without a
    /// budget.
    pub(super) fn budget_share(&self) -> Option<Allowance> {
        if self.feature.budget.is_unlimited() {
            return None;
        }
        let leased = self.leased();
        let free = self.parallel.saturating_sub(leased.len()).max(1);
        let free = u32::try_from(free).unwrap_or(u32::MAX);
        Some(self.feature.budget.share(&self.spent, &leased, free))
    }

    /// The shares the running attempts hold.
    fn leased(&self) -> Vec<Allowance> {
        self.live
            .values()
            .filter(|live| live.ended.is_none())
            .filter_map(|live| live.share)
            .collect()
    }

    /// Whether the running attempts' shares and what ended attempts spent hold the whole
    /// budget: no attempt starts until one ends.
    fn budget_leased_out(&self) -> bool {
        !self.feature.budget.is_unlimited()
            && self.feature.budget.leased_out(&self.spent, &self.leased())
    }

    /// What the budget says when the run starts: spent already, or costs unknown; nothing
    /// when no task is left to run (a run of a finished feature starts nothing).
    pub(super) fn budget_warnings_at_start(&self) -> Vec<String> {
        let counts = self.dag.counts();
        if counts.pending + counts.running == 0 {
            return Vec::new();
        }
        let spent = self
            .budget_spent()
            .map(|spent| format!("{spent}; no new attempt starts (raise spec.budget to go on)"));
        let unknown = self.feature.budget.unknown_cost_warning(&self.spent);
        let unreported = unreported_tokens_warning(&self.feature.budget, self.tokens_unreported);
        spent.into_iter().chain(unknown).chain(unreported).collect()
    }

    fn iterations_used(&self) -> u64 {
        u64::from(self.iterations_at_start + self.started)
    }

    /// What the feature allows for tasks that are not running, at the start of a pass.
    fn gate(&self) -> Gate {
        Gate {
            suspended: self.interrupting() || self.feature.suspend || self.halted.is_some(),
            stopped: self.stopped.is_some(),
            parallelism: self.parallel,
            running: self.live.len(),
            iterations_used: self.iterations_used(),
            max_iterations: self.max_iterations().map(u64::from),
            budget_spent: self.budget_spent().is_some() || self.budget_leased_out(),
        }
    }

    /// The attempt slots of one pass over the ready tasks ([`Planner::ready_actions`]):
    /// the feature's gate, taken once; each attempt started in the pass takes a slot.
    pub(super) fn start_pass(&self) -> Slots {
        Slots::new(self.gate(), usize::MAX)
    }

    /// What to do about the ready task `task` in the pass of `slots`, or `None` once the
    /// feature lets nothing more start. `claims` is the store's claims (one left by an
    /// earlier run is stale). Each start leases a share of the budget
    /// ([`Planner::budget_share`]), so the shares leased in this pass are looked at here:
    /// once they hold the whole budget, nothing more starts.
    pub(super) fn ready_actions(
        &self,
        slots: &mut Slots,
        task: &str,
        claims: &[ClaimRow],
        now_ms: i64,
    ) -> Option<Vec<Action>> {
        if slots.next() != FeatureGate::Open || self.budget_leased_out() {
            return None;
        }
        let Some(row) = self
            .tasks
            .get(task)
            .filter(|_| !self.live.contains_key(task))
        else {
            return Some(Vec::new());
        };
        let may_start = feature_plan::may_start(row.phase, true, row.next_attempt_after_ms, now_ms);
        let view = TaskView {
            name: task.to_string(),
            phase: row.phase,
            ready: true,
            generation: row.generation,
            next_attempt_after_ms: row.next_attempt_after_ms,
            attempt: (row.attempt_count > 0).then_some(lifecycle::AttemptView {
                number: row.attempt_count,
                generation: row.generation,
            }),
            gate: slots.offer(may_start),
        };
        let claim = self.stale_claim(task, claims);
        Some(slots.decide(&view, claim.as_ref(), &RunView::NotStarted, now_ms))
    }

    /// A claim left in the store by an earlier run for a task that is not running.
    fn stale_claim(&self, task: &str, claims: &[ClaimRow]) -> Option<ClaimView> {
        let claim = claims.iter().find(|c| c.task == task)?;
        Some(ClaimView {
            holder: claim.holder.clone(),
            renewed_at_ms: claim.expires_at_ms - self.claim_ms,
            duration_ms: self.claim_ms,
        })
    }

    /// What to do about the attempt of the running task `task`.
    pub(super) fn running_actions(&self, task: &str, now_ms: i64, alive: Liveness) -> Vec<Action> {
        let (Some(live), Some(row)) = (self.live.get(task), self.tasks.get(task)) else {
            return Vec::new();
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
        lifecycle::decide(
            &view,
            live.claim_view().as_ref(),
            &live.run_view(alive),
            now_ms,
        )
    }

    /// Look again at `at_ms` at the latest.
    pub(super) fn wake_at(&mut self, at_ms: i64) {
        self.wake_at_ms = Some(self.wake_at_ms.map_or(at_ms, |w| w.min(at_ms)));
    }

    /// When the loop must look again even if no runner reports.
    pub(super) fn next_wake(&self, now_ms: i64) -> Option<i64> {
        let orphans = self.live.values().any(Live::is_orphan);
        let poll = orphans.then_some(now_ms + ORPHAN_POLL_MS);
        [self.wake_at_ms, Some(self.next_renewal_ms), poll]
            .into_iter()
            .flatten()
            .min()
    }

    /// The time to say the run waits for (once per time), when nothing runs and the next
    /// attempt is later.
    pub(super) fn wait_to_announce(&mut self, now_ms: i64) -> Option<i64> {
        let until_ms = self.wake_at_ms.filter(|&at| at > now_ms)?;
        if !self.live.is_empty() || self.announced_wait_ms == Some(until_ms) {
            return None;
        }
        self.announced_wait_ms = Some(until_ms);
        Some(until_ms)
    }

    /// The outcome once nothing runs and nothing more will start.
    pub(super) fn outcome(&self) -> Option<RunOutcome> {
        if !self.live.is_empty() {
            return None;
        }
        if let Some(reason) = &self.halted {
            return Some(RunOutcome::Halted {
                reason: reason.clone(),
            });
        }
        if self.interrupting() {
            return Some(RunOutcome::Interrupted);
        }
        let (outcome, message) = if let Some(reason) = &self.stopped {
            (
                FeatureOutcome::Failed,
                format!("an agent promised FAILURE: {reason}"),
            )
        } else {
            let spent = self.budget_spent();
            let inputs = OutcomeInputs {
                suspended: self.feature.suspend,
                iterations_used: self.iterations_used(),
                max_iterations: self.max_iterations().map(u64::from),
                budget_reached: spent.is_some(),
            };
            let outcome = self.dag.outcome(inputs)?;
            let message = limit_message(outcome, &self.dag.counts(), spent.as_ref());
            (outcome, message)
        };
        Some(RunOutcome::Finished { outcome, message })
    }

    /// The claims (task, attempt) to renew now, marked renewed; none before a third of the
    /// claim's duration has passed since the last renewal.
    pub(super) fn renew_claims(&mut self, now_ms: i64) -> Vec<(String, String)> {
        if now_ms < self.next_renewal_ms {
            return Vec::new();
        }
        self.next_renewal_ms = now_ms + self.claim_ms / 3;
        self.live
            .iter_mut()
            .filter(|(_, live)| live.child && live.is_running())
            .map(|(task, live)| {
                live.renewed_at_ms = now_ms;
                (task.clone(), live.attempt.clone())
            })
            .collect()
    }

    /// The tasks whose runner was left by an earlier run and has not ended.
    pub(super) fn orphans(&self) -> Vec<String> {
        self.live
            .iter()
            .filter(|(_, live)| live.is_orphan())
            .map(|(task, _)| task.clone())
            .collect()
    }

    /// Ctrl+C: the first cancels every running attempt gracefully; a second within
    /// [`KILL_WINDOW`] kills them at once.
    pub(super) fn interrupt(&mut self, now: Instant) -> Interrupt {
        let kill = self
            .interrupted_at
            .is_some_and(|at| now.duration_since(at) < KILL_WINDOW);
        self.interrupted_at = Some(now);
        let mut attempts: Vec<String> = self.live.values().map(|l| l.attempt.clone()).collect();
        attempts.sort();
        Interrupt {
            kill,
            attempts,
            tasks: self.live.keys().cloned().collect(),
        }
    }

    /// The task's row.
    pub(super) fn task(&self, task: &str) -> Option<&TaskRow> {
        self.tasks.get(task)
    }

    /// The tasks that are Running according to their rows.
    pub(super) fn running(&self) -> Vec<String> {
        self.tasks
            .values()
            .filter(|row| row.phase == TaskPhase::Running)
            .map(|row| row.spec.name.clone())
            .collect()
    }

    /// The attempt in flight for `task`.
    pub(super) fn live(&self, task: &str) -> Option<&Live> {
        self.live.get(task)
    }

    /// The attempt of `task` is now in flight.
    pub(super) fn track(&mut self, task: &str, live: Live) {
        self.live.insert(task.to_string(), live);
    }

    /// The attempt of `task` is no longer in flight.
    pub(super) fn untrack(&mut self, task: &str) -> Option<Live> {
        self.live.remove(task)
    }

    /// The in-flight attempt of `task` if it is `attempt`.
    pub(super) fn current(&mut self, task: &str, attempt: &str) -> Option<&mut Live> {
        self.live
            .get_mut(task)
            .filter(|live| live.attempt == attempt)
    }

    /// How attempt `number` of `task` starts; `None` for an unknown task.
    pub(super) fn launch(&self, task: &str, number: u32) -> Option<Launch> {
        let row = self.tasks.get(task)?;
        if row.phase == TaskPhase::Running && row.attempt_count == number {
            let generation = self.live.get(task).map_or(row.generation, |l| l.generation);
            return Some(Launch::Restart {
                attempt: lifecycle::attempt_id(task, number),
                generation,
            });
        }
        Some(Launch::New)
    }

    /// The store recorded a new attempt of the task whose row is now `row`: it runs.
    pub(super) fn attempt_started(
        &mut self,
        row: TaskRow,
    ) -> Result<Vec<AutoTransition>, PhaseError> {
        self.started += 1;
        let name = row.spec.name.clone();
        let transitions = self.dag.set_phase(&name, TaskPhase::Running)?;
        self.tasks.insert(name, row);
        Ok(transitions)
    }

    /// The feature this run plans.
    pub(super) fn feature(&self) -> &'a LocalFeature {
        self.feature
    }

    /// The verification prompt of `task`, with what its memory recalls and what its worker
    /// `reported`.
    pub(super) fn verification_prompt(
        &self,
        task: &str,
        memory: Recall,
        reported: Option<String>,
    ) -> String {
        self.tasks.get(task).map_or_else(String::new, |row| {
            crate::local::verify::prompt(self.feature, &self.tasks, row, memory, reported)
        })
    }

    /// The prompt of `task`'s next attempt, with what its memory recalls
    /// ([`crate::local::prompt::recall`]).
    pub(super) fn prompt(&self, task: &str, memory: Recall) -> String {
        self.tasks.get(task).map_or_else(String::new, |row| {
            prompt::render(self.feature, &self.tasks, row, memory)
        })
    }

    /// Concludes the attempt of `task` that ended with `end` (`history`: the task's recorded
    /// attempts, oldest first) and applies it to the task, the feature and the DAG.
    pub(super) fn conclude(
        &mut self,
        task: &str,
        end: &AttemptEnd,
        history: &[AttemptRow],
        now_ms: i64,
        jitter: f64,
    ) -> Result<Option<Concluded>, PhaseError> {
        let (attempt, started_at_ms) = match (self.live.get(task), self.tasks.get(task)) {
            (Some(live), _) => (live.attempt.clone(), live.started_at_ms),
            (None, Some(row)) => (lifecycle::attempt_id(task, row.attempt_count), now_ms),
            (None, None) => return Ok(None),
        };
        let Some(row) = self.tasks.get_mut(task) else {
            return Ok(None);
        };
        let workspace = self
            .live
            .get(task)
            .and_then(|live| live.ended.as_ref())
            .and_then(|ended| ended.workspace.as_ref());
        let next = conclude::conclude_with_workspace(
            self.feature,
            row,
            history,
            end,
            workspace,
            now_ms,
            jitter,
        );
        let row = row.clone();
        let budget_warnings = self.count_spending(task, end);
        let mut cancel = Vec::new();
        match next.feature() {
            FeatureEffect::Stop { reason } => self.stopped = Some(reason.clone()),
            FeatureEffect::Halt { reason } if self.halted.is_none() => {
                self.halted = Some(reason.clone());
                // The other attempts use the same agent: stop them, uncharged.
                cancel = self.live.keys().filter(|t| *t != task).cloned().collect();
            }
            FeatureEffect::Halt { .. } | FeatureEffect::None => {}
        }
        let rest = next.agent_rest.clone().map(|rest| {
            let agent = self
                .live
                .get(task)
                .map_or(crate::api::PRIMARY_AGENT, |live| live.agent.as_str());
            let identity = crate::local::selection::identity(self.feature, agent);
            self.rests.insert(identity.clone(), rest.clone());
            (identity, rest)
        });
        let transitions = if row.removed {
            Vec::new()
        } else {
            self.dag.set_phase(task, row.phase)?
        };
        if let Some(at) = row.next_attempt_after_ms {
            self.wake_at(at);
        }
        Ok(Some(Concluded {
            attempt,
            started_at_ms,
            next,
            row,
            cancel,
            budget_warnings,
            rest,
            transitions,
        }))
    }

    /// Adds what the ended attempt spent (nothing known without its result); returns what
    /// the budget says that it did not say before.
    fn count_spending(&mut self, task: &str, end: &AttemptEnd) -> Vec<String> {
        let budget = self.feature.budget;
        let was_spent = self.budget_spent().is_some();
        let was_unknown = budget.unknown_cost_warning(&self.spent).is_some();
        let was_unreported = self.tokens_unreported > 0;
        let result = match end {
            AttemptEnd::Reported(result) => Some(result),
            _ => None,
        };
        self.spent.add_attempt(result.map(|result| &result.usage));
        if result.is_some_and(|r| r.stop_reason.is_some() && r.usage.total_tokens() == 0) {
            self.tokens_unreported += 1;
        }
        let spent = self.budget_spent().filter(|_| !was_spent).map(|spent| {
            match self.live.keys().filter(|t| *t != task).count() {
                0 => format!("{spent}; no new attempt starts"),
                1 => format!(
                    "{spent}; no new attempt starts; the 1 running attempt finishes and is counted"
                ),
                n => format!(
                    "{spent}; no new attempt starts; the {n} running attempts finish and are counted"
                ),
            }
        });
        let unknown = budget
            .unknown_cost_warning(&self.spent)
            .filter(|_| !was_unknown);
        let unreported =
            unreported_tokens_warning(&budget, self.tokens_unreported).filter(|_| !was_unreported);
        spent.into_iter().chain(unknown).chain(unreported).collect()
    }
}

/// A warning while `maxTokens` is set and `count` attempts answered without reporting
/// tokens: the token budget counts only reported tokens, so it may never stop the feature.
fn unreported_tokens_warning(budget: &Budget, count: u32) -> Option<String> {
    let limit = budget.max_tokens?;
    let attempts = match count {
        0 => return None,
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    let backstop = match budget.max_cost {
        Some(cost) => format!("maxCostUSD (${cost}) still bounds them when they report a cost"),
        None => "set budget.maxCostUSD or spec.maxIterations to bound them".to_owned(),
    };
    Some(format!(
        "{attempts} answered without reporting tokens (the agent does not report them); \
         maxTokens ({limit}) counts only reported tokens, so it may stop the feature late or \
         never: {backstop}"
    ))
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "planner_budget_tests.rs"]
mod budget_tests;
