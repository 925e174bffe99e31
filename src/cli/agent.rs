//! `ralph agent`: built-in ACP agents.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::agent::{Performance, Script, attempt_number, serve_stdio};

/// Subcommands of `ralph agent`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve ACP on stdio, playing a YAML script's steps for this task and attempt.
    Script(ScriptArgs),
}

/// Options of `ralph agent script`.
#[derive(Debug, clap::Args)]
pub struct ScriptArgs {
    /// The script (see docs/runner.md).
    pub file: PathBuf,
    /// The task to play.
    #[arg(long, env = "RALPH_TASK")]
    pub task: String,
    /// The attempt: `<task>-a<N>` or a plain number.
    #[arg(long, env = "RALPH_ATTEMPT")]
    pub attempt: Option<String>,
}

/// Runs `ralph agent`.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Script(args) => script(args).await,
    }
}

async fn script(args: ScriptArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read the script {}", args.file.display()))?;
    let script = Script::from_yaml(&text, &args.file.display().to_string())?;
    let attempt = attempt_number(args.attempt.as_deref());
    let performance = Performance {
        steps: script.steps_for(&args.task, attempt).to_vec(),
        model: script.model().map(str::to_string),
        models: script.models().to_vec(),
        task: args.task,
        attempt,
    };
    serve_stdio(performance).await?;
    Ok(ExitCode::SUCCESS)
}
