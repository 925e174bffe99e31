//! `ralph status`.

use std::process::ExitCode;

/// Options of `ralph status`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph status`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph status` is not built yet")
}
