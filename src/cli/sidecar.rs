//! `ralph sidecar`: keeps an attempt's claim Lease while the attempt lives.
//!
//! Exit status: 0 when stopped (SIGTERM), released (Lease deleted or freed) or, with
//! `--exit-when-done`, once the attempt is over; 3 when fenced off (another attempt holds
//! the Lease). In a planning attempt's Pod (`--answer-dir`) it uploads the planner's answer
//! before it exits; in a worker attempt's Pod of a planning Feature (`--proposal-file`), the
//! tasks the worker proposed, when it proposed any.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::controller::sidecar::{self, AnswerUpload, ProposalUpload, SidecarConfig, SidecarExit};

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
    /// A planning attempt's answer directory (in the workspace, mounted read-only): its
    /// files are uploaded once the attempt is over.
    #[arg(long, value_name = "DIR", requires_all = ["answer_config_map", "answer_feature", "pod_name", "pod_uid"])]
    pub answer_dir: Option<PathBuf>,
    /// The ConfigMap the answer is uploaded to.
    #[arg(long, value_name = "NAME", requires = "answer_dir")]
    pub answer_config_map: Option<String>,
    /// The feature the answer plans (a label of its ConfigMap).
    #[arg(long, value_name = "NAME", requires = "answer_dir")]
    pub answer_feature: Option<String>,
    /// A worker attempt's proposal file (the runner's `--proposal-file`, in the run
    /// directory): uploaded once the attempt is over, when the runner wrote it.
    #[arg(long, value_name = "FILE", requires_all = ["proposal_config_map", "proposal_feature", "proposal_task", "pod_name", "pod_uid"], conflicts_with = "answer_dir")]
    pub proposal_file: Option<PathBuf>,
    /// The ConfigMap the proposed tasks are uploaded to.
    #[arg(long, value_name = "NAME", requires = "proposal_file")]
    pub proposal_config_map: Option<String>,
    /// The feature the tasks are proposed for (a label of the ConfigMap).
    #[arg(long, value_name = "NAME", requires = "proposal_file")]
    pub proposal_feature: Option<String>,
    /// The proposing task's id (a label of the ConfigMap).
    #[arg(long, value_name = "ID", requires = "proposal_file")]
    pub proposal_task: Option<String>,
    /// This Pod's name: the answer ConfigMap's owner.
    #[arg(long, env = crate::controller::plan::pod_planning::POD_NAME_ENV, hide_env_values = true)]
    pub pod_name: Option<String>,
    /// This Pod's uid.
    #[arg(long, env = crate::controller::plan::pod_planning::POD_UID_ENV, hide_env_values = true)]
    pub pod_uid: Option<String>,
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
    // First: the kubelet stops a native sidecar as soon as the agent ends, which for an
    // agent that ends at once comes before the client below is built; unheard, SIGTERM
    // would kill it before it uploads a planner's answer.
    let shutdown = crate::controller::runtime::shutdown::signal();
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
        answer: answer_upload(
            args.answer_dir,
            args.answer_config_map,
            args.answer_feature,
            args.pod_name.clone(),
            args.pod_uid.clone(),
        ),
        proposal: proposal_upload(
            args.proposal_file,
            args.proposal_config_map,
            (args.proposal_feature, args.proposal_task),
            args.pod_name,
            args.pod_uid,
        ),
    };
    let exit = sidecar::run(client, config, shutdown).await;
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

/// The answer upload the flags ask for (clap requires all of them with `--answer-dir`).
fn answer_upload(
    dir: Option<PathBuf>,
    config_map: Option<String>,
    feature: Option<String>,
    pod_name: Option<String>,
    pod_uid: Option<String>,
) -> Option<AnswerUpload> {
    Some(AnswerUpload {
        dir: dir?,
        config_map: config_map?,
        feature: feature?,
        pod_name: pod_name?,
        pod_uid: pod_uid?,
    })
}

/// The proposal upload the flags ask for (clap requires all of them with
/// `--proposal-file`).
fn proposal_upload(
    file: Option<PathBuf>,
    config_map: Option<String>,
    (feature, task): (Option<String>, Option<String>),
    pod_name: Option<String>,
    pod_uid: Option<String>,
) -> Option<ProposalUpload> {
    Some(ProposalUpload {
        file: file?,
        config_map: config_map?,
        feature: feature?,
        task: task?,
        pod_name: pod_name?,
        pod_uid: pod_uid?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    const KEEPER: [&str; 5] = [
        "sidecar",
        "--lease",
        "team/shop-planning",
        "--holder",
        "shop-planning-a1",
    ];

    fn parsed(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut argv: Vec<&str> = KEEPER.to_vec();
        argv.extend(["--heartbeat-file", "/ralph-run/runner.beat"]);
        argv.extend(extra);
        Cli::try_parse_from(argv).map(|cli| cli.args)
    }

    #[test]
    fn an_answer_upload_names_its_config_map_feature_and_pod() {
        let args = parsed(&[
            "--answer-dir",
            "/workspace/.ralph-planning",
            "--answer-config-map",
            "shop-planning-a1-answer",
            "--answer-feature",
            "shop",
            "--pod-name",
            "shop-planning-a1",
            "--pod-uid",
            "uid-1",
        ])
        .expect("parses");
        let upload = answer_upload(
            args.answer_dir,
            args.answer_config_map,
            args.answer_feature,
            args.pod_name,
            args.pod_uid,
        )
        .expect("an upload");
        assert_eq!(upload.config_map, "shop-planning-a1-answer");
        assert_eq!(upload.pod_uid, "uid-1");
    }

    #[test]
    fn an_answer_dir_without_its_config_map_is_refused() {
        let error =
            parsed(&["--answer-dir", "/workspace/.ralph-planning"]).expect_err("incomplete upload");
        assert!(error.to_string().contains("--answer-config-map"), "{error}");
    }

    #[test]
    fn a_claim_keeper_without_an_answer_dir_uploads_nothing() {
        let args = parsed(&[]).expect("parses");
        assert_eq!(
            answer_upload(
                args.answer_dir,
                args.answer_config_map,
                args.answer_feature,
                args.pod_name,
                args.pod_uid
            ),
            None
        );
    }

    #[test]
    fn a_proposal_upload_names_its_config_map_feature_task_and_pod() {
        let args = parsed(&[
            "--proposal-file",
            "/ralph-run/proposal.yaml",
            "--proposal-config-map",
            "shop-api-a1-proposal",
            "--proposal-feature",
            "shop",
            "--proposal-task",
            "api",
            "--pod-name",
            "shop-api-a1",
            "--pod-uid",
            "uid-1",
        ])
        .expect("parses");
        let upload = proposal_upload(
            args.proposal_file,
            args.proposal_config_map,
            (args.proposal_feature, args.proposal_task),
            args.pod_name,
            args.pod_uid,
        )
        .expect("an upload");
        assert_eq!(
            (upload.config_map.as_str(), upload.task.as_str()),
            ("shop-api-a1-proposal", "api")
        );
    }

    #[test]
    fn a_proposal_file_without_its_config_map_is_refused() {
        let error = parsed(&["--proposal-file", "/ralph-run/proposal.yaml"])
            .expect_err("incomplete upload");
        assert!(
            error.to_string().contains("--proposal-config-map"),
            "{error}"
        );
    }

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
