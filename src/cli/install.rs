//! `ralph install`: copies this binary to a path (the agent Pod's init container uses it
//! to put `ralph` into a shared emptyDir; the ralph image has no shell or `cp`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Options of `ralph install`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to put the binary (made executable).
    #[arg(long)]
    pub to: PathBuf,
}

/// Runs `ralph install`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    use std::os::unix::fs::PermissionsExt;
    let source = std::env::current_exe().context("cannot locate the running ralph binary")?;
    tokio::fs::copy(&source, &args.to)
        .await
        .with_context(|| format!("cannot copy {} to {}", source.display(), args.to.display()))?;
    tokio::fs::set_permissions(&args.to, std::fs::Permissions::from_mode(0o755))
        .await
        .with_context(|| format!("cannot make {} executable", args.to.display()))?;
    Ok(ExitCode::SUCCESS)
}
