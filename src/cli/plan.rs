//! `ralph plan`: check a planner's answer, show a local run's plan, approve or reject it
//! (docs/planning.md); and the planning step of `ralph run`.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use super::exit::Exit;
use super::plan_cluster;
use super::status::StateArgs;
use crate::api::planning::{DEFAULT_MAX_PLANNED_TASKS, Replan};
use crate::clock::now_ms;
use crate::engine::dag::TaskPhase;
use crate::engine::planning::hash_matches;
use crate::local::display::Display;
use crate::local::executor::RunnerCommand;
use crate::local::feature::LocalFeature;
use crate::local::planning::{self, Approved, Planned, PlanningRun};
use crate::local::run_event::RunEvent;
use crate::local::status_view::Counts;
use crate::local::store::Store;
use crate::manifest::FeatureManifest;
use crate::manifest::answer::{AnswerLimits, check_answer};

/// Subcommands of `ralph plan`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check a planner's answer (a YAML task list) exactly as `ralph run` will, printing
    /// every problem; exit 0 when it is valid, 3 when not.
    Check {
        /// The answer file.
        #[arg(value_name = "ANSWER")]
        file: PathBuf,
        /// The Feature manifest: its hand-written tasks and `spec.planning.maxTasks` apply.
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Which feature of the manifest, when it holds several.
        #[arg(long, value_name = "NAME", requires = "manifest")]
        feature: Option<String>,
        /// Most tasks (default: the manifest's maxTasks, else 100).
        #[arg(long, value_name = "N")]
        max_tasks: Option<u32>,
    },
    /// Print the plan (its document and its DAG) with its hash: of a local run, or of a
    /// Feature in the cluster given as `feature/NAME` in place of FILE.
    Show {
        #[command(flatten)]
        state: StateArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Print `status.planning` and the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve the plan waiting for approval; with --hash only that plan (a stale hash
    /// changes nothing). The next `ralph run` runs its tasks; for `feature/NAME`, the
    /// controller creates them.
    Approve {
        #[command(flatten)]
        state: StateArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The plan's hash (or its first 6 or more digits), as `ralph plan show` prints it.
        #[arg(long, value_name = "HASH")]
        hash: Option<String>,
        /// On a terminal: approve without showing the plan and asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Reject the plan waiting for approval: the planner plans again (the next `ralph run`,
    /// or the controller for `feature/NAME`), with the comment in its prompt.
    Reject {
        #[command(flatten)]
        state: StateArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Why, for the planner.
        #[arg(long, value_name = "TEXT")]
        comment: String,
    },
}

/// Where a Feature given as `feature/NAME` is.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The namespace of `feature/NAME` (default: the kubeconfig context's).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// The Feature in the cluster the arguments name, connected; `None` for a local run.
async fn cluster_target(
    state: &StateArgs,
    cluster: ClusterArgs,
) -> anyhow::Result<Option<plan_cluster::Target>> {
    let Some(name) = plan_cluster::feature_name(state.file.as_deref()) else {
        if cluster.namespace.is_some() {
            anyhow::bail!(
                "-n/--namespace is for a Feature in the cluster: name it as feature/NAME \
                 (e.g. `ralph plan show feature/NAME -n NAMESPACE`)"
            );
        }
        return Ok(None);
    };
    if state.feature.is_some() {
        anyhow::bail!("--feature is for a manifest FILE; feature/{name} names the Feature already");
    }
    plan_cluster::Target::connect(name, cluster.namespace)
        .await
        .map(Some)
}

/// Runs `ralph plan`.
pub(crate) async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check {
            file,
            manifest,
            feature,
            max_tasks,
        } => check(&file, manifest.as_deref(), feature.as_deref(), max_tasks),
        Command::Show {
            state,
            cluster,
            json,
        } => match cluster_target(&state, cluster).await? {
            Some(target) => plan_cluster::show(&target, json).await,
            None => show(&state.open()?, json),
        },
        Command::Approve {
            state,
            cluster,
            hash,
            yes,
        } => match cluster_target(&state, cluster).await? {
            Some(target) => {
                let ask = !yes && interactive(false);
                plan_cluster::approve(&target, hash.as_deref(), ask).await
            }
            None => approve_local(&state, hash.as_deref(), yes),
        },
        Command::Reject {
            state,
            cluster,
            comment,
        } => match cluster_target(&state, cluster).await? {
            Some(target) => plan_cluster::reject(&target, &comment).await,
            None => reject_local(&state, &comment),
        },
    }
}

/// `ralph plan approve FILE`: approves the plan in the run's store.
fn approve_local(state: &StateArgs, hash: Option<&str>, yes: bool) -> anyhow::Result<ExitCode> {
    let mut store = state.open()?;
    let mut plan_state = planning::load(&store)?;
    if !yes
        && interactive(false)
        && let Some(plan) = plan_state.awaiting_approval()
        && hash.is_none_or(|given| hash_matches(given, &plan.hash))
    {
        let question = format!("Approve plan {}?", plan.hash);
        if !confirm(
            &planning::render_plan(plan, &others(&store, plan)?),
            &question,
        )? {
            eprintln!("nothing approved");
            return Ok(ExitCode::from(1));
        }
    }
    let outcome = planning::approve(&mut plan_state, hash, &who(), now());
    let code = match &outcome {
        Approved::Now(hash) => {
            planning::save(&mut store, &plan_state)?;
            println!("approved plan {hash}; `ralph run` runs its tasks");
            0
        }
        Approved::Already(hash) => {
            println!("plan {hash} was approved already");
            0
        }
        Approved::Stale { given, current } => {
            eprintln!(
                "error: {given} is not the current plan ({current}): nothing approved; \
                 `ralph plan show` prints the current one"
            );
            1
        }
        Approved::NoPlan => {
            eprintln!("error: there is no plan to approve: `ralph run` plans first");
            1
        }
    };
    Ok(ExitCode::from(code))
}

/// `ralph plan reject FILE`: rejects the plan in the run's store.
fn reject_local(state: &StateArgs, comment: &str) -> anyhow::Result<ExitCode> {
    let mut store = state.open()?;
    let mut plan_state = planning::load(&store)?;
    match planning::reject(&mut plan_state, comment, &who(), now()) {
        Some(hash) => {
            planning::save(&mut store, &plan_state)?;
            println!("rejected plan {hash}; the next `ralph run` plans again with your comment");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("error: no plan waits for approval: nothing rejected");
            Ok(ExitCode::from(1))
        }
    }
}

fn now() -> String {
    planning::rfc3339(now_ms())
}

/// Who approves: the user's login name.
fn who() -> String {
    std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned())
}

fn check(
    file: &Path,
    manifest: Option<&Path>,
    feature: Option<&str>,
    max_tasks: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the answer {}", file.display()))?;
    let (existing, manifest_max) = match manifest {
        None => (Vec::new(), None),
        Some(manifest) => {
            let name = super::status::feature_of(manifest, feature)?;
            let options = crate::manifest::LoadOptions {
                agent_from_command_line: true,
                local: true,
            };
            let plan = crate::manifest::load_plan_with(&[manifest], &options)
                .map_err(|e| anyhow::anyhow!("{} is not a valid plan:\n{e}", manifest.display()))?;
            let chosen = plan.features.iter().find(|f| f.name() == name);
            let tasks = chosen.map(hand_written).unwrap_or_default();
            let max = chosen.and_then(|f| f.feature.spec.planning.as_ref().map(|p| p.max_tasks));
            (tasks, max)
        }
    };
    let limits = AnswerLimits {
        max_tasks: max_tasks
            .or(manifest_max)
            .unwrap_or(DEFAULT_MAX_PLANNED_TASKS),
        existing: &existing,
    };
    match check_answer(&text, limits) {
        Ok(answer) => {
            let plan = planning::StoredPlan::new(answer, None);
            println!(
                "{}: valid, {} tasks (plan {} without a document)",
                file.display(),
                plan.answer.tasks.len(),
                plan.hash
            );
            Ok(Exit::Complete.into())
        }
        Err(problems) => {
            eprintln!(
                "{}: {} {}:\n{}",
                file.display(),
                problems.0.len(),
                if problems.0.len() == 1 {
                    "problem"
                } else {
                    "problems"
                },
                problems
                    .messages()
                    .iter()
                    .map(|p| format!("  {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            Ok(Exit::InvalidInput.into())
        }
    }
}

/// The hand-written tasks of a manifest's feature, as local templates.
fn hand_written(plan: &FeatureManifest) -> Vec<crate::api::TaskTemplate> {
    plan.tasks
        .iter()
        .map(|task| crate::api::TaskTemplate {
            name: task.id.clone(),
            fields: task.fields.clone(),
        })
        .collect()
}

/// The Feature's tasks that `plan` does not hold (the hand-written ones).
fn others(
    store: &Store,
    plan: &planning::StoredPlan,
) -> anyhow::Result<Vec<crate::api::TaskTemplate>> {
    let planned: Vec<&str> = plan.answer.tasks.iter().map(|t| t.name.as_str()).collect();
    Ok(store
        .feature()?
        .map(|f| f.tasks)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !planned.contains(&t.name.as_str()))
        .collect())
}

fn show(store: &Store, json: bool) -> anyhow::Result<ExitCode> {
    let state = planning::load(store)?;
    if json {
        let value = serde_json::json!({
            "status": state.status(),
            "plan": state.plan.as_ref().map(|p| &p.answer),
            "document": state.plan.as_ref().and_then(|p| p.document.as_ref()),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(plan) = &state.plan else {
        println!(
            "no plan yet{}",
            state
                .rejection
                .as_ref()
                .map(|c| format!(" (the last one was rejected: {c})"))
                .unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    };
    let planned: Vec<&str> = plan.answer.tasks.iter().map(|t| t.name.as_str()).collect();
    let others = others(store, plan)?;
    let phases = store
        .tasks()?
        .iter()
        .filter(|t| planned.contains(&t.name()))
        .map(|t| (t.name().to_owned(), t.phase))
        .collect();
    print!(
        "{}",
        planning::render_plan_with_phases(plan, &others, &phases)
    );
    let approval = match state.approval.as_ref().map(|a| a.state) {
        Some(crate::api::planning::ApprovalState::Approved) => "approved".to_owned(),
        _ => format!(
            "waiting for approval: `ralph plan approve --hash {}` or `ralph plan reject \
             --comment TEXT`",
            plan.hash
        ),
    };
    println!("\n{approval}");
    Ok(ExitCode::SUCCESS)
}

/// What `ralph run` needs to plan.
pub(crate) struct RunPlanning<'a> {
    /// The manifest.
    pub file: &'a Path,
    /// The Feature as read.
    pub chosen: &'a FeatureManifest,
    /// The `ralph` binary.
    pub exe: &'a Path,
    /// How runners start.
    pub runner: &'a RunnerCommand,
    /// Where the planner works: the repository's top, or the workspace.
    pub workdir: PathBuf,
    /// Whether a person can answer a y/n question.
    pub interactive: bool,
}

/// `feature` with the tasks of the plan the store holds, approved (before the store syncs
/// with the manifest, so planned tasks are kept); as it is when `chosen` no longer plans.
pub(crate) fn with_kept_plan(
    store: &Store,
    chosen: &FeatureManifest,
    feature: LocalFeature,
) -> anyhow::Result<LocalFeature> {
    if chosen.feature.spec.planning.is_none() {
        return Ok(feature);
    }
    Ok(planning::with_plan(feature, &planning::load(store)?))
}

/// The planning step of `ralph run`: without `spec.planning`, `feature` as it is; else
/// plans (or takes the plan kept), asks for approval on a terminal, syncs the store with
/// the planned tasks and says so. `Err(exit)` when the run stops here (said on the display).
pub(crate) async fn for_run(
    run: &RunPlanning<'_>,
    store: &mut Store,
    feature: LocalFeature,
    display: &mut Display,
) -> anyhow::Result<Result<LocalFeature, Exit>> {
    let Some(spec) = &run.chosen.feature.spec.planning else {
        return Ok(Ok(feature));
    };
    if let Some(problem) = planning::planning_problem(&feature, spec) {
        return stop(display, problem, Exit::InvalidInput);
    }
    let base = base_feature(run, &feature);
    let planning_run = planning_run(run, spec, &feature);
    loop {
        match planning::plan(store, &base, &planning_run, display).await? {
            Planned::Run(planned) => return Ok(Ok(apply(store, *planned, display)?)),
            Planned::AwaitingApproval(plan) => {
                if run.interactive && display.suspend(|| ask(&plan, &base))? {
                    let mut state = planning::load(store)?;
                    planning::approve(&mut state, Some(&plan.hash), &who(), now());
                    planning::save(store, &state)?;
                    continue;
                }
                return stop(display, awaiting(run.file, &plan), Exit::AwaitingApproval);
            }
            Planned::Stopped { message, stop: why } => {
                return stop(display, message, stopped_exit(why));
            }
        }
    }
}

/// The run stops here, saying why.
fn stop(
    display: &mut Display,
    message: String,
    exit: Exit,
) -> anyhow::Result<Result<LocalFeature, Exit>> {
    display.show(&RunEvent::Finished {
        outcome: None,
        message,
    });
    Ok(Err(exit))
}

fn stopped_exit(stop: planning::Stop) -> Exit {
    match stop {
        planning::Stop::Failed => Exit::Failed,
        planning::Stop::Halted => Exit::AgentMisconfigured,
        planning::Stop::Limit => Exit::LimitReached,
    }
}

/// What a run stopped for approval says.
fn awaiting(file: &Path, plan: &planning::StoredPlan) -> String {
    let file = file.display();
    format!(
        "waiting for approval: the plan {} ({} tasks) needs a person \
         (spec.planning.approval: Manual). `ralph plan show {file}` prints it; \
         `ralph plan approve {file} --hash {}` approves it, `ralph plan reject \
         {file} --comment TEXT` plans again; then `ralph run {file}` goes on",
        plan.hash,
        plan.answer.tasks.len(),
        plan.hash
    )
}

/// The store takes the tasks of `planned`; when they are a revision's, its Failed and
/// Blocked tasks get another chance (the revision replaced what made them fail).
fn apply(
    store: &mut Store,
    planned: LocalFeature,
    display: &mut Display,
) -> anyhow::Result<LocalFeature> {
    let report = store.sync(&planned, now_ms())?;
    let mut state = planning::load(store)?;
    let running = state.running().map(|plan| plan.hash.clone());
    if running != state.applied {
        if state.retry_failed {
            for task in store.tasks()? {
                if matches!(task.phase, TaskPhase::Failed | TaskPhase::Blocked) {
                    store.retry_task(task.name(), now_ms())?;
                }
            }
        }
        state.applied = running;
        state.retry_failed = false;
        planning::save(store, &state)?;
    }
    if !report.added.is_empty() || !report.removed.is_empty() {
        let tasks = store.tasks()?;
        display.show(&RunEvent::Plan {
            feature: planned.name.clone(),
            total: tasks.len(),
            done: Counts::of(&tasks).done,
            added: report.added,
            edited: report.edited,
            removed: report.removed,
        });
    }
    Ok(planned)
}

/// After the run loop: with `replan: OnFailure`, a Feature that failed because a planned
/// task failed for good is re-planned (its pending part) and run again. `None`: the run is
/// over as it ended; `Some(Ok(feature))`: run `feature`; `Some(Err(exit))`: stop.
pub(crate) async fn after_run(
    run: &RunPlanning<'_>,
    store: &mut Store,
    feature: &LocalFeature,
    outcome: &crate::local::scheduler::RunOutcome,
    display: &mut Display,
) -> anyhow::Result<Option<Result<LocalFeature, Exit>>> {
    let Some(spec) = &run.chosen.feature.spec.planning else {
        return Ok(None);
    };
    if !matches!(
        outcome,
        crate::local::scheduler::RunOutcome::Finished { .. }
    ) {
        return Ok(None);
    }
    if let Some(next) = proposed(run, store, feature, spec, display)? {
        return Ok(Some(next));
    }
    let failed = matches!(
        outcome,
        crate::local::scheduler::RunOutcome::Finished {
            outcome: crate::engine::dag::FeatureOutcome::Failed,
            ..
        }
    );
    if spec.replan != Replan::OnFailure || !failed {
        return Ok(None);
    }
    let Some(failure) = failure(store)? else {
        return Ok(None);
    };
    let done: Vec<String> = store
        .tasks()?
        .iter()
        .filter(|t| t.phase == TaskPhase::Done)
        .map(|t| t.name().to_owned())
        .collect();
    let base = base_feature(run, feature);
    let planning_run = planning_run(run, spec, feature);
    let revised = planning::replan(store, &base, &planning_run, &failure, &done, display).await?;
    Ok(match revised {
        None => None,
        Some(Planned::Run(planned)) => Some(Ok(apply(store, *planned, display)?)),
        Some(Planned::AwaitingApproval(plan)) => Some(stop(
            display,
            awaiting(run.file, &plan),
            Exit::AwaitingApproval,
        )?),
        Some(Planned::Stopped { message, stop: why }) => {
            Some(stop(display, message, stopped_exit(why))?)
        }
    })
}

/// Tasks proposed by done attempts (`<ralph:propose-tasks>`): refused ones are said;
/// accepted ones extend the plan, which runs at once or waits for approval. `None` when
/// nothing was proposed.
fn proposed(
    run: &RunPlanning<'_>,
    store: &mut Store,
    feature: &LocalFeature,
    spec: &crate::api::planning::PlanningSpec,
    display: &mut Display,
) -> anyhow::Result<Option<Result<LocalFeature, Exit>>> {
    let mut state = planning::load(store)?;
    let planned = state.running().map_or(0, |plan| plan.answer.tasks.len());
    let room = spec
        .max_tasks
        .saturating_sub(u32::try_from(planned).unwrap_or(u32::MAX));
    let proposals = planning::proposals::take(store, &mut state, &feature.tasks, room)?;
    for (task, problems) in &proposals.refused {
        display.show(&RunEvent::Warning {
            task: Some(task.clone()),
            message: format!(
                "its proposed follow-up tasks were refused: {}",
                problems.join("; ")
            ),
        });
    }
    let accepted = !proposals.tasks.is_empty()
        && planning::extend(&mut state, proposals.tasks, spec.approval, now()).is_some();
    planning::save(store, &state)?;
    if !accepted {
        return Ok(None);
    }
    let base = base_feature(run, feature);
    Ok(Some(match state.approved() {
        Some(_) => Ok(apply(store, planning::with_plan(base, &state), display)?),
        None => match &state.plan {
            Some(plan) => stop(display, awaiting(run.file, plan), Exit::AwaitingApproval)?,
            None => return Ok(None),
        },
    }))
}

/// The first planned task that failed for good: its last attempt's message and journal.
fn failure(store: &Store) -> anyhow::Result<Option<planning::Failure>> {
    let state = planning::load(store)?;
    let planned: Vec<&str> = state
        .running()
        .map(|plan| plan.answer.tasks.iter().map(|t| t.name.as_str()).collect())
        .unwrap_or_default();
    let tasks = store.tasks()?;
    let Some(failed) = tasks
        .iter()
        .find(|t| t.phase == TaskPhase::Failed && planned.contains(&t.name()))
    else {
        return Ok(None);
    };
    let message = store
        .attempts(Some(failed.name()))?
        .last()
        .and_then(|a| a.details.message.clone().or_else(|| a.outcome.clone()))
        .unwrap_or_default();
    let journal = store
        .journal(Some(failed.name()))?
        .iter()
        .map(crate::engine::planning::journal_line)
        .collect();
    Ok(Some(planning::Failure {
        task: failed.name().to_owned(),
        message,
        journal,
    }))
}

/// `feature` with its hand-written tasks only, and its own `context.plan`.
fn base_feature(run: &RunPlanning<'_>, feature: &LocalFeature) -> LocalFeature {
    let hand_written: Vec<_> = run.chosen.tasks.iter().map(|t| t.id.clone()).collect();
    LocalFeature {
        tasks: feature
            .tasks
            .iter()
            .filter(|t| hand_written.contains(&t.name))
            .cloned()
            .collect(),
        plan_text: run
            .chosen
            .feature
            .spec
            .context
            .plan
            .as_ref()
            .and_then(|text| text.inline.clone()),
        ..feature.clone()
    }
}

/// What planning attempts of this run need.
fn planning_run<'a>(
    run: &RunPlanning<'a>,
    spec: &'a crate::api::planning::PlanningSpec,
    feature: &LocalFeature,
) -> PlanningRun<'a> {
    PlanningRun {
        spec,
        runner: run.runner,
        repository: planning::repository_files(&run.workdir),
        check_command: format!(
            "{} plan check --manifest {} --feature {}",
            run.exe.display(),
            absolute(run.file).display(),
            feature.name
        ),
        workdir: run.workdir.clone(),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Shows the plan on the terminal and asks whether to run it.
fn ask(plan: &planning::StoredPlan, base: &LocalFeature) -> anyhow::Result<bool> {
    let question = format!("Run this plan ({})?", plan.hash);
    confirm(&planning::render_plan(plan, &base.tasks), &question)
}

/// Shows a rendered plan on stderr and asks `question` (y/N).
pub(super) fn confirm(rendered: &str, question: &str) -> anyhow::Result<bool> {
    let mut err = std::io::stderr();
    write!(err, "{rendered}")?;
    write!(err, "\n{question} [y/N] ")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// Whether `ralph run` may ask a person (stdin and stderr are terminals, no `--json`).
pub(crate) fn interactive(json: bool) -> bool {
    !json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}
