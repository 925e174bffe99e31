//! `ralph run`: run a feature on this machine, without a cluster.
//!
//! Exit codes: see [`super::exit::Exit`] (`ralph run --help` shows the table).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::exit::Exit;
use crate::api::agent::Confinement;
use crate::api::gateway::GatewaySpec;
use crate::clock::now_ms;
use crate::engine::attempt::{ConfinementReport, LandlockState};
use crate::local::display::{Display, Mode};
use crate::local::executor::RunnerCommand;
use crate::local::feature::LocalFeature;
use crate::local::plan::{PlanError, agent_timeouts, feature_spec};
use crate::local::run_event::RunEvent;
use crate::local::scheduler::{self, RunOptions, RunOutcome};
use crate::local::status_view::Counts;
use crate::local::store::{Store, SyncReport, TaskRow};
use crate::local::summary::Summary;
use crate::local::worktree::Worktrees;
use crate::local::{process, shared_workspace, state_dir};
use crate::manifest::FeatureManifest;

/// Options of `ralph run`.
#[derive(Debug, clap::Args)]
#[command(after_help = Exit::table())]
pub struct Args {
    /// The Feature/Task manifest (YAML, one or more documents).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Which feature to run when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub feature: Option<String>,
    /// Agent command overriding the Feature's (split like a shell would; a leading `ralph`
    /// means this `ralph` binary).
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
    /// Most attempts at once (default: the Feature's parallelism).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: Option<u32>,
    /// State directory (default: `.ralph/<feature>/` next to the manifest).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Start at most N attempts in this run, then stop (LimitReached: exit 5 unless every
    /// task is done).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Print one JSON event per line instead of progress.
    #[arg(long)]
    pub json: bool,
    /// The agents' working directory (default: the manifest's directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A git repository each attempt works in through its own worktree (default: the
    /// workspace's repository, if it is in one).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// A configured remote of the repository the feature branch is pushed to after each
    /// integration (default: no push).
    #[arg(long, value_name = "NAME")]
    pub push_remote: Option<String>,
    /// Runner: stop an agent silent this long (default: the Feature's idleTimeoutSeconds).
    #[arg(long, value_name = "DUR", value_parser = crate::clock::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Runner: stop an attempt running this long (default: the Feature's totalTimeoutSeconds).
    #[arg(long, value_name = "DUR", value_parser = crate::clock::parse_duration)]
    pub total_timeout: Option<Duration>,
    /// Runner: grace period between cancel and kill.
    #[arg(long, value_name = "DUR", value_parser = crate::clock::parse_duration)]
    pub grace: Option<Duration>,
    /// Runner: extra crash pattern on agent stderr (regex; repeatable).
    #[arg(long, value_name = "REGEX")]
    pub crash_pattern: Vec<String>,
    /// Runner: extra usage-limit pattern on agent output (regex; repeatable).
    #[arg(long, value_name = "REGEX")]
    pub exhaustion_pattern: Vec<String>,
    /// Runner: refuse permission for paths matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub deny: Vec<String>,
    /// Runner: confine each agent with Landlock (default: the Feature's
    /// spec.agent.confinement, best-effort); required stops before any attempt where the
    /// kernel cannot.
    #[arg(long, value_enum, value_name = "MODE")]
    pub confinement: Option<Confinement>,
    /// How long a claim lasts unless renewed by a live runner.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = crate::clock::parse_duration)]
    pub claim_duration: Duration,
}

/// The exit for how a run ended.
pub(crate) fn exit(outcome: &RunOutcome) -> Exit {
    match outcome {
        RunOutcome::Interrupted => Exit::Interrupted,
        RunOutcome::Halted { .. } => Exit::AgentMisconfigured,
        RunOutcome::Finished { outcome, .. } => Exit::of_outcome(*outcome),
    }
}

/// Splits an agent command like a shell, replaces a leading `ralph` with `exe`, and makes
/// words naming existing files relative to `cwd` absolute (the agent runs in the workspace,
/// not where `ralph run` was typed).
pub(crate) fn agent_command(command: &str, exe: &Path, cwd: &Path) -> anyhow::Result<Vec<String>> {
    let words = shell_words::split(command)
        .with_context(|| format!("--agent {command:?} is not a valid command line"))?;
    if words.is_empty() {
        bail!("--agent is empty");
    }
    let words = words
        .into_iter()
        .enumerate()
        .map(|(index, word)| {
            let path = Path::new(&word);
            let names_a_file = index > 0 || word.contains('/');
            if names_a_file && path.is_relative() && cwd.join(path).exists() {
                cwd.join(path).display().to_string()
            } else {
                word
            }
        })
        .collect();
    Ok(resolve_ralph(words, exe))
}

/// Replaces a leading `ralph` with this binary, so `cargo run -- run ...` works without
/// installing.
pub(crate) fn resolve_ralph(mut command: Vec<String>, exe: &Path) -> Vec<String> {
    if command.first().is_some_and(|program| program == "ralph") {
        command[0] = exe.display().to_string();
    }
    command
}

fn absolute(path: &Path, what: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(path)
        .with_context(|| format!("cannot create the {what} {}", path.display()))?;
    std::fs::canonicalize(path)
        .with_context(|| format!("cannot resolve the {what} {}", path.display()))
}

fn runner_args(args: &Args, timeouts: (Duration, Duration)) -> Vec<String> {
    let duration = crate::clock::format_duration;
    let mut out = vec![
        "--idle-timeout".to_string(),
        duration(args.idle_timeout.unwrap_or(timeouts.0)),
        "--total-timeout".to_string(),
        duration(args.total_timeout.unwrap_or(timeouts.1)),
    ];
    if let Some(grace) = args.grace {
        out.extend(["--grace".to_string(), duration(grace)]);
    }
    for (flag, values) in [
        ("--crash-pattern", &args.crash_pattern),
        ("--exhaustion-pattern", &args.exhaustion_pattern),
        ("--deny", &args.deny),
    ] {
        for value in values {
            out.extend([flag.to_string(), value.clone()]);
        }
    }
    out
}

/// Whether this kernel (`probe`) confines agents as `confinement` asks: a warning when it
/// cannot and that is allowed, an error (before any attempt) when it is `Required`.
fn confinement_warning(
    confinement: Confinement,
    probe: impl FnOnce() -> ConfinementReport,
) -> Result<Option<String>, String> {
    if confinement == Confinement::Disabled {
        return Ok(Some(
            "confinement is disabled: only the permission answers keep the agents in their \
             workspace (docs/security.md)"
                .to_owned(),
        ));
    }
    let probe = probe();
    if probe.landlock == LandlockState::Enforced {
        return Ok(None);
    }
    let problem = probe.problems.join("; ");
    if confinement == Confinement::Required && probe.landlock == LandlockState::Unavailable {
        return Err(format!(
            "confinement is required but {problem}; run on a kernel with Landlock or use \
             --confinement best-effort"
        ));
    }
    Ok(Some(format!("agents are not fully confined: {problem}")))
}

/// The runner flags of the agent's gateway setting; its prices are written to the state
/// directory for the runners to read.
fn gateway_args(gateway: Option<&GatewaySpec>, state: &Path) -> anyhow::Result<Vec<String>> {
    let Some(gateway) = gateway else {
        return Ok(Vec::new());
    };
    let mut args = gateway.runner_args();
    let prices = gateway.price_table();
    if gateway.enabled && !prices.is_empty() {
        let file = state.join("gateway-prices.yaml");
        let text = serde_yaml_ng::to_string(&prices).context("cannot write the price table")?;
        std::fs::write(&file, text)
            .with_context(|| format!("cannot write the price table {}", file.display()))?;
        args.extend(["--gateway-prices".to_owned(), file.display().to_string()]);
    }
    Ok(args)
}

/// The warning for a Feature that turned the model gateway off.
fn gateway_off_warning(gateway: Option<&GatewaySpec>) -> Option<String> {
    gateway.filter(|gateway| !gateway.enabled).map(|_| {
        "the model gateway is off (spec.agent.gateway.enabled: false): the agent holds the \
         model key itself, and only the usage it reports is counted (it may under-report; \
         spec.budget may stop late)"
            .to_owned()
    })
}

/// Runs `ralph run`: read and check the manifest, open the store, run the scheduler,
/// show the outcome.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let plan = match load(&args) {
        Ok(plan) => plan,
        Err(exit) => return Ok(exit.into()),
    };
    let chosen = match choose(&args, &plan) {
        Ok(chosen) => chosen,
        Err(exit) => return Ok(exit.into()),
    };
    let exe = std::env::current_exe().context("cannot locate the running ralph binary")?;
    let feature = match local_feature(&args, chosen, &exe)? {
        Ok(feature) => feature,
        Err(exit) => return Ok(exit.into()),
    };
    let workspace = match workspace(&args, &feature.name)? {
        Ok(workspace) => workspace,
        Err(problem) => {
            eprintln!("error: {problem}");
            return Ok(Exit::InvalidInput.into());
        }
    };
    let confinement = args
        .confinement
        .unwrap_or(chosen.feature.spec.agent.confinement);
    let unconfined = match confinement_warning(confinement, crate::runner::confine::probe) {
        Ok(warning) => warning,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(Exit::AgentMisconfigured.into());
        }
    };
    let state = absolute(
        &state_dir::resolve(args.state.as_deref(), &args.file, &feature.name),
        "state directory",
    )?;
    let (mut store, feature, report) = match open_store(&state, chosen, feature).await? {
        Ok(opened) => opened,
        Err(exit) => return Ok(exit.into()),
    };
    let mut display = Display::new(Mode::detect(args.json));
    show_plan(&mut display, &feature, &store.tasks()?, report);
    let worktrees = match open_worktrees(&args, &workspace, &feature.name, &state).await {
        Ok(worktrees) => worktrees,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(Exit::InvalidInput.into());
        }
    };
    let runner_args = all_runner_args(&args, chosen, confinement, &state)?;
    let options = run_options(&args, &feature, exe, workspace, worktrees, runner_args);
    let planning = run_planning(&args, chosen, &options);
    let feature = match super::plan::for_run(&planning, &mut store, feature, &mut display).await? {
        Ok(feature) => feature,
        Err(exit) => {
            store.release_run_ownership(&process::own_token())?;
            return Ok(exit.into());
        }
    };
    let tasks = store.tasks()?;
    // Nothing is said of how attempts would run when none is left to run.
    let anything_left = Counts::of(&tasks).done < tasks.len();
    let warnings = start_warnings(&args, chosen, &tasks, &options)
        .into_iter()
        .chain(unconfined.filter(|_| anything_left))
        .chain(reachable_state_warning(&options, &state, confinement).filter(|_| anything_left))
        .chain(gateway_off_warning(
            chosen.feature.spec.agent.gateway.as_ref(),
        ));
    show_warnings(&mut display, warnings);
    match run_to_end(&planning, &mut store, feature, &options, &mut display).await? {
        Ok((feature, outcome)) => finish(&mut store, &feature, &outcome, &mut display),
        Err(exit) => {
            store.release_run_ownership(&process::own_token())?;
            Ok(exit.into())
        }
    }
}

/// Shows each warning before the run starts.
fn show_warnings(display: &mut Display, warnings: impl IntoIterator<Item = String>) {
    for message in warnings {
        display.show(&RunEvent::Warning {
            task: None,
            message,
        });
    }
}

/// What planning needs of the run: the manifest, how runners start, where the planner works.
fn run_planning<'a>(
    args: &'a Args,
    chosen: &'a FeatureManifest,
    options: &'a RunOptions,
) -> super::plan::RunPlanning<'a> {
    super::plan::RunPlanning {
        file: &args.file,
        chosen,
        exe: &options.runner.program,
        runner: &options.runner,
        workdir: options.worktrees.as_ref().map_or_else(
            || options.runner.workspace.clone(),
            |worktrees| worktrees.top().to_path_buf(),
        ),
        interactive: super::plan::interactive(args.json),
    }
}

/// How attempts run: parallelism, claims, the runner command and its flags, worktrees.
fn run_options(
    args: &Args,
    feature: &LocalFeature,
    exe: PathBuf,
    workspace: PathBuf,
    worktrees: Option<Worktrees>,
    runner_args: Vec<String>,
) -> RunOptions {
    RunOptions {
        parallel: usize::try_from(args.parallel.unwrap_or(feature.parallelism).max(1)).unwrap_or(1),
        limit: args.limit,
        claim_duration: args.claim_duration,
        runner: RunnerCommand {
            program: exe,
            agent: feature.agent_command.clone(),
            workspace,
            runner_args,
            env: feature.agent_env.clone(),
        },
        worktrees: worktrees.map(std::sync::Arc::new),
    }
}

/// Runs the scheduler until nothing is left, re-planning or taking proposed tasks in
/// between as planning says; the feature as it ended and the run's outcome, or the exit of
/// a run that stops for planning (waiting for approval, a planner that failed).
async fn run_to_end(
    planning: &super::plan::RunPlanning<'_>,
    store: &mut Store,
    mut feature: LocalFeature,
    options: &RunOptions,
    display: &mut Display,
) -> anyhow::Result<Result<(LocalFeature, RunOutcome), Exit>> {
    loop {
        let outcome = scheduler::run(store, &feature, options, display).await?;
        match super::plan::after_run(planning, store, &feature, &outcome, display).await? {
            None => return Ok(Ok((feature, outcome))),
            Some(Ok(revised)) => feature = revised,
            Some(Err(exit)) => return Ok(Err(exit)),
        }
    }
}

/// Opens the state directory's store, takes the run's ownership of it and syncs the
/// feature (with the tasks of a plan the store keeps) into it; a store of another feature is said and exits with a usage error.
async fn open_store(
    state: &Path,
    chosen: &FeatureManifest,
    feature: LocalFeature,
) -> anyhow::Result<Result<(Store, LocalFeature, SyncReport), Exit>> {
    let mut store = Store::open(state)?;
    crate::local::worktree::exclude_state(state).await;
    store.take_run_ownership(&process::own_token(), process::token_alive)?;
    let feature = super::plan::with_kept_plan(&store, chosen, feature)?;
    match store.sync(&feature, now_ms()) {
        Ok(report) => Ok(Ok((store, feature, report))),
        Err(error @ crate::local::store::StoreError::OtherFeature { .. }) => {
            eprintln!("error: {error}");
            Ok(Err(Exit::Usage))
        }
        Err(error) => Err(error.into()),
    }
}

/// Shows the feature's tasks and what the sync changed.
fn show_plan(display: &mut Display, feature: &LocalFeature, tasks: &[TaskRow], report: SyncReport) {
    display.show(&RunEvent::Plan {
        feature: feature.name.clone(),
        total: tasks.len(),
        done: Counts::of(tasks).done,
        added: report.added,
        edited: report.edited,
        removed: [report.removed, report.removed_later].concat(),
    });
}

/// Every flag of the runner: timeouts and patterns, client file system, confinement, gateway,
/// and the state directory to keep the agent out of.
fn all_runner_args(
    args: &Args,
    chosen: &FeatureManifest,
    confinement: Confinement,
    state: &Path,
) -> anyhow::Result<Vec<String>> {
    Ok([
        runner_args(args, agent_timeouts(chosen)),
        chosen.feature.spec.agent.client_fs.runner_args(),
        confinement.runner_args(),
        gateway_args(chosen.feature.spec.agent.gateway.as_ref(), state)?,
        vec!["--keep-out".to_owned(), state.display().to_string()],
    ]
    .concat())
}

/// The warning for a state directory inside the shared workspace of a confined run: the
/// agents can reach their runners' result files there.
fn reachable_state_warning(
    options: &RunOptions,
    state: &Path,
    confinement: Confinement,
) -> Option<String> {
    (options.worktrees.is_none()
        && confinement != Confinement::Disabled
        && state.starts_with(&options.runner.workspace))
    .then(|| {
        format!(
            "the state directory {} lies in the workspace: agents can reach their runners' \
             result files (use --state outside it, or a git repository)",
            state.display()
        )
    })
}

/// Shows how the run ended and its summary, gives the store's ownership back, and says the
/// exit code.
fn finish(
    store: &mut Store,
    feature: &LocalFeature,
    outcome: &RunOutcome,
    display: &mut Display,
) -> anyhow::Result<ExitCode> {
    let (finished_outcome, message) = end_message(outcome, &store.tasks()?);
    display.show(&RunEvent::Finished {
        outcome: finished_outcome,
        message,
    });
    let summary = Summary {
        halted: matches!(outcome, RunOutcome::Halted { .. }),
        ..Summary::build(
            &feature.name,
            finished_outcome,
            &store.tasks()?,
            &store.attempts(None)?,
        )
    };
    display.show(&RunEvent::Summary(summary));
    store.release_run_ownership(&process::own_token())?;
    Ok(exit(outcome).into())
}

/// The plan of the manifest; an invalid one is said and exits 3.
fn load(args: &Args) -> Result<crate::manifest::Plan, Exit> {
    let options = crate::manifest::LoadOptions {
        agent_from_command_line: args.agent.is_some(),
        local: true,
    };
    crate::manifest::load_plan_with(&[&args.file], &options).map_err(|errors| {
        eprintln!(
            "error: {} is not a valid plan:\n{errors}",
            args.file.display()
        );
        Exit::InvalidInput
    })
}

/// The feature to run: the manifest's only one, or `--feature`'s (said when missing).
fn choose<'p>(args: &Args, plan: &'p crate::manifest::Plan) -> Result<&'p FeatureManifest, Exit> {
    let names: Vec<String> = plan.features.iter().map(|f| f.name()).collect();
    let file = args.file.display();
    match (&args.feature, plan.features.as_slice()) {
        (None, [only]) => Ok(only),
        (None, []) => {
            eprintln!("error: {file} holds no Feature");
            Err(Exit::InvalidInput)
        }
        (None, _) => {
            eprintln!(
                "error: {file} holds several features ({}); choose one with --feature",
                names.join(", ")
            );
            Err(Exit::Usage)
        }
        (Some(name), features) => features.iter().find(|f| f.name() == *name).ok_or_else(|| {
            eprintln!(
                "error: {file} has no feature {name:?} (it has: {})",
                names.join(", ")
            );
            Exit::Usage
        }),
    }
}

/// The local feature of `chosen`, its agent commands resolved (`--agent`, a leading
/// `ralph`); a feature local mode cannot run is said and exits 3.
fn local_feature(
    args: &Args,
    chosen: &FeatureManifest,
    exe: &Path,
) -> anyhow::Result<Result<LocalFeature, Exit>> {
    let mut feature = match feature_spec(chosen) {
        Ok(feature) => feature,
        Err(error) => {
            eprintln!("error: {}: {error}", args.file.display());
            return Ok(Err(Exit::InvalidInput));
        }
    };
    feature.agent_command = match &args.agent {
        Some(command) => agent_command(
            command,
            exe,
            &std::env::current_dir().context("cannot read the current directory")?,
        )?,
        None => resolve_ralph(feature.agent_command, exe),
    };
    if feature.agent_command.is_empty() {
        return Err(PlanError::NoAgent(feature.name).into());
    }
    for fallback in &mut feature.fallback_agents {
        fallback.command = resolve_ralph(std::mem::take(&mut fallback.command), exe);
    }
    Ok(Ok(feature))
}

/// The agents' working directory (created when missing), or why it cannot be: a file, or
/// a default inside ralph's own source tree.
fn workspace(args: &Args, feature: &str) -> anyhow::Result<Result<PathBuf, String>> {
    let manifest_dir = args
        .file
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let workspace = args.workspace.as_deref().unwrap_or(manifest_dir);
    if workspace.exists() && !workspace.is_dir() {
        return Ok(Err(format!(
            "the workspace {} is a file, not a directory: pass --workspace a directory (it \
             is created when missing)",
            workspace.display()
        )));
    }
    let workspace = absolute(workspace, "workspace")?;
    if args.workspace.is_none()
        && args.repo.is_none()
        && let Some(top) = ralph_source_tree(&workspace)
    {
        return Ok(Err(format!(
            "the workspace {} is in ralph's own source tree ({}): the agents would edit \
             ralph's files and commit to its repository. Pass --workspace DIR outside it \
             (e.g. --workspace /tmp/{feature})",
            workspace.display(),
            top.display()
        )));
    }
    Ok(Ok(workspace))
}

/// The warnings before anything runs: an older ralph's state not read, agent variables a
/// local run cannot resolve, parallel attempts sharing one directory.
fn start_warnings(
    args: &Args,
    chosen: &FeatureManifest,
    tasks: &[crate::local::store::TaskRow],
    options: &RunOptions,
) -> Vec<String> {
    let left = tasks.len().saturating_sub(Counts::of(tasks).done);
    let shared = match &options.worktrees {
        Some(_) => None,
        None => shared_workspace::shared_directory_warning(
            options.parallel.min(left),
            &options.runner.workspace,
        ),
    };
    legacy_warning(args)
        .into_iter()
        .chain(crate::local::plan::unresolved_env(
            chosen,
            args.agent.is_some(),
        ))
        .chain(shared)
        .collect()
}

/// The outcome and last message of a run that ended as `outcome`, with how to retry the
/// failed tasks among `tasks`.
fn end_message(
    outcome: &RunOutcome,
    tasks: &[crate::local::store::TaskRow],
) -> (Option<crate::engine::dag::FeatureOutcome>, String) {
    let (finished, message) = match outcome {
        RunOutcome::Finished { outcome, message } => (Some(*outcome), message.clone()),
        RunOutcome::Interrupted => (
            None,
            "interrupted: running attempts were cancelled; run again to resume".to_string(),
        ),
        RunOutcome::Halted { reason } => (
            None,
            format!(
                "stopped: the agent cannot run as configured: {reason}\n\
                 No task was charged a retry; run again once it is fixed"
            ),
        ),
    };
    match retry_hint(tasks, finished) {
        Some(hint) => (finished, format!("{message}\n{hint}")),
        None => (finished, message),
    }
}

/// The directory of ralph's own sources (a `Cargo.toml` of package `ralph-operator`) that
/// holds `dir`, if any: the samples live there, and a run must not work on it.
fn ralph_source_tree(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|manifest| manifest.contains("name = \"ralph-operator\""))
        })
        .map(Path::to_path_buf)
}

/// After a Failed run: how to try its failed tasks again.
fn retry_hint(
    tasks: &[crate::local::store::TaskRow],
    outcome: Option<crate::engine::dag::FeatureOutcome>,
) -> Option<String> {
    if outcome != Some(crate::engine::dag::FeatureOutcome::Failed) {
        return None;
    }
    let failed: Vec<&str> = tasks
        .iter()
        .filter(|task| task.phase == crate::engine::dag::TaskPhase::Failed)
        .map(|task| task.name())
        .collect();
    let first = failed.first()?;
    Some(format!(
        "to try again: `ralph task retry {first}` (it gets its retries back; failed: {}), \
         then run the same command; `ralph reset FILE` starts the whole feature over",
        failed.join(", ")
    ))
}

/// A warning when an older ralph left one state for the manifest's whole directory, which
/// this run does not read.
fn legacy_warning(args: &Args) -> Option<String> {
    if args.state.is_some() {
        return None;
    }
    let root = state_dir::root_beside(&args.file);
    state_dir::legacy_store(&root)?;
    Some(format!(
        "{} holds the state of an older ralph (one state for every manifest in the \
         directory); this run keeps its own in a directory per Feature and does not read it. \
         `ralph status --state {}` shows it; remove {} when it is no longer needed",
        root.display(),
        root.display(),
        root.join(crate::local::store::DATABASE_FILE).display()
    ))
}

/// The worktrees attempts work in: those of `--repo`, which must be a git repository, or
/// of the workspace's repository if it is in one.
async fn open_worktrees(
    args: &Args,
    workspace: &Path,
    feature: &str,
    state: &Path,
) -> anyhow::Result<Option<Worktrees>> {
    let dir = args.repo.as_deref().unwrap_or(workspace);
    let worktrees = Worktrees::open(dir, feature, state, args.push_remote.as_deref())
        .await
        .with_context(|| format!("cannot use the git repository at {}", dir.display()))?;
    if worktrees.is_none()
        && let Some(repo) = &args.repo
    {
        anyhow::bail!(
            "--repo {}: not a git repository (run `git init` there, or leave --repo out to \
             run in the workspace without git)",
            repo.display()
        );
    }
    if let Some(worktrees) = &worktrees
        && !worktrees.has_base().await
    {
        anyhow::bail!(
            "the git repository {} has no commit yet, so there is nothing to start the \
             feature branch from: commit something first (e.g. `git commit --allow-empty -m \
             start`)",
            worktrees.top().display()
        );
    }
    Ok(worktrees)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(landlock: LandlockState) -> impl FnOnce() -> ConfinementReport {
        move || ConfinementReport {
            landlock,
            abi: None,
            problems: vec!["the kernel does not enforce Landlock".to_owned()],
        }
    }

    #[test]
    fn required_confinement_without_landlock_stops_the_run_saying_why() {
        let error = confinement_warning(Confinement::Required, kernel(LandlockState::Unavailable))
            .unwrap_err();
        assert!(
            error.contains("does not enforce Landlock") && error.contains("best-effort"),
            "{error}"
        );
    }

    #[test]
    fn best_effort_confinement_without_landlock_warns() {
        let warning =
            confinement_warning(Confinement::BestEffort, kernel(LandlockState::Unavailable));
        assert!(warning.unwrap().unwrap().contains("not fully confined"));
    }

    #[test]
    fn a_kernel_enforcing_landlock_needs_no_warning() {
        let warning = confinement_warning(Confinement::Required, kernel(LandlockState::Enforced));
        assert_eq!(warning, Ok(None));
    }
    use crate::engine::dag::FeatureOutcome;

    const EXE: &str = "/bin/r";

    #[test]
    fn a_leading_ralph_in_the_agent_command_is_this_binary() {
        let command = agent_command(
            "ralph agent script 'my script.yaml'",
            Path::new(EXE),
            Path::new("/nonexistent"),
        )
        .expect("valid");
        assert_eq!(command, [EXE, "agent", "script", "my script.yaml"]);
    }

    #[test]
    fn another_agent_command_is_kept_as_split() {
        let command =
            agent_command("claude-agent-acp --x", Path::new(EXE), Path::new("/")).expect("valid");
        assert_eq!(command, ["claude-agent-acp", "--x"]);
    }

    #[test]
    fn agent_arguments_naming_files_here_become_absolute() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("script.yaml"), "").expect("write");
        let command = agent_command("ralph agent script script.yaml", Path::new(EXE), dir.path())
            .expect("valid");
        let expected = dir.path().join("script.yaml").display().to_string();
        assert_eq!(command, [EXE, "agent", "script", expected.as_str()]);
    }

    #[test]
    fn an_unbalanced_quote_in_the_agent_command_is_an_error() {
        let error =
            agent_command("agent 'oops", Path::new(EXE), Path::new("/")).expect_err("invalid");
        assert!(error.to_string().contains("--agent"), "{error}");
    }

    #[test]
    fn outcomes_map_to_the_documented_exit_codes() {
        let finished = |outcome| RunOutcome::Finished {
            outcome,
            message: String::new(),
        };
        let codes: Vec<u8> = [
            finished(FeatureOutcome::Complete),
            finished(FeatureOutcome::Failed),
            finished(FeatureOutcome::Blocked),
            finished(FeatureOutcome::LimitReached),
            finished(FeatureOutcome::NoPlan),
            RunOutcome::Halted {
                reason: String::new(),
            },
            RunOutcome::Interrupted,
        ]
        .iter()
        .map(|o| exit(o).code())
        .collect();
        assert_eq!(codes, [0, 1, 4, 5, 6, 7, 130]);
    }
}
