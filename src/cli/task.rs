//! `ralph task`.

use std::process::ExitCode;

/// Subcommands of `ralph task`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {}

/// Runs `ralph task`.
pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {}
}
