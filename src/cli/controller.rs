//! `ralph controller`.

use std::process::ExitCode;

/// Options of `ralph controller`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph controller`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ralph controller` is not built yet")
}
