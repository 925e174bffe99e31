//! `ralph reset`: start a Feature's local run over.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};

use crate::cli::status::StateArgs;
use crate::local::store::{DATABASE_FILE, Store, keys};
use crate::local::{process, worktree};

/// Options of `ralph reset`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    state: StateArgs,
}

/// Runs `ralph reset`: removes the run's worktrees and its state; the feature branch stays.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = args.state.dir()?;
    let store = Store::open_existing(&dir)?;
    if let Some(owner) = store.meta(keys::RUN_OWNER)?
        && process::token_alive(&owner)
    {
        bail!(
            "a `ralph run` (process {owner}) is working on {}; stop it before the reset",
            dir.display()
        );
    }
    let feature = store
        .feature()?
        .map_or_else(|| "?".to_owned(), |feature| feature.name);
    drop(store);
    for dir in remove_worktrees(&dir).await? {
        println!("removed the worktree {}", dir.display());
    }
    remove_state(&dir)?;
    println!(
        "feature {feature}: state in {} removed; the next `ralph run` starts every task over \
         (a git branch ralph/{feature} is kept)",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Removes every task's worktrees under the state directory `dir`.
async fn remove_worktrees(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let Ok(tasks) = std::fs::read_dir(worktree::root(dir)) else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for task in tasks.flatten() {
        let name = task.file_name().to_string_lossy().into_owned();
        removed.extend(
            worktree::remove_kept(dir, &name)
                .await
                .map_err(anyhow::Error::msg)?,
        );
    }
    Ok(removed)
}

/// Removes the database and the run's files from `dir`, and `dir` when nothing else is
/// left in it (a `.ralph/` of an older ralph also holds other Features' directories).
fn remove_state(dir: &Path) -> anyhow::Result<()> {
    let remove = |path: &Path| -> std::io::Result<()> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    };
    let entries = [
        "attempts".to_owned(),
        "worktrees".to_owned(),
        format!("{DATABASE_FILE}-wal"),
        format!("{DATABASE_FILE}-shm"),
        DATABASE_FILE.to_owned(),
    ];
    for entry in entries {
        let path = dir.join(entry);
        remove(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    // Not empty: other Features' states live in it.
    let _ = std::fs::remove_dir(dir);
    Ok(())
}
