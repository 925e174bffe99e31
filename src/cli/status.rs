//! `ralph status`: the state of a local run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::local::state_dir;
use crate::local::status_view::{Counts, StatusView, render_status, task_lines};
use crate::local::store::{Store, keys};

/// Which local state to read: `--state DIR`, or the `.ralph/` next to FILE, or `./.ralph`.
#[derive(Debug, clap::Args)]
pub struct StateArgs {
    /// The state directory of the run.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The feature manifest the run was started with (its state is `.ralph/` beside it).
    #[arg(value_name = "FILE", conflicts_with = "state")]
    pub file: Option<PathBuf>,
}

impl StateArgs {
    /// Opens the existing state.
    pub fn open(&self) -> anyhow::Result<Store> {
        let dir = state_dir::resolve(self.state.as_deref(), self.file.as_deref());
        Ok(Store::open_existing(&dir)?)
    }
}

/// Options of `ralph status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    state: StateArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

use crate::clock::now_ms;

/// Runs `ralph status`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = args.state.open()?;
    let tasks = store.tasks()?;
    let claims = store.claims()?;
    let attempts = store.attempts(None)?;
    let feature = store
        .feature()?
        .context("the state has no feature recorded")?;
    let view = StatusView {
        feature: feature.name,
        outcome: match store.meta(keys::RUN_OWNER)? {
            Some(owner) if crate::local::process::token_alive(&owner) => {
                Some(format!("Running (ralph run {owner})"))
            }
            _ => store.meta(keys::OUTCOME)?,
        },
        stopped: store.meta(keys::STOPPED)?,
        counts: Counts::of(&tasks),
        tasks: task_lines(&tasks, &claims, &attempts),
        usage: crate::local::budget::attempt_totals(&attempts),
        budget: Some(feature.budget).filter(|b| !b.is_unlimited()),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", render_status(&view, now_ms()));
    }
    Ok(ExitCode::SUCCESS)
}
