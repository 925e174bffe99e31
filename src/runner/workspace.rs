//! Confining the agent's file access to the workspace: relative paths are taken from the
//! workspace, `..` cannot climb out of it, and symlinks that lead out are refused.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// The path leads outside the workspace (directly, through `..`, or through a symlink).
    #[error("{path} is outside the workspace {workspace}")]
    Outside {
        /// The path as the agent gave it.
        path: PathBuf,
        /// The workspace root.
        workspace: PathBuf,
    },
    /// The path could not be resolved.
    #[error("{path}: {source}")]
    Io {
        /// The path as the agent gave it.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// The workspace root, canonicalized once.
#[derive(Clone, Debug)]
pub(crate) struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Resolves the workspace directory (it must exist).
    pub(crate) fn new(dir: &Path) -> io::Result<Self> {
        let root = dir.canonicalize()?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        Ok(Self { root })
    }

    /// Checks that files can be created in the workspace (creates and removes a probe file).
    pub(crate) fn check_writable(&self) -> io::Result<()> {
        let probe = self
            .root
            .join(format!(".ralph-write-probe-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)?;
        std::fs::remove_file(&probe)
    }

    /// The canonical workspace root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The real path `path` names, when it lies inside the workspace. The path need not
    /// exist; its deepest existing ancestor is resolved through symlinks.
    pub(crate) fn resolve(&self, path: &Path) -> Result<PathBuf, PathError> {
        let absolute = normalize(&self.root.join(path));
        let outside = || PathError::Outside {
            path: path.to_path_buf(),
            workspace: self.root.clone(),
        };
        if !absolute.starts_with(&self.root) {
            return Err(outside());
        }
        let real = real_path(&absolute).map_err(|source| PathError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if real.starts_with(&self.root) {
            Ok(real)
        } else {
            Err(outside())
        }
    }

    /// `path` relative to the workspace root, when it is inside.
    pub(crate) fn relative<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        path.strip_prefix(&self.root).ok()
    }
}

/// Removes `.` and resolves `..` lexically (an absolute path never climbs above `/`).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other.as_os_str()),
        }
    }
    normal
}

/// Canonicalizes the deepest existing ancestor of `path` and appends the rest.
pub(crate) fn real_path(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.symlink_metadata() {
            Ok(_) => break,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let Some(name) = existing.file_name() else {
                    return Err(error);
                };
                rest.push(name.to_os_string());
                if !existing.pop() {
                    return Err(error);
                }
            }
            Err(error) => return Err(error),
        }
    }
    let mut real = existing.canonicalize()?;
    real.extend(rest.iter().rev());
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        (dir, workspace)
    }

    #[test]
    fn a_relative_path_is_taken_from_the_workspace() {
        let (_dir, workspace) = workspace();
        let resolved = workspace.resolve(Path::new("src/new.rs")).unwrap();
        assert_eq!(resolved, workspace.root().join("src/new.rs"));
    }

    #[test]
    fn a_writable_workspace_passes_the_check_and_keeps_no_probe() {
        let (dir, workspace) = workspace();
        workspace.check_writable().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn climbing_out_with_dot_dot_is_refused() {
        let (_dir, workspace) = workspace();
        let error = workspace
            .resolve(Path::new("a/../../escape.txt"))
            .unwrap_err();
        assert!(matches!(error, PathError::Outside { .. }));
    }

    #[test]
    fn an_absolute_path_elsewhere_is_refused() {
        let (_dir, workspace) = workspace();
        assert!(workspace.resolve(Path::new("/etc/passwd")).is_err());
    }

    #[test]
    fn a_symlink_leading_out_is_refused() {
        let (dir, workspace) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let error = workspace.resolve(Path::new("link/file.txt")).unwrap_err();
        assert!(matches!(error, PathError::Outside { .. }));
    }

    #[test]
    fn a_symlink_inside_the_workspace_is_followed() {
        let (dir, workspace) = workspace();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let resolved = workspace.resolve(Path::new("link/file.txt")).unwrap();
        assert_eq!(resolved, workspace.root().join("real/file.txt"));
    }
}
