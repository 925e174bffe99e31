//! The `ralph` command line: one module per subcommand. This is the binary's edge,
//! so subcommands return `anyhow::Result`.

pub(crate) mod agent;
pub(crate) mod controller;
pub(crate) mod crds;
pub(crate) mod exit;
pub(crate) mod git;
pub(crate) mod install;
pub(crate) mod memory;
pub(crate) mod plan;
mod plan_cluster;
pub(crate) mod reset;
pub(crate) mod run;
pub(crate) mod runner;
pub(crate) mod sidecar;
pub(crate) mod status;
pub(crate) mod task;
pub(crate) mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// ralph: autonomous coding-agent loops, on Kubernetes or on one machine.
#[derive(Debug, Parser)]
#[command(name = "ralph", version, about, propagate_version = true)]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `ralph=debug`.
    #[arg(long, global = true, env = "RALPH_LOG", default_value = "info")]
    pub log: String,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true, env = "RALPH_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check Feature/Task manifests (schema and DAG) and print the plan.
    Validate(validate::Args),
    /// Print the CustomResourceDefinition YAML for Feature and Task.
    Crds(crds::Args),
    /// Run a feature on this machine, without a cluster (the embedded default).
    Run(run::Args),
    /// Show the state of a local run.
    Status(status::Args),
    /// Start a Feature's local run over: remove its state and worktrees (the feature
    /// branch stays).
    Reset(reset::Args),
    /// Check a planner's answer; show, approve or reject a local run's plan.
    #[command(subcommand)]
    Plan(plan::Command),
    /// Inspect or change tasks of a local run.
    #[command(subcommand)]
    Task(task::Command),
    /// Show the journal of a local run (one entry per attempt), optionally searched.
    Journal(memory::JournalArgs),
    /// Show the knowledge agents of a local run wrote down.
    Knowledge(memory::KnowledgeArgs),
    /// Drive one agent attempt over ACP and report its result (used in agent Pods).
    Runner(Box<runner::Args>),
    /// Built-in ACP agents.
    #[command(subcommand)]
    Agent(agent::Command),
    /// Run the Kubernetes controller.
    Controller(controller::Args),
    /// Renew an attempt's claim Lease while the runner's heartbeat is fresh (agent Pod sidecar).
    Sidecar(sidecar::Args),
    /// Copy this binary to a path (agent Pod init container).
    Install(install::Args),
    /// The git steps of an agent Pod: clone before the agent, commit and integrate after.
    #[command(subcommand)]
    Git(git::Command),
}

/// Runs one parsed subcommand; the exit code is the subcommand's documented outcome.
pub async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Validate(args) => with_error_exit(validate::run(args).await),
        Command::Crds(args) => crds::run(args).await,
        Command::Run(args) => with_error_exit(run::run(args).await),
        Command::Status(args) => status::run(args).await,
        Command::Reset(args) => reset::run(args).await,
        Command::Plan(command) => plan::run(command).await,
        Command::Task(command) => task::run(command).await,
        Command::Journal(args) => memory::journal(args).await,
        Command::Knowledge(args) => memory::knowledge(args).await,
        Command::Runner(args) => runner::run(*args).await,
        Command::Agent(command) => agent::run(command).await,
        Command::Controller(args) => controller::run(args).await,
        Command::Sidecar(args) => sidecar::run(args).await,
        Command::Install(args) => install::run(args).await,
        Command::Git(command) => git::run(command).await,
    }
}

/// `ralph run` and `ralph validate` exit with their table's code for an unexpected error
/// (other subcommands keep exit 2 for theirs).
fn with_error_exit(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    Ok(result.unwrap_or_else(|error| {
        eprintln!("error: {error:#}");
        exit::Exit::Error.into()
    }))
}

/// Installs the tracing subscriber on stderr (stdout is reserved for command output
/// and, in `ralph agent`, for the ACP stream).
pub fn init_tracing(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&cli.log).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person: a runner's stderr is a log file or a pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if cli.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}
