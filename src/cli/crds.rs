//! `ralph crds`.

use std::process::ExitCode;

/// Options of `ralph crds`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph crds`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph crds` is not built yet")
}
