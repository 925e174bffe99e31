//! `ralph task`: inspect or change tasks of a local run.

use std::process::ExitCode;

use crate::cli::status::StateArgs;
use crate::clock::now_ms;
use crate::local::planning;
use crate::local::status_view::{render_task, render_tasks, task_lines};
use crate::local::worktree;

/// Subcommands of `ralph task`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the tasks with their phase, where each came from (hand-written, planned,
    /// proposed), attempts and claim.
    List {
        #[command(flatten)]
        state: StateArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one task: spec, state and every attempt.
    Show {
        /// The task ID.
        name: String,
        #[command(flatten)]
        state: StateArgs,
    },
    /// Clear the task's claim and retry count and set it Pending.
    Reset {
        /// The task ID.
        name: String,
        #[command(flatten)]
        state: StateArgs,
    },
    /// Set a Failed or Blocked task back to Pending.
    Retry {
        /// The task ID.
        name: String,
        #[command(flatten)]
        state: StateArgs,
    },
}

/// Runs `ralph task`.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { state, json } => {
            let store = state.open()?;
            let lines = task_lines(
                &store.tasks()?,
                &store.claims()?,
                &store.attempts(None)?,
                &planning::load(&store)?,
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&lines)?);
            } else {
                print!("{}", render_tasks(&lines, now_ms()));
            }
        }
        Command::Show { name, state } => {
            let store = state.open()?;
            let task = store.task(&name)?;
            let claim = store.claims()?.into_iter().find(|c| c.task == name);
            let attempts = store.attempts(Some(&name))?;
            print!("{}", render_task(&task, claim.as_ref(), &attempts));
            let numbers = attempts.iter().map(|a| a.number);
            for (number, dir) in worktree::kept(store.dir(), &name, numbers) {
                println!(
                    "attempt {number}: worktree kept at {} (`ralph task reset {name}` removes it)",
                    dir.display()
                );
            }
        }
        Command::Reset { name, state } => {
            let mut store = state.open()?;
            let task = store.reset_task(&name, now_ms())?;
            println!("task {name}: reset to {:?}, retries cleared", task.phase);
            for dir in worktree::remove_kept(store.dir(), &name)
                .await
                .map_err(anyhow::Error::msg)?
            {
                println!("task {name}: removed the worktree {}", dir.display());
            }
        }
        Command::Retry { name, state } => {
            let task = state.open()?.retry_task(&name, now_ms())?;
            println!("task {name}: set back to {:?}", task.phase);
        }
    }
    Ok(ExitCode::SUCCESS)
}
