//! Follow-up tasks a worker proposes (`<ralph:propose-tasks>`, docs/planning.md): in an
//! agent Pod of a planning Feature the runner writes the proposal's body to its proposal
//! file, outside the workspace (the finishing git step would commit it), where the
//! claim-keeper uploads it from; the result document only says that there is one.

use std::path::Path;

use crate::engine::planning::proposal_in;

/// Writes the tasks `final_message` proposes to `path` (atomically: the claim-keeper never
/// reads half a file); whether it wrote them. Without a path, or a proposal, nothing is
/// written.
pub(crate) fn write_proposal(final_message: &str, path: Option<&Path>) -> bool {
    let (Some(path), Some(body)) = (path, proposal_in(final_message)) else {
        return false;
    };
    let partial = path.with_extension("partial");
    let written = std::fs::write(&partial, format!("{body}\n"))
        .and_then(|()| std::fs::rename(&partial, path));
    match written {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot write the proposed tasks; they are lost");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROPOSING: &str = "Built it.\n<ralph:propose-tasks>\ntasks:\n  - {name: docs, acceptance: [written]}\n</ralph:propose-tasks>\n<task-done>build</task-done>\n";

    #[test]
    fn a_proposal_in_the_final_message_is_written_to_the_proposal_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("proposal.yaml");
        assert!(write_proposal(PROPOSING, Some(&path)));
        let written = std::fs::read_to_string(&path).expect("written");
        assert_eq!(written, "tasks:\n  - {name: docs, acceptance: [written]}\n");
        assert!(!dir.path().join("proposal.partial").exists());
    }

    #[test]
    fn a_final_message_without_a_proposal_writes_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("proposal.yaml");
        assert!(!write_proposal(
            "Built it.\n<task-done>build</task-done>",
            Some(&path)
        ));
        assert!(!path.exists());
    }

    #[test]
    fn without_a_proposal_file_a_proposal_is_not_flagged() {
        assert!(!write_proposal(PROPOSING, None));
    }

    #[test]
    fn a_proposal_file_that_cannot_be_written_is_not_flagged() {
        let path = Path::new("/nonexistent-dir/proposal.yaml");
        assert!(!write_proposal(PROPOSING, Some(path)));
    }
}
