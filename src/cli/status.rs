//! `ralph status`: the state of a local run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

use crate::local::state_dir;
use crate::local::status_view::{Counts, StatusView, render_status, task_lines};
use crate::local::store::{Store, keys};

/// Which local state to read: `--state DIR`, or the Feature's `.ralph/<feature>/` next to
/// FILE, or the run found at or below the current directory.
#[derive(Debug, clap::Args)]
pub struct StateArgs {
    /// The state directory of the run.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// The feature manifest the run was started with (its state is `.ralph/<feature>/`
    /// beside it).
    #[arg(value_name = "FILE", conflicts_with = "state")]
    pub file: Option<PathBuf>,
    /// Which feature, when FILE (or the current directory) holds several.
    #[arg(long, value_name = "NAME", conflicts_with = "state")]
    pub feature: Option<String>,
}

/// The runs [`StateArgs`] name: one, or several found below the current directory.
#[derive(Debug)]
pub enum Located {
    /// The state directory of one run.
    One(PathBuf),
    /// Several runs found and none chosen.
    Several(Vec<PathBuf>),
}

impl StateArgs {
    /// The state directory, or every run found when none was named and there are several.
    pub fn locate(&self) -> anyhow::Result<Located> {
        if let Some(state) = &self.state {
            return Ok(Located::One(state.clone()));
        }
        if let Some(file) = &self.file {
            return self.of_manifest(file).map(Located::One);
        }
        let here = std::env::current_dir().context("cannot read the current directory")?;
        let runs: Vec<PathBuf> = state_dir::find_runs(Path::new("."))
            .into_iter()
            .filter(|dir| self.feature.as_ref().is_none_or(|name| dir.ends_with(name)))
            .collect();
        match runs.as_slice() {
            [] => bail!(
                "no local run at or below {}{}: start one with `ralph run FILE`, or name it \
                 with FILE or --state DIR",
                here.display(),
                self.feature
                    .as_ref()
                    .map(|name| format!(" for feature {name:?}"))
                    .unwrap_or_default()
            ),
            [only] => Ok(Located::One(only.clone())),
            _ => Ok(Located::Several(runs)),
        }
    }

    /// The state directory of one run; several found is an error that lists them.
    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        match self.locate()? {
            Located::One(dir) => Ok(dir),
            Located::Several(runs) => bail!(
                "several runs here; name one with FILE, --feature NAME or --state DIR:\n{}",
                runs.iter()
                    .map(|dir| format!("  {}", dir.display()))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }

    /// Opens the existing state.
    pub fn open(&self) -> anyhow::Result<Store> {
        Ok(Store::open_existing(&self.dir()?)?)
    }

    /// The state directory of the Feature of `file` (chosen with `--feature` when the file
    /// holds several), which must have run.
    fn of_manifest(&self, file: &Path) -> anyhow::Result<PathBuf> {
        let name = feature_of(file, self.feature.as_deref())?;
        let dir = state_dir::resolve(None, file, &name);
        if state_dir::holds_state(&dir) {
            return Ok(dir);
        }
        let root = state_dir::root_beside(file);
        let legacy = state_dir::legacy_store(&root)
            .map(|_| {
                format!(
                    "; an older ralph kept one state for the whole directory in {} \
                     (read it with --state {})",
                    root.display(),
                    root.display()
                )
            })
            .unwrap_or_default();
        bail!(
            "feature {name} of {} has not run yet (no state in {}): `ralph run {}` starts \
             it{legacy}",
            file.display(),
            dir.display(),
            file.display()
        )
    }
}

/// The name of the Feature of manifest `file`: its only one, or `wanted`.
pub(crate) fn feature_of(file: &Path, wanted: Option<&str>) -> anyhow::Result<String> {
    let options = crate::manifest::LoadOptions {
        agent_from_command_line: true,
        local: true,
    };
    let plan = crate::manifest::load_plan_with(&[file], &options)
        .map_err(|errors| anyhow::anyhow!("{} is not a valid plan:\n{errors}", file.display()))?;
    let names: Vec<String> = plan.features.iter().map(|f| f.name()).collect();
    match (wanted, names.as_slice()) {
        (Some(name), _) if names.iter().any(|n| n == name) => Ok(name.to_owned()),
        (Some(name), _) => bail!(
            "{} has no feature {name:?} (it has: {})",
            file.display(),
            names.join(", ")
        ),
        (None, [only]) => Ok(only.clone()),
        (None, []) => bail!("{} holds no Feature", file.display()),
        (None, _) => bail!(
            "{} holds several features ({}); choose one with --feature",
            file.display(),
            names.join(", ")
        ),
    }
}

/// Options of `ralph status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    state: StateArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

use crate::clock::now_ms;

/// Runs `ralph status`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = match args.state.locate()? {
        Located::One(dir) => dir,
        Located::Several(runs) => return list_runs(&runs, args.json),
    };
    let store = Store::open_existing(&dir)?;
    let view = status_view(&store)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print!("{}", render_status(&view, now_ms()));
        if let Some(line) = planning_line(&store)? {
            println!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where planning stands (docs/planning.md), for a run that planned.
fn planning_line(store: &Store) -> anyhow::Result<Option<String>> {
    let state = crate::local::planning::load(store)?;
    if state.attempts == 0 {
        return Ok(None);
    }
    let status = state.status();
    let plan = match (&status.dag_hash, status.approval.as_ref().map(|a| a.state)) {
        (Some(hash), Some(crate::api::planning::ApprovalState::Approved)) => {
            format!("plan {hash} ({} tasks), approved", status.tasks)
        }
        (Some(hash), _) => format!(
            "plan {hash} ({} tasks) waiting for approval (`ralph plan show`)",
            status.tasks
        ),
        (None, _) => "no valid plan yet".to_owned(),
    };
    Ok(Some(format!(
        "planning: {plan}; {} planning attempts, {} re-plans",
        status.attempts, status.replans
    )))
}

/// What `ralph status` shows of the run in `store`.
fn status_view(store: &Store) -> anyhow::Result<StatusView> {
    let tasks = store.tasks()?;
    let claims = store.claims()?;
    let attempts = store.attempts(None)?;
    let feature = store
        .feature()?
        .context("the state has no feature recorded")?;
    Ok(StatusView {
        feature: feature.name,
        outcome: match store.meta(keys::RUN_OWNER)? {
            Some(owner) if crate::local::process::token_alive(&owner) => {
                Some(format!("Running (ralph run {owner})"))
            }
            _ => store.meta(keys::OUTCOME)?,
        },
        stopped: store.meta(keys::STOPPED)?,
        counts: Counts::of(&tasks),
        tasks: task_lines(
            &tasks,
            &claims,
            &attempts,
            &crate::local::planning::load(store)?,
        ),
        usage: crate::local::budget::attempt_totals(&attempts),
        tokens_unreported: crate::local::budget::tokens_unreported(&attempts),
        budget: Some(feature.budget).filter(|b| !b.is_unlimited()),
    })
}

/// `ralph status` with several runs found: one line per run.
fn list_runs(runs: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    let mut views = Vec::new();
    for dir in runs {
        views.push((dir, status_view(&Store::open_existing(dir)?)?));
    }
    if json {
        let list: Vec<serde_json::Value> = views
            .iter()
            .map(|(dir, view)| serde_json::json!({"state": dir, "status": view}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} runs here (`ralph status FILE`, `--feature NAME` or `--state DIR` shows one):",
        views.len()
    );
    for (dir, view) in views {
        println!(
            "  feature {}: {} ({} of {} done) in {}",
            view.feature,
            view.outcome.as_deref().unwrap_or("not finished"),
            view.counts.done,
            view.counts.total,
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
