//! `ralph run`.

use std::process::ExitCode;

/// Options of `ralph run`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph run`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph run` is not built yet")
}
