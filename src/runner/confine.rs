//! Kernel confinement of the agent process with Landlock (Linux ≥ 5.13): the agent and
//! everything it starts may read and execute anywhere but write only its workspace
//! (nothing of it for a verifier), its HOME and a private temp directory, whatever it
//! decides to run and whatever its permission mode.
//!
//! Landlock and `no_new_privs` belong to a thread, and a child inherits them from the
//! thread that spawns it: the runner restricts a short-lived thread of its own and spawns
//! the agent from it, so the runner itself stays unrestricted (no `unsafe`, no re-exec).
//! See docs/security.md.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, path_beneath_rules,
};

pub use crate::api::agent::Confinement;
use crate::engine::attempt::{ConfinementReport, LandlockState};

/// The Landlock ABI whose rights ralph asks for (Linux 6.15); an older kernel enforces
/// the part it knows.
const ABI_ASKED: ABI = ABI::V7;

/// Device files any program writes or sets up (null sinks, random sources, terminals).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// How the problem of a runner file in a work attempt's workspace begins (`ralph run`
/// says it once for its state directory instead).
pub const RUNNER_FILE_IN_WORKSPACE: &str = "the runner's file";

/// Where the agent may write, and the runner files it can reach all the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Grants {
    /// Directories and files the agent may write beneath.
    pub(crate) writable: Vec<PathBuf>,
    /// Why the confinement is weaker than asked (a runner file in the workspace).
    pub(crate) problems: Vec<String>,
}

/// The paths that decide what the agent may write; all canonical.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The workspace.
    pub(crate) workspace: PathBuf,
    /// A verifier: the workspace is only read.
    pub(crate) read_only: bool,
    /// The agent's HOME, when it exists.
    pub(crate) home: Option<PathBuf>,
    /// The agent's private temp directory.
    pub(crate) tmp: PathBuf,
    /// The runner's own files (its binary, result and heartbeat files), kept out of reach.
    pub(crate) runner_files: Vec<PathBuf>,
}

/// Why the agent cannot be confined as asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfineError {
    /// A directory on the way to a runner file could not be listed.
    #[error("cannot list {path} to keep {kept} out of the agent's reach: {source}")]
    Carve {
        /// The directory.
        path: PathBuf,
        /// The path kept out.
        kept: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The kernel refused the ruleset, or could not enforce a required one.
    #[error("Landlock cannot confine the agent: {0}")]
    Landlock(String),
}

impl Layout {
    /// What the agent may write: the workspace (unless read-only), HOME and the temp
    /// directory, minus the runner's files and a read-only workspace inside them.
    pub(crate) fn grants(&self) -> Result<Grants, ConfineError> {
        let mut kept_out = outermost(&self.runner_files);
        let mut grants = Grants::default();
        if self.read_only {
            kept_out.push(self.workspace.clone());
        } else {
            grants.writable.push(self.workspace.clone());
            for file in kept_out.iter().filter(|f| f.starts_with(&self.workspace)) {
                grants.problems.push(format!(
                    "{RUNNER_FILE_IN_WORKSPACE} {} lies in the workspace, which the agent may write",
                    file.display()
                ));
            }
            kept_out.retain(|file| !file.starts_with(&self.workspace));
        }
        for root in self.home.iter().chain([&self.tmp]) {
            if !root.starts_with(&self.workspace) {
                grants.writable.extend(carve(root, &kept_out)?);
            } else if self.read_only {
                grants.problems.push(format!(
                    "{} is inside the workspace {}: the verifier can write that part of it \
                     (set HOME outside the workspace)",
                    root.display(),
                    self.workspace.display()
                ));
                grants.writable.push(root.clone());
            }
        }
        Ok(grants)
    }
}

/// `paths` without those inside another of them.
fn outermost(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut outer: Vec<PathBuf> = Vec::new();
    for path in paths {
        if !paths
            .iter()
            .any(|other| other != path && path.starts_with(other))
            && !outer.contains(path)
        {
            outer.push(path.clone());
        }
    }
    outer
}

/// `root` without the paths in `kept_out`: `root` itself when none lies in it, else its
/// entries, each carved alike. A kept-out path is left out, and so are symlinks (Landlock
/// would grant their targets). New entries cannot be made in a carved directory itself.
fn carve(root: &Path, kept_out: &[PathBuf]) -> Result<Vec<PathBuf>, ConfineError> {
    let Some(kept) = kept_out.iter().find(|path| path.starts_with(root)) else {
        return Ok(vec![root.to_path_buf()]);
    };
    if kept_out.iter().any(|path| path == root) {
        return Ok(Vec::new());
    }
    let failed = |source| ConfineError::Carve {
        path: root.to_path_buf(),
        kept: kept.clone(),
        source,
    };
    let mut granted = Vec::new();
    for entry in std::fs::read_dir(root).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        if entry.file_type().map_err(failed)?.is_symlink() {
            continue;
        }
        granted.extend(carve(&entry.path(), kept_out)?);
    }
    Ok(granted)
}

/// The agent's own temp directory (mode 0700 in the runner's temp directory), removed
/// with what the agent left in it when dropped.
#[derive(Debug)]
pub(crate) struct PrivateTemp(PathBuf);

impl PrivateTemp {
    /// Creates a fresh one.
    pub(crate) fn create() -> std::io::Result<PrivateTemp> {
        use std::os::unix::fs::DirBuilderExt as _;
        let name = format!(
            "ralph-agent-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateTemp(path.canonicalize()?))
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `spawn` on a fresh thread that Landlock first restricts to `grants` (with
/// `no_new_privs`), so what `spawn` starts inherits the restriction; what it returned
/// and how the kernel confined it. `Required` fails unless the filesystem rights are
/// enforced.
pub(crate) fn spawn_confined<T: Send>(
    grants: &Grants,
    confinement: Confinement,
    spawn: impl FnOnce() -> T + Send,
) -> Result<(T, ConfinementReport), ConfineError> {
    let required = confinement == Confinement::Required;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let status = restrict_thread(grants, required)
                    .map_err(|error| ConfineError::Landlock(error.to_string()))?;
                let mut report = report(&status);
                if required && report.landlock == LandlockState::Unavailable {
                    return Err(ConfineError::Landlock(report.problems.join("; ")));
                }
                report.problems.extend(grants.problems.iter().cloned());
                Ok((spawn(), report))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(ConfineError::Landlock(
                    "the confining thread panicked".to_owned(),
                ))
            })
    })
}

/// Whether this kernel enforces Landlock: a throwaway thread restricts itself.
pub fn probe() -> ConfinementReport {
    match spawn_confined(&Grants::default(), Confinement::BestEffort, || ()) {
        Ok(((), report)) => report,
        Err(error) => ConfinementReport {
            landlock: LandlockState::Unavailable,
            abi: None,
            problems: vec![error.to_string()],
        },
    }
}

/// Restricts the calling thread: read and execute everywhere, write only beneath
/// `grants` and to the usual devices; no signals to or abstract sockets of processes
/// outside. `required`: the filesystem rights of Landlock's first ABI must be enforced.
fn restrict_thread(grants: &Grants, required: bool) -> Result<RestrictionStatus, RulesetError> {
    let level = if required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(ABI::V1))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_ASKED))?
        .scope(Scope::from_all(ABI_ASKED))?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(ABI_ASKED)))?
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_file(ABI_ASKED)))?
        .add_rules(path_beneath_rules(
            &grants.writable,
            AccessFs::from_all(ABI_ASKED),
        ))?
        .restrict_self()
}

/// How the kernel confined the thread, for the attempt's result.
fn report(status: &RestrictionStatus) -> ConfinementReport {
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
        _ => None,
    };
    let (landlock, problem) = match status.ruleset {
        RulesetStatus::FullyEnforced => (LandlockState::Enforced, None),
        RulesetStatus::PartiallyEnforced => (
            LandlockState::Partial,
            Some(format!(
                "the kernel's Landlock ABI {} enforces only part of the confinement \
                 (ralph asks for ABI {}, Linux 6.15)",
                abi.unwrap_or_default(),
                ABI_ASKED as i32
            )),
        ),
        _ => (
            LandlockState::Unavailable,
            Some(format!(
                "the kernel does not enforce Landlock ({}): the agent can write wherever \
                 its user can",
                unavailable_reason(status.landlock)
            )),
        ),
    };
    ConfinementReport {
        landlock,
        abi,
        problems: problem.into_iter().collect(),
    }
}

fn unavailable_reason(status: LandlockStatus) -> &'static str {
    match status {
        LandlockStatus::NotEnabled => {
            "built in but not enabled: add landlock to the kernel's lsm= boot parameter"
        }
        LandlockStatus::NotImplemented => {
            "not in this kernel (Linux ≥ 5.13 with CONFIG_SECURITY_LANDLOCK), or a seccomp \
             profile blocks its system calls"
        }
        LandlockStatus::Available { .. } => "the kernel refused the ruleset",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new(paths: &[&str]) -> Tree {
            let dir = tempfile::tempdir().unwrap();
            for path in paths {
                let path = dir.path().join(path);
                if path.extension().is_some() {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(path, "").unwrap();
                } else {
                    std::fs::create_dir_all(path).unwrap();
                }
            }
            Tree { dir }
        }

        fn path(&self, path: &str) -> PathBuf {
            self.dir.path().canonicalize().unwrap().join(path)
        }

        fn layout(&self, read_only: bool) -> Layout {
            Layout {
                workspace: self.path("home/src/project"),
                read_only,
                home: Some(self.path("home")),
                tmp: self.path("tmp"),
                runner_files: vec![self.path("run/result.json")],
            }
        }
    }

    fn sorted(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
        paths.sort();
        paths
    }

    #[test]
    fn a_work_attempt_writes_its_workspace_home_and_temp_directory() {
        let tree = Tree::new(&["home/src/project", "tmp", "run"]);
        let grants = tree.layout(false).grants().unwrap();
        assert_eq!(
            grants.writable,
            [
                tree.path("home/src/project"),
                tree.path("home"),
                tree.path("tmp")
            ]
        );
        assert!(grants.problems.is_empty());
    }

    #[test]
    fn a_verifier_writes_home_except_the_way_to_its_workspace() {
        let tree = Tree::new(&[
            "home/.claude",
            "home/notes.txt",
            "home/src/project",
            "home/src/other",
            "tmp",
        ]);
        let grants = tree.layout(true).grants().unwrap();
        assert_eq!(
            sorted(grants.writable),
            sorted(vec![
                tree.path("home/.claude"),
                tree.path("home/notes.txt"),
                tree.path("home/src/other"),
                tree.path("tmp"),
            ])
        );
    }

    #[test]
    fn a_runner_file_in_home_is_carved_out() {
        let tree = Tree::new(&["home/.state/result.json", "home/.cache", "project", "tmp"]);
        let layout = Layout {
            workspace: tree.path("project"),
            runner_files: vec![tree.path("home/.state/result.json")],
            ..tree.layout(false)
        };
        let grants = layout.grants().unwrap();
        assert_eq!(
            sorted(grants.writable),
            sorted(vec![
                tree.path("project"),
                tree.path("home/.cache"),
                tree.path("tmp")
            ])
        );
    }

    #[test]
    fn a_runner_file_in_the_workspace_is_a_problem_named_in_the_grants() {
        let tree = Tree::new(&["project/.ralph/result.json", "tmp"]);
        let layout = Layout {
            workspace: tree.path("project"),
            home: None,
            runner_files: vec![tree.path("project/.ralph/result.json")],
            ..tree.layout(false)
        };
        let grants = layout.grants().unwrap();
        assert_eq!(grants.problems.len(), 1, "{grants:?}");
        assert!(grants.problems[0].contains("result.json lies in the workspace"));
    }

    #[test]
    fn a_state_directory_holding_the_runner_files_is_one_problem_in_the_workspace() {
        let tree = Tree::new(&["project/.ralph/attempts/a1/result.json", "tmp"]);
        let layout = Layout {
            workspace: tree.path("project"),
            home: None,
            runner_files: vec![
                tree.path("project/.ralph/attempts/a1/result.json"),
                tree.path("project/.ralph"),
            ],
            ..tree.layout(false)
        };
        let grants = layout.grants().unwrap();
        assert_eq!(grants.problems.len(), 1, "{grants:?}");
        assert!(grants.problems[0].contains(".ralph lies in the workspace"));
    }

    #[test]
    fn a_verifiers_home_inside_the_workspace_stays_writable_and_is_a_problem() {
        let tree = Tree::new(&["project/home", "tmp"]);
        let layout = Layout {
            workspace: tree.path("project"),
            home: Some(tree.path("project/home")),
            ..tree.layout(true)
        };
        let grants = layout.grants().unwrap();
        assert_eq!(
            grants.writable,
            [tree.path("project/home"), tree.path("tmp")]
        );
        assert!(
            grants.problems[0].contains("can write that part of it"),
            "{grants:?}"
        );
    }

    #[test]
    fn symlinks_in_a_carved_directory_are_not_granted() {
        let tree = Tree::new(&["home/src/project", "tmp"]);
        std::os::unix::fs::symlink("/", tree.path("home/root-link")).unwrap();
        let grants = tree.layout(true).grants().unwrap();
        assert!(!grants.writable.contains(&tree.path("home/root-link")));
    }
}
