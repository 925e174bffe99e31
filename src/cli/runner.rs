//! `ralph runner`.

use std::process::ExitCode;

/// Options of `ralph runner`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph runner`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph runner` is not built yet")
}
