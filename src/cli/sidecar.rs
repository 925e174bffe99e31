//! `ralph sidecar`.

use std::process::ExitCode;

/// Options of `ralph sidecar`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph sidecar`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph sidecar` is not built yet")
}
