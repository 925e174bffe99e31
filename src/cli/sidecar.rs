//! `ralph sidecar`: keeps an attempt's claim Lease while the attempt lives.
//!
//! Exit status: 0 when stopped (SIGTERM), released (Lease deleted or freed) or, with
//! `--exit-when-done`, once the attempt is over; 3 when fenced off (another attempt holds
//! the Lease).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::controller::sidecar::{self, SidecarConfig, SidecarExit};

/// Exit status when the attempt no longer holds its Lease.
pub(crate) const EXIT_FENCED: u8 = 3;

/// Options of `ralph sidecar`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The claim Lease, as NAMESPACE/NAME.
    #[arg(long, value_parser = parse_lease)]
    pub lease: (String, String),
    /// The attempt id that holds the Lease.
    #[arg(long)]
    pub holder: String,
    /// File the runner writes while its process lives.
    #[arg(long)]
    pub heartbeat_file: PathBuf,
    /// File the git steps write while they work.
    #[arg(long)]
    pub step_heartbeat_file: Option<PathBuf>,
    /// File a step writes when it ends (repeatable): once all exist, the claim is spent.
    #[arg(long = "ended-file", value_name = "FILE")]
    pub ended_files: Vec<PathBuf>,
    /// File to write when the claim cannot be kept (the runner then stops the agent).
    #[arg(long)]
    pub stop_file: Option<PathBuf>,
    /// A heartbeat older than this means its writer is gone.
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "15s")]
    pub heartbeat_max_age: Duration,
    /// How long to renew before the runner's heartbeat first appears.
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "10m")]
    pub startup_grace: Duration,
    /// Limit of each Kubernetes API call.
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "10s")]
    pub api_timeout: Duration,
    /// How long one renewal is valid (the Lease's duration, as the controller claimed it).
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "60s")]
    pub lease_duration: Duration,
    /// Exit (status 0) once the attempt is over; for a plain (non-native) sidecar container.
    #[arg(long)]
    pub exit_when_done: bool,
    /// The model gateway the agent's model calls go through (docs/gateway.md).
    #[command(flatten)]
    pub gateway: crate::gateway::sidecar::SidecarGatewayArgs,
}

fn parse_lease(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{value}` is not NAMESPACE/NAME")),
    }
}

/// Runs `ralph sidecar`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _gateway = crate::gateway::sidecar::start(&args.gateway)
        .await
        .context("cannot start the model gateway")?;
    let kube_config = kube::Config::infer()
        .await
        .context("cannot configure the Kubernetes client (in-cluster service account token)")?;
    let client = crate::controller::client::build(kube_config, None)
        .context("cannot build the Kubernetes client")?;
    let (namespace, lease) = args.lease;
    let config = SidecarConfig {
        namespace,
        lease,
        holder: args.holder,
        heartbeat_file: args.heartbeat_file,
        step_heartbeat_file: args.step_heartbeat_file,
        ended_files: args.ended_files,
        stop_file: args.stop_file,
        heartbeat_max_age: args.heartbeat_max_age,
        startup_grace: args.startup_grace,
        api_timeout: args.api_timeout,
        lease_duration: args.lease_duration,
        exit_when_done: args.exit_when_done,
    };
    let exit = sidecar::run(
        client,
        config,
        crate::controller::runtime::shutdown::signal(),
    )
    .await;
    Ok(match exit {
        SidecarExit::Fenced { holder } => {
            tracing::warn!(%holder, "the claim passed to another holder; stopping");
            ExitCode::from(EXIT_FENCED)
        }
        other => {
            tracing::info!(exit = ?other, "sidecar stopping");
            ExitCode::SUCCESS
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_flag_splits_namespace_and_name() {
        assert_eq!(
            parse_lease("team-a/feat-build"),
            Ok(("team-a".to_owned(), "feat-build".to_owned()))
        );
    }

    #[test]
    fn lease_flag_without_namespace_is_rejected() {
        assert!(parse_lease("feat-build").is_err());
        assert!(parse_lease("/feat-build").is_err());
        assert!(parse_lease("a/b/c").is_err());
    }
}
