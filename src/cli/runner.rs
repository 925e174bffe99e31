//! `ralph runner`: drive one agent attempt over ACP and report its result.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::engine::attempt::{AttemptResult, OutcomeClass};
use crate::engine::budget::MicroUsd;
use crate::gateway::{Allowance, PriceTable};
use crate::runner::check::CheckCommand;
use crate::runner::config::{ClientFs, Confinement, Timeouts};
use crate::runner::gateway::{GatewayMode, GatewaySettings};
use crate::runner::{EventLog, RunnerConfig, fit_result, run_attempt, write_result};

/// The kubelet's termination-message file, the default result file when it exists.
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Options of `ralph runner`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task the attempt is for (exported to the agent as RALPH_TASK).
    #[arg(long)]
    pub task: String,
    /// The attempt identity, e.g. `<task>-a<N>` (RALPH_ATTEMPT).
    #[arg(long)]
    pub attempt: Option<String>,
    /// File holding the prompt text.
    #[arg(long)]
    pub prompt_file: PathBuf,
    /// The agent's working directory [default: the current directory].
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Where to write the result document [default: /dev/termination-log when it
    /// exists, else the last line on stdout].
    #[arg(long)]
    pub result_file: Option<PathBuf>,
    /// Also write the result document here (atomically), e.g. for an agent Pod's finishing
    /// git step in a shared volume.
    #[arg(long)]
    pub result_copy: Option<PathBuf>,
    /// File written every 2 s while the runner lives (the claim-keeper's sign of life).
    #[arg(long)]
    pub heartbeat_file: Option<PathBuf>,
    /// File written once the runner is done (its result written, or it failed): the
    /// claim-keeper's sign that the claim is spent.
    #[arg(long)]
    pub ended_file: Option<PathBuf>,
    /// Write the tasks the final message proposes (`<ralph:propose-tasks>`) to this file;
    /// the result then says `proposed: true` (an agent Pod of a planning Feature: its
    /// claim-keeper uploads the file).
    #[arg(long, value_name = "FILE")]
    pub proposal_file: Option<PathBuf>,
    /// When this file appears, the attempt is cancelled (the claim-keeper cannot keep the
    /// claim); its content says why.
    #[arg(long)]
    pub stop_file: Option<PathBuf>,
    /// No ACP traffic for this long counts as a hang.
    #[arg(long, default_value = "300s", value_parser = crate::clock::parse_duration)]
    pub idle_timeout: Duration,
    /// The longest an attempt may run.
    #[arg(long, default_value = "2h", value_parser = crate::clock::parse_duration)]
    pub total_timeout: Duration,
    /// Time between session/cancel and killing the agent's process group.
    #[arg(long, default_value = "10s", value_parser = crate::clock::parse_duration)]
    pub grace: Duration,
    /// Regex marking a crash when an agent stderr line matches (repeatable; added to the defaults).
    #[arg(long = "crash-pattern", value_name = "REGEX")]
    pub crash_patterns: Vec<String>,
    /// Regex marking quota exhaustion (repeatable; added to the built-in recognisers).
    #[arg(long = "exhaustion-pattern", value_name = "REGEX")]
    pub exhaustion_patterns: Vec<String>,
    /// Refuse permission for tool calls whose title, command or path matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub deny: Vec<String>,
    /// Offer the agent the client's file system (fs/read_text_file, fs/write_text_file):
    /// auto is off for gemini-cli (it cannot create files through it), on otherwise.
    #[arg(long, value_enum, default_value_t = ClientFs::Auto)]
    pub client_fs: ClientFs,
    /// A verification attempt: refuse every edit, write, delete and move (tool calls and
    /// fs/write_text_file), so the agent can only read and run commands.
    #[arg(long)]
    pub read_only: bool,
    /// After a done verdict, run this shell command in the workspace (`sh -c`); its exit
    /// code and the end of its output go into the result (`check`).
    #[arg(long, value_name = "COMMAND", conflicts_with = "read_only")]
    pub verify_command: Option<String>,
    /// Time limit of --verify-command.
    #[arg(long, default_value = "600s", value_parser = crate::clock::parse_duration, requires = "verify_command")]
    pub verify_command_timeout: Duration,
    /// Bytes of the end of --verify-command's output kept in the result (at most 2048).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(0..=2048), requires = "verify_command")]
    pub verify_output_tail_bytes: u32,
    /// The model to ask the agent for, through its ACP session configuration option of
    /// category `model` (or `session/set_model`); a model the agent rejects, or an agent
    /// without a model choice, makes the attempt misconfigured.
    #[arg(long)]
    pub model: Option<String>,
    /// Confine the agent with Landlock to writing its workspace (none of it with
    /// --read-only), HOME and a private temp directory: best-effort runs unconfined with a
    /// warning where the kernel cannot; required makes that a misconfiguration; disabled does not confine.
    #[arg(long, env = "RALPH_CONFINEMENT", value_enum, default_value_t = Confinement::BestEffort)]
    pub confinement: Confinement,
    /// Keep this path out of the confined agent's reach too, besides the runner's binary,
    /// result and heartbeat files (repeatable; `ralph run` passes its state directory).
    #[arg(long, value_name = "PATH")]
    pub keep_out: Vec<PathBuf>,
    /// Cancel the attempt when the parent process dies (Linux: PR_SET_PDEATHSIG).
    #[arg(long)]
    pub die_with_parent: bool,
    /// The model gateway: auto starts it for claude-agent-acp, codex-acp and gemini-cli
    /// when a credential for their API is in the environment (the agent then gets the
    /// gateway's URL and a placeholder key); off leaves the agent's environment as it is.
    #[arg(long, value_enum, default_value_t = GatewayMode::Auto)]
    pub gateway: GatewayMode,
    /// The model API the agent speaks (anthropic, openai, gemini), for an agent ralph does
    /// not recognise by its command.
    #[arg(long, value_name = "PROVIDER", value_parser = crate::gateway::sidecar::parse_provider)]
    pub gateway_provider: Option<crate::gateway::Provider>,
    /// The model API the gateway forwards to [default: the provider's base URL variable,
    /// e.g. ANTHROPIC_BASE_URL, else the public API].
    #[arg(long, value_name = "URL")]
    pub gateway_upstream: Option<String>,
    /// A price table (YAML: MODEL: {input, output, cacheRead, cacheWrite}, US dollars per
    /// million tokens) put over the built-in prices.
    #[arg(long, value_name = "FILE")]
    pub gateway_prices: Option<PathBuf>,
    /// Where the gateway listens [default: a free port on 127.0.0.1], for agents whose
    /// endpoint is fixed in their configuration (codex's model_providers base_url).
    #[arg(long, value_name = "ADDRESS")]
    pub gateway_listen: Option<std::net::SocketAddr>,
    /// A gateway the agent Pod's sidecar runs: the attempt's usage is read from its meter.
    #[arg(long, value_name = "URL", conflicts_with_all = ["gateway_upstream", "gateway_prices"])]
    pub gateway_url: Option<String>,
    /// The attempt's share of the Feature's token budget: the gateway refuses model calls
    /// once this many input plus output tokens were used.
    #[arg(long, value_name = "TOKENS")]
    pub budget_tokens: Option<u64>,
    /// The attempt's share of the Feature's cost budget, US dollars (e.g. 2.50).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub budget_cost: Option<MicroUsd>,
    /// The agent command and its arguments.
    #[arg(last = true, required = true, value_name = "AGENT_CMD")]
    pub agent: Vec<String>,
}

/// How often the runner writes its heartbeat file and looks for the stop file.
const BEAT_INTERVAL: Duration = Duration::from_secs(2);

/// Runs `ralph runner`; the exit status is the outcome class. The ended file is written
/// however it ends.
pub(crate) async fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    let ended_file = args.ended_file.take();
    let outcome = attempt(args).await;
    if let Some(path) = ended_file
        && let Err(error) = std::fs::write(&path, crate::clock::now_ms().to_string())
    {
        tracing::warn!(path = %path.display(), %error, "cannot write the ended file");
    }
    outcome
}

async fn attempt(args: Args) -> anyhow::Result<ExitCode> {
    let parent = nix::unistd::getppid();
    let prompt = std::fs::read_to_string(&args.prompt_file)
        .with_context(|| format!("cannot read the prompt file {}", args.prompt_file.display()))?;
    let workspace = match &args.workspace {
        Some(workspace) => workspace.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let cancel = CancellationToken::new();
    cancel_on_signals(&cancel)?;
    if args.die_with_parent {
        die_with_parent(parent, &cancel)?;
    }
    let beating = keep_beating(
        args.heartbeat_file.clone(),
        args.stop_file.clone(),
        cancel.clone(),
    );
    let (result_file, result_copy) = (args.result_file.clone(), args.result_copy.clone());
    let config = runner_config(args, prompt, workspace)?;
    adopt_orphans();
    let result = run_attempt(config, cancel).await;
    beating.abort();
    let result = result?;
    let left_behind = crate::runner::process::kill_adopted();
    if !left_behind.is_empty() {
        tracing::warn!(
            "the agent left {} processes running after the attempt (pids {left_behind:?}); killed them",
            left_behind.len()
        );
    }
    let outcome = result.outcome;
    deliver(result, result_file, result_copy.as_deref())?;
    Ok(ExitCode::from(exit_status(outcome)))
}

/// The runner's configuration from its flags, the prompt and the workspace.
fn runner_config(args: Args, prompt: String, workspace: PathBuf) -> anyhow::Result<RunnerConfig> {
    Ok(RunnerConfig {
        task: args.task,
        attempt: args.attempt,
        prompt,
        workspace,
        agent_command: args.agent,
        heartbeat_file: args.heartbeat_file,
        timeouts: Timeouts {
            idle: args.idle_timeout,
            total: args.total_timeout,
            grace: args.grace,
        },
        crash_patterns: args.crash_patterns,
        exhaustion_patterns: args.exhaustion_patterns,
        deny: args.deny,
        events: EventLog::stdout(),
        relay_stderr: true,
        client_fs: args.client_fs,
        read_only: args.read_only,
        check: args.verify_command.map(|command| CheckCommand {
            command,
            timeout: args.verify_command_timeout,
            tail_bytes: usize::try_from(args.verify_output_tail_bytes).unwrap_or(2048),
        }),
        model: args.model,
        confinement: args.confinement,
        runner_files: args
            .result_file
            .iter()
            .chain(&args.result_copy)
            .chain(&args.proposal_file)
            .chain(&args.keep_out)
            .cloned()
            .collect(),
        gateway: GatewaySettings {
            mode: args.gateway,
            provider: args.gateway_provider,
            upstream: args.gateway_upstream,
            prices: prices(args.gateway_prices.as_deref())?,
            allowance: Allowance {
                tokens: args.budget_tokens,
                cost: args.budget_cost,
            },
            remote: args.gateway_url,
            listen: args.gateway_listen,
        },
        proposal_file: args.proposal_file,
    })
}

/// Writes the result document where `--result-file` says (stdout without one), and its
/// copy where `--result-copy` says.
fn deliver(
    result: AttemptResult,
    result_file: Option<PathBuf>,
    result_copy: Option<&Path>,
) -> anyhow::Result<()> {
    match result_destination(result_file) {
        Some(path) => {
            write_result(result, &path)?;
            if let Some(copy) = result_copy {
                let json = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read back {}", path.display()))?;
                write_atomically(copy, &json)?;
            }
        }
        None => {
            let json = fit_result(result)?.1;
            if let Some(copy) = result_copy {
                write_atomically(copy, &json)?;
            }
            writeln!(std::io::stdout(), "{json}").context("cannot write the result to stdout")?;
        }
    }
    Ok(())
}

fn parse_usd(text: &str) -> Result<MicroUsd, String> {
    MicroUsd::parse(text).map_err(|error| error.to_string())
}

/// The built-in prices with the table in `file` over them.
fn prices(file: Option<&Path>) -> anyhow::Result<Option<PriceTable>> {
    let Some(file) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the price table {}", file.display()))?;
    let table = PriceTable::parse(&text).with_context(|| format!("{}", file.display()))?;
    Ok(Some(PriceTable::defaults().with(&table)))
}

/// The exit status documenting an outcome class.
pub(crate) fn exit_status(outcome: OutcomeClass) -> u8 {
    match outcome {
        OutcomeClass::Finished => 0,
        OutcomeClass::Crashed => 3,
        OutcomeClass::Exhausted => 4,
        OutcomeClass::Cancelled => 5,
        OutcomeClass::Misconfigured => 6,
        OutcomeClass::LimitReached => 7,
    }
}

fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("cannot write the result copy {}", path.display()))
}

fn result_destination(explicit: Option<PathBuf>) -> Option<PathBuf> {
    explicit.or_else(|| {
        Path::new(TERMINATION_LOG)
            .exists()
            .then(|| PathBuf::from(TERMINATION_LOG))
    })
}

/// Writes the heartbeat every [`BEAT_INTERVAL`] while the runner lives, and cancels the
/// attempt once the stop file appears.
fn keep_beating(
    heartbeat: Option<PathBuf>,
    stop_file: Option<PathBuf>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Some(path) = &heartbeat
                && let Err(error) = std::fs::write(path, crate::clock::now_ms().to_string())
            {
                tracing::warn!(path = %path.display(), %error, "cannot write the heartbeat file");
            }
            if let Some(path) = &stop_file
                && let Ok(why) = std::fs::read_to_string(path)
                && !cancel.is_cancelled()
            {
                tracing::warn!("stopping the agent: {}", why.trim());
                cancel.cancel();
            }
            tokio::time::sleep(BEAT_INTERVAL).await;
        }
    })
}

/// SIGTERM and SIGINT cancel the attempt (session/cancel, grace, kill).
fn cancel_on_signals(cancel: &CancellationToken) -> anyhow::Result<()> {
    let mut signals =
        crate::signals::StopSignals::listen().context("cannot listen for SIGTERM and SIGINT")?;
    let cancel = cancel.clone();
    tokio::spawn(async move {
        let signal = signals.recv().await;
        tracing::info!("{}: cancelling the attempt", signal.name());
        cancel.cancel();
    });
    Ok(())
}

/// Asks the kernel for SIGTERM when the parent dies; cancels at once when the parent
/// already died before the request took effect.
#[cfg(target_os = "linux")]
fn die_with_parent(parent: nix::unistd::Pid, cancel: &CancellationToken) -> anyhow::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
        .context("cannot set the parent-death signal")?;
    let now = nix::unistd::getppid();
    if now != parent || now.as_raw() == 1 {
        tracing::warn!("the parent process is already gone: cancelling the attempt");
        cancel.cancel();
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_parent: nix::unistd::Pid, _cancel: &CancellationToken) -> anyhow::Result<()> {
    anyhow::bail!("--die-with-parent is only supported on Linux")
}

/// Daemons the agent forks out of its process group are re-parented to the runner, which
/// kills them after the attempt.
#[cfg(target_os = "linux")]
fn adopt_orphans() {
    if let Err(error) = crate::runner::process::adopt_orphans() {
        tracing::warn!("cannot adopt the agent's orphaned processes: {error}");
    }
}

#[cfg(not(target_os = "linux"))]
fn adopt_orphans() {}
