//! Where a local run keeps its state: `--state DIR`, else `.ralph/<feature>/` next to the
//! manifest. Each Feature has a directory of its own, so manifests that share a directory
//! never share (or overwrite) each other's state.

use std::path::{Path, PathBuf};

use super::store::DATABASE_FILE;

/// Name of the directory beside a manifest that holds the state of its Features.
pub(crate) const DEFAULT_STATE_DIR: &str = ".ralph";

/// How deep below the current directory `ralph status` looks for runs.
const SEARCH_DEPTH: usize = 4;

/// Directories never searched for runs: build output, packages, git's own.
const NOT_SEARCHED: [&str; 3] = ["target", "node_modules", ".git"];

/// The `.ralph/` directory beside `manifest`.
pub(crate) fn root_beside(manifest: &Path) -> PathBuf {
    manifest
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(DEFAULT_STATE_DIR)
}

/// The state directory of `feature` run from `manifest`: an explicit `--state`, or
/// `.ralph/<feature>/` beside the manifest.
pub(crate) fn resolve(state: Option<&Path>, manifest: &Path, feature: &str) -> PathBuf {
    match state {
        Some(state) => state.to_path_buf(),
        None => root_beside(manifest).join(feature),
    }
}

/// The store an older ralph kept directly in `root` (one state per directory), if any.
pub(crate) fn legacy_store(root: &Path) -> Option<PathBuf> {
    Some(root.join(DATABASE_FILE)).filter(|db| db.is_file())
}

/// Whether `dir` holds a run's state.
pub(crate) fn holds_state(dir: &Path) -> bool {
    dir.join(DATABASE_FILE).is_file()
}

/// The state directories of the runs whose manifests lie at or below `dir` (a few levels
/// deep), sorted: every `.ralph/<feature>/` and a `.ralph/` an older ralph left.
pub(crate) fn find_runs(dir: &Path) -> Vec<PathBuf> {
    let mut runs = Vec::new();
    search(dir, SEARCH_DEPTH, &mut runs);
    runs.sort();
    runs
}

fn search(dir: &Path, depth: usize, runs: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == DEFAULT_STATE_DIR {
            runs.extend(legacy_store(&path).map(|_| path.clone()));
            runs.extend(features_in(&path));
        } else if depth > 0 && !name.starts_with('.') && !NOT_SEARCHED.contains(&name.as_ref()) {
            search(&path, depth - 1, runs);
        }
    }
}

/// The Feature state directories in a `.ralph/` directory.
fn features_in(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| holds_state(path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_state_directory_wins() {
        let dir = resolve(Some(Path::new("/s")), Path::new("/m/f.yaml"), "f");
        assert_eq!(dir, PathBuf::from("/s"));
    }

    #[test]
    fn the_default_is_the_features_directory_next_to_the_manifest() {
        let dir = resolve(None, Path::new("config/samples/hello.yaml"), "hello");
        assert_eq!(dir, PathBuf::from("config/samples/.ralph/hello"));
    }

    #[test]
    fn a_manifest_in_the_current_directory_keeps_state_here() {
        assert_eq!(
            resolve(None, Path::new("f.yaml"), "f"),
            PathBuf::from("./.ralph/f")
        );
    }
}
