//! `ralph agent`.

use std::process::ExitCode;

/// Subcommands of `ralph agent`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {}

/// Runs `ralph agent`.
pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {}
}
