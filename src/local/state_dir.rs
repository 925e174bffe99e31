//! Where a local run keeps its state: `--state DIR`, else `.ralph/` next to the manifest,
//! else `.ralph/` in the current directory.

use std::path::{Path, PathBuf};

/// Name of the default state directory.
pub const DEFAULT_STATE_DIR: &str = ".ralph";

/// The state directory for an explicit `--state`, or next to `manifest`, or in the current
/// directory.
pub fn resolve(state: Option<&Path>, manifest: Option<&Path>) -> PathBuf {
    if let Some(state) = state {
        return state.to_path_buf();
    }
    let base = manifest
        .and_then(Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    base.join(DEFAULT_STATE_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_state_directory_wins() {
        let dir = resolve(Some(Path::new("/s")), Some(Path::new("/m/f.yaml")));
        assert_eq!(dir, PathBuf::from("/s"));
    }

    #[test]
    fn the_default_is_next_to_the_manifest() {
        let dir = resolve(None, Some(Path::new("config/samples/hello.yaml")));
        assert_eq!(dir, PathBuf::from("config/samples/.ralph"));
    }

    #[test]
    fn a_manifest_in_the_current_directory_keeps_state_here() {
        assert_eq!(
            resolve(None, Some(Path::new("f.yaml"))),
            PathBuf::from("./.ralph")
        );
        assert_eq!(resolve(None, None), PathBuf::from("./.ralph"));
    }
}
