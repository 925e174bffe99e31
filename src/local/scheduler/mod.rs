//! The local run loop: the same engine as the controller, with the store's rows as claims
//! and child `ralph runner` processes as runs. Ready tasks (engine DAG order) start up to
//! `parallel` at once; every per-task step comes from `engine::lifecycle::decide` and every
//! attempt's conclusion from `engine::conclusion`.
//!
//! Like the controller, it has a pure half and an effectful half: `planner` holds the run's
//! state and decides (unit-tested without a store or processes); `run` performs what it
//! decides on the store, the runner processes and the display.

pub mod conclude;
mod live;
mod planner;
mod run;

use std::time::Duration;

pub use run::Run;

use crate::clock::now_ms;
use crate::engine::dag::{DagErrors, FeatureOutcome, PhaseError};
use crate::local::display::Display;
use crate::local::executor::RunnerCommand;
use crate::local::feature::LocalFeature;
use crate::local::store::{Store, StoreError};
use crate::signals::StopSignals;

/// Errors of a local run (not attempt failures: those are task outcomes).
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored tasks do not form a valid plan.
    #[error("the tasks do not form a valid plan:\n{0}")]
    Plan(#[from] DagErrors),
    /// The DAG refused a phase change.
    #[error("task phase change refused: {0}")]
    Phase(#[from] PhaseError),
    /// Signal handlers could not be installed.
    #[error("cannot listen for Ctrl+C: {0}")]
    Signals(std::io::Error),
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Most attempts at once.
    pub parallel: usize,
    /// Most attempts this invocation starts.
    pub limit: Option<u32>,
    /// How long a claim lasts unless renewed (renewed every third of it).
    pub claim_duration: Duration,
    /// How runners are started.
    pub runner: RunnerCommand,
    /// The repository whose worktrees attempts work in (`None`: all in the workspace).
    pub worktrees: Option<std::sync::Arc<crate::local::worktree::Worktrees>>,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The feature reached an outcome.
    Finished {
        /// The outcome.
        outcome: FeatureOutcome,
        /// Explanation.
        message: String,
    },
    /// The user interrupted the run; running attempts were cancelled.
    Interrupted,
    /// The agent cannot run as configured: the run stopped at once, no task was charged.
    Halted {
        /// What is wrong and how to fix it.
        reason: String,
    },
}

/// Shortest wait between loop turns, so a wake-up time in the past cannot spin.
const MIN_WAIT: Duration = Duration::from_millis(5);

/// Runs the feature in `store` until it reaches an outcome or is interrupted.
pub async fn run(
    store: &mut Store,
    feature: &LocalFeature,
    options: &RunOptions,
    display: &mut Display,
) -> Result<RunOutcome, SchedulerError> {
    let mut signals = StopSignals::listen().map_err(SchedulerError::Signals)?;
    let (reports_tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let mut run = Run::load(store, feature, options, display, reports_tx, now_ms())?;
    run.resume(now_ms())?;
    loop {
        let now = now_ms();
        run.schedule(now)?;
        if let Some(outcome) = run.finished()? {
            return Ok(outcome);
        }
        let wait = run
            .next_wake(now)
            .map_or(MIN_WAIT, |at| {
                Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
            })
            .max(MIN_WAIT);
        tokio::select! {
            Some(report) = reports.recv() => run.on_report(report, now_ms())?,
            () = tokio::time::sleep(wait) => run.on_tick(now_ms())?,
            _ = signals.recv() => run.on_interrupt(now_ms(), std::time::Instant::now())?,
        }
    }
}
