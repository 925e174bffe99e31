//! `ralph validate`.

use std::process::ExitCode;

/// Options of `ralph validate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph validate`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph validate` is not built yet")
}
