//! `ralph controller`: runs the Kubernetes controller.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::controller::client::ThrottleLayer;
use crate::controller::runtime::leader::ElectionConfig;
use crate::controller::{ControllerConfig, LeaderElection, NativeSidecars};

/// Options of `ralph controller`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Namespace to watch, or `all`.
    #[arg(long, env = "RALPH_NAMESPACE", default_value = "all")]
    pub namespace: String,
    /// Image holding the `ralph` binary, put into every agent Pod (normally this
    /// controller's own image).
    #[arg(long, env = "RALPH_IMAGE")]
    pub ralph_image: String,
    /// Service account of agent Pods (only their claim-renewing sidecar gets its token).
    #[arg(
        long,
        env = "RALPH_AGENT_SERVICE_ACCOUNT",
        default_value = "ralph-agent"
    )]
    pub agent_service_account: String,
    /// Namespace of the leader-election Lease (default: the controller's own namespace,
    /// from POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Run without leader election (only safe with a single replica).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "ralph-controller-leader")]
    pub leader_lease: String,
    /// How long leadership lasts without renewal (a standby takes over after this).
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "15s")]
    pub leader_lease_duration: Duration,
    /// How long the leader keeps failing to renew before it stops reconciling and
    /// campaigns again (must be shorter than the lease duration).
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "10s")]
    pub leader_renew_deadline: Duration,
    /// Interval between leader-election attempts and renewals.
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "2s")]
    pub leader_retry_period: Duration,
    /// Most Kubernetes API requests per second on average (0: unlimited).
    #[arg(long, default_value_t = 50.0)]
    pub kube_api_qps: f64,
    /// Most Kubernetes API requests in a burst above `--kube-api-qps`.
    #[arg(long, default_value_t = 100)]
    pub kube_api_burst: u32,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Most attempts running at once over all features.
    #[arg(long, default_value_t = 100)]
    pub max_concurrent_attempts: usize,
    /// Native sidecars for agent Pods: auto (Kubernetes ≥ 1.29), true or false.
    #[arg(long, default_value = "auto", value_parser = parse_native)]
    pub native_sidecars: NativeSidecars,
    /// How long finished agent Pods are kept for `kubectl logs` before they are deleted.
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "1h")]
    pub finished_pod_ttl: Duration,
    /// Cluster-wide model prices (YAML: MODEL: {input, output, cacheRead, cacheWrite}, US
    /// dollars per million tokens) for agent Pods' gateways, over the built-in table; a
    /// Feature's `gateway.prices` win (the chart mounts it from a ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub gateway_prices: Option<std::path::PathBuf>,
    /// How long the API server may take to answer a Kubernetes API request (the wait for a
    /// token of `--kube-api-qps` is not counted).
    #[arg(long, value_parser = crate::clock::parse_duration, default_value = "10s")]
    pub api_timeout: Duration,
}

fn parse_native(value: &str) -> Result<NativeSidecars, String> {
    match value {
        "auto" => Ok(NativeSidecars::Auto),
        "true" => Ok(NativeSidecars::Always),
        "false" => Ok(NativeSidecars::Never),
        other => Err(format!("`{other}` is not auto, true or false")),
    }
}

/// The cluster-wide price table in `file` (YAML), if any.
fn gateway_prices(file: Option<&std::path::Path>) -> anyhow::Result<crate::gateway::PriceTable> {
    let Some(file) = file else {
        return Ok(crate::gateway::PriceTable::default());
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the gateway price table {}", file.display()))?;
    crate::gateway::PriceTable::parse(&text).with_context(|| format!("{}", file.display()))
}

/// Runs `ralph controller`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The inferring error's own text already names each cause; its source chain would
    // repeat them.
    let kube_config = kube::Config::infer().await.map_err(|error| {
        anyhow::anyhow!(
            "cannot configure the Kubernetes client: {error}\nPoint KUBECONFIG (or \
             ~/.kube/config) at a cluster, or run the controller in the cluster"
        )
    })?;
    let throttle = ThrottleLayer::new(args.kube_api_qps, args.kube_api_burst, args.api_timeout);
    let queue_wait = throttle
        .as_ref()
        .map_or(Duration::ZERO, ThrottleLayer::longest_queue_wait);
    let client = crate::controller::client::build(kube_config.clone(), throttle)
        .context("cannot build the Kubernetes client")?;
    let instance = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("ralph-controller-{}", std::process::id()));
    let leader_election = if args.no_leader_election {
        None
    } else {
        let namespace = args.lease_namespace.clone().context(
            "leader election needs --lease-namespace (or POD_NAMESPACE); \
             pass --no-leader-election to run a single replica without it",
        )?;
        let election = ElectionConfig {
            lease: args.leader_lease.clone(),
            identity: instance.clone(),
            lease_duration: args.leader_lease_duration,
            renew_deadline: args.leader_renew_deadline,
            retry_period: args.leader_retry_period,
        };
        election
            .validate()
            .context("invalid leader-election timings")?;
        let client = crate::controller::client::build(kube_config, None)
            .context("cannot build the leader election's Kubernetes client")?;
        Some(LeaderElection {
            namespace,
            election,
            client,
        })
    };
    let config = ControllerConfig {
        namespace: Some(args.namespace).filter(|ns| ns != "all"),
        ralph_image: args.ralph_image,
        agent_service_account: args.agent_service_account,
        native_sidecars: args.native_sidecars,
        max_concurrent_attempts: args.max_concurrent_attempts,
        api_timeout: args.api_timeout,
        queue_wait,
        leader_election,
        metrics_addr: Some(args.metrics_addr),
        instance,
        finished_pod_ttl: args.finished_pod_ttl,
        gateway_prices: gateway_prices(args.gateway_prices.as_deref())?,
    };
    crate::controller::run(
        client,
        config,
        crate::controller::runtime::shutdown::signal(),
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_sidecars_flag_accepts_auto_true_false_only() {
        assert_eq!(parse_native("auto"), Ok(NativeSidecars::Auto));
        assert_eq!(parse_native("true"), Ok(NativeSidecars::Always));
        assert_eq!(parse_native("false"), Ok(NativeSidecars::Never));
        assert!(parse_native("yes").is_err());
    }
}
