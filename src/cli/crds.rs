//! `ralph crds`: prints the CustomResourceDefinitions of Feature and Task.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

/// Options of `ralph crds`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `ralph crds`: both CRDs as one multi-document YAML stream on stdout.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    let yaml = crate::api::crds_yaml().context("cannot render the CRDs as YAML")?;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(yaml.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        // The reader stopped early (`ralph crds | head -1`): not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        other => {
            other.context("cannot write the CRDs to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
