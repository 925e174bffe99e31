//! The exit codes of `ralph run` and `ralph validate`: one table, shown in `--help` and in
//! docs/local.md, that a CI job can rely on. Only 0 means "everything done".

use std::process::ExitCode;

use crate::engine::dag::FeatureOutcome;

/// How a command ended, as its exit code says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Every task done (`run`), or every file valid (`validate`).
    Complete,
    /// A task failed, or an agent promised FAILURE.
    Failed,
    /// The command line is wrong (clap's usage errors).
    Usage,
    /// A manifest is missing or invalid (the same for `run` and `validate`).
    InvalidInput,
    /// Nothing can progress (every remaining task waits on a failed one), or suspended.
    Blocked,
    /// The attempt limit (`maxIterations`, `--limit`) was used up before every task was done.
    LimitReached,
    /// The feature has no tasks.
    NoTasks,
    /// The agent cannot run as configured; fix it and run again (the run resumes).
    AgentMisconfigured,
    /// A planned task list waits for a person's approval (`ralph plan approve`).
    AwaitingApproval,
    /// An unexpected error (state store, I/O).
    Error,
    /// Interrupted by Ctrl+C or SIGTERM; run again to resume.
    Interrupted,
}

impl Exit {
    /// Every exit, in the order of the table.
    pub const ALL: [Exit; 11] = [
        Exit::Complete,
        Exit::Failed,
        Exit::Usage,
        Exit::InvalidInput,
        Exit::Blocked,
        Exit::LimitReached,
        Exit::NoTasks,
        Exit::AgentMisconfigured,
        Exit::AwaitingApproval,
        Exit::Error,
        Exit::Interrupted,
    ];

    /// The process exit code.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Complete => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::InvalidInput => 3,
            Exit::Blocked => 4,
            Exit::LimitReached => 5,
            Exit::NoTasks => 6,
            Exit::AgentMisconfigured => 7,
            Exit::AwaitingApproval => 8,
            Exit::Error => 70,
            Exit::Interrupted => 130,
        }
    }

    /// What the code means, for the table.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Complete => "complete: every task done (validate: every file valid)",
            Exit::Failed => "failed: a task failed, or an agent promised FAILURE",
            Exit::Usage => "usage error: wrong command line",
            Exit::InvalidInput => "invalid input: a manifest is missing or invalid",
            Exit::Blocked => "blocked or suspended: nothing can progress",
            Exit::LimitReached => {
                "limit reached: the attempt limit or the budget was used up before every task was done"
            }
            Exit::NoTasks => "no plan: the feature has no tasks",
            Exit::AgentMisconfigured => {
                "agent misconfigured: fix what the message says and run again"
            }
            Exit::AwaitingApproval => {
                "waiting for approval: `ralph plan approve FILE` (or reject), then run again"
            }
            Exit::Error => "error: the state store or the system failed",
            Exit::Interrupted => "interrupted (Ctrl+C, SIGTERM): run again to resume",
        }
    }

    /// The exit for a feature's outcome.
    pub const fn of_outcome(outcome: FeatureOutcome) -> Exit {
        match outcome {
            FeatureOutcome::Complete => Exit::Complete,
            FeatureOutcome::Failed => Exit::Failed,
            FeatureOutcome::Blocked | FeatureOutcome::Suspended => Exit::Blocked,
            FeatureOutcome::LimitReached => Exit::LimitReached,
            FeatureOutcome::NoPlan => Exit::NoTasks,
        }
    }

    /// The table as `--help` and docs/local.md show it.
    pub fn table() -> String {
        let mut out = String::from("Exit codes:\n");
        for exit in Exit::ALL {
            out.push_str(&format!("  {:>3}  {}\n", exit.code(), exit.meaning()));
        }
        out
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_has_its_own_code() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len());
    }

    #[test]
    fn usage_errors_use_clap_code_two_and_nothing_else_does() {
        assert_eq!(Exit::Usage.code(), 2);
        assert_ne!(Exit::Blocked.code(), 2);
    }

    #[test]
    fn only_a_complete_feature_exits_zero() {
        let zero: Vec<FeatureOutcome> = [
            FeatureOutcome::Complete,
            FeatureOutcome::Failed,
            FeatureOutcome::Blocked,
            FeatureOutcome::Suspended,
            FeatureOutcome::LimitReached,
            FeatureOutcome::NoPlan,
        ]
        .into_iter()
        .filter(|o| Exit::of_outcome(*o).code() == 0)
        .collect();
        assert_eq!(zero, [FeatureOutcome::Complete]);
    }

    #[test]
    fn the_table_lists_every_code() {
        let table = Exit::table();
        for exit in Exit::ALL {
            assert!(table.contains(&format!("{:>3}  ", exit.code())), "{table}");
        }
    }

    #[test]
    fn docs_show_the_same_table() {
        let docs = include_str!("../../docs/local.md");
        assert!(
            docs.contains(&Exit::table()),
            "docs/local.md must hold:\n{}",
            Exit::table()
        );
    }
}
