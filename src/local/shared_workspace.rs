//! `ralph run` with more than one attempt at a time in one directory: they can overwrite
//! each other's files, so the user is told.

use std::path::Path;

/// The warning for `parallel` attempts sharing `workspace`, when there is more than one.
pub(crate) fn shared_directory_warning(parallel: usize, workspace: &Path) -> Option<String> {
    (parallel > 1).then(|| {
        format!(
            "up to {parallel} attempts run at once in one directory, {}: parallel tasks can \
             overwrite each other's files. Run with --parallel 1, give the tasks disjoint \
             files, or run in a git repository (`git init`, or --repo): each attempt then \
             works in its own worktree (docs/local.md)",
            workspace.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_attempt_at_a_time_needs_no_warning() {
        assert_eq!(shared_directory_warning(1, Path::new("/w")), None);
    }

    #[test]
    fn parallel_attempts_in_one_directory_are_warned_about_naming_it() {
        let warning = shared_directory_warning(3, Path::new("/work/app")).unwrap_or_default();
        assert!(warning.contains("/work/app"), "{warning}");
        assert!(warning.contains("--parallel 1"), "{warning}");
    }
}
