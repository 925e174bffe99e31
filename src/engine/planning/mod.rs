//! Planning: an agent turns a Feature's spec into its task DAG (docs/planning.md).
//!
//! Pure parts both modes share: where the planner writes its answer, the plan's hash (what
//! an approval names), the planning prompt, how an attempt's end and answer are judged.

mod answered;
mod prompt;
mod proposals;

use std::hash::Hasher;

use crate::engine::stable_hash::{StableHasher, fnv1a};

pub(crate) use answered::{
    Unanswered, not_written, planned, refused, refused_in_a_row, refused_message, refused_problems,
    unanswered,
};
pub(crate) use prompt::{PlanningPrompt, Revision, journal_line, render};
pub(crate) use proposals::{PROPOSE_HELP, proposal_in};

/// The task ID of planning attempts (`planning-a1`, ...): a planned or hand-written task
/// of a planning Feature may not be named so.
pub(crate) const PLANNING_TASK: &str = "planning";

/// The directory, relative to the workspace, the planner writes its answer in. ralph
/// removes it before each planning attempt and after reading the answer, so it is never
/// committed as work.
pub(crate) const ANSWER_DIR: &str = ".ralph-planning";

/// The planner's task list, in [`ANSWER_DIR`].
pub(crate) const TASKS_FILE: &str = "tasks.yaml";

/// The planner's plan document (markdown, optional), in [`ANSWER_DIR`].
pub(crate) const DOCUMENT_FILE: &str = "plan.md";

/// The hash of a plan: 16 hex digits of FNV-1a (64 bit) over its tasks' canonical text and
/// its document. Not a security measure: it tells one plan from another, so that an
/// approval of an older plan is not taken for the current one.
pub(crate) fn plan_hash(tasks_canonical: &str, document: Option<&str>) -> String {
    let mut hasher = StableHasher::default();
    hasher.write(tasks_canonical.as_bytes());
    hasher.write(&[0]);
    hasher.write(document.unwrap_or_default().as_bytes());
    format!("{:016x}", hasher.finish())
}

/// The hash of a document alone (`status.planning.documentHash`).
pub(crate) fn document_hash(document: &str) -> String {
    format!("{:016x}", fnv1a(document.as_bytes()))
}

/// Whether `given` names the plan of hash `current`: equal, or a prefix of it of at least
/// 6 digits (as git accepts a short commit).
pub(crate) fn hash_matches(given: &str, current: &str) -> bool {
    given.len() >= 6 && current.starts_with(&given.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_hash_is_stable_and_tells_plans_apart() {
        let one = plan_hash("tasks: [a]", Some("doc"));
        assert_eq!(one, plan_hash("tasks: [a]", Some("doc")));
        assert_eq!(one.len(), 16);
        assert_ne!(one, plan_hash("tasks: [a]", Some("other doc")));
        assert_ne!(one, plan_hash("tasks: [b]", Some("doc")));
    }

    #[test]
    fn a_short_hash_of_six_digits_names_a_plan() {
        let hash = plan_hash("x", None);
        assert!(hash_matches(&hash[..6], &hash));
        assert!(!hash_matches(&hash[..5], &hash));
        assert!(!hash_matches("000000", "ffffffffffffffff"));
    }
}
