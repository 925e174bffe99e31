//! Picking up after an earlier `ralph run` that was killed: its claims are examined, the
//! result files of its runners ingested, live runners waited for (never started twice),
//! and attempts whose runner is gone or whose claim expired retried.

use super::{Run, SchedulerError};
use crate::engine::lifecycle::attempt_id;
use crate::engine::workspace::{WorkspaceOutcome, WorkspaceReport};
use crate::local::executor::{self, AttemptFiles, Ended};
use crate::local::scheduler::live::Live;
use crate::local::store::NewEvent;

impl Run<'_> {
    /// Takes over the Running tasks of an earlier run.
    pub fn resume(&mut self, now_ms: i64) -> Result<(), SchedulerError> {
        let claims = self.store.claims()?;
        let claim_ms = self.plan.claim_ms();
        for task in self.plan.running() {
            let Some(row) = self.plan.task(&task).cloned() else {
                continue;
            };
            let claim = claims.iter().find(|c| c.task == task);
            let holder = claim.map_or_else(
                || attempt_id(&task, row.attempt_count),
                |c| c.holder.clone(),
            );
            let attempt = self
                .store
                .attempts(Some(&task))?
                .into_iter()
                .find(|a| a.id == holder);
            let mut live = Live::left_over(
                holder.clone(),
                &row,
                claim,
                attempt.as_ref(),
                now_ms,
                claim_ms,
            );
            match live.process {
                Some(process) if process.is_alive() => {
                    let message = format!(
                        "runner {holder} (pid {}) of an earlier run still runs; waiting for it",
                        process.pid
                    );
                    self.store.record_event(
                        now_ms,
                        &NewEvent::attempt(&task, &holder, "waiting", message.clone()),
                    )?;
                    self.warn(&task, message);
                }
                Some(_) => live.ended = Some(self.leftover_result(&holder)),
                None => {}
            }
            self.plan.track(&task, live);
            self.decide_running(&task, now_ms)?;
        }
        Ok(())
    }

    /// Looks at a runner left by an earlier run: once it has exited, its result is ingested.
    pub(super) fn poll_orphan(&mut self, task: &str, now_ms: i64) -> Result<(), SchedulerError> {
        let Some(live) = self.plan.live(task) else {
            return Ok(());
        };
        let gone = live.process.is_none_or(|process| !process.is_alive());
        if gone {
            let ended = self.leftover_result(&live.attempt.clone());
            let attempt = live.attempt.clone();
            if let Some(live) = self.plan.current(task, &attempt) {
                live.ended = Some(ended);
            }
        }
        self.decide_running(task, now_ms)
    }

    fn leftover_result(&self, attempt: &str) -> Ended {
        let files = AttemptFiles::in_dir(self.store.attempt_dir(attempt));
        Ended {
            exit_code: None,
            result: executor::read_result(&files.result, None, &files.stderr),
            workspace: self.options.worktrees.as_ref().map(|_| unintegrated()),
        }
    }
}

/// What a worktree attempt of an earlier run reports: that run ended before its work was
/// integrated, so a done verdict is retried like a crash rather than taken as done.
fn unintegrated() -> WorkspaceReport {
    WorkspaceReport {
        message: Some(
            "the `ralph run` that started it ended before its work was integrated; its \
             worktree is kept"
                .to_owned(),
        ),
        ..WorkspaceReport::new(WorkspaceOutcome::Failed)
    }
}
