//! Reactions to what happens outside the loop: runner reports, the clock, Ctrl+C.

use std::time::Instant;

use super::{Run, RunError};
use crate::local::executor::{AttemptReport, Report};
use crate::local::run_event::RunEvent;

/// A second Ctrl+C within this window kills the runners instead of cancelling them.
const KILL_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);

impl Run<'_> {
    /// Handles a runner's report.
    pub fn on_report(&mut self, report: AttemptReport, now_ms: i64) -> Result<(), RunError> {
        let Some(live) = self.live.get_mut(&report.task) else {
            return Ok(());
        };
        if live.attempt != report.attempt {
            return Ok(());
        }
        match report.report {
            Report::Spawned { pid, start } => {
                live.pid = Some(pid);
                live.pid_start = start;
                self.store
                    .set_claim_process(&report.task, &report.attempt, pid, start)?;
            }
            Report::Activity(text) => self.display.show(&RunEvent::Activity {
                task: report.task,
                attempt: report.attempt,
                text,
            }),
            Report::Ended(ended) => {
                live.ended = Some(*ended);
                self.decide_running(&report.task, now_ms)?;
            }
        }
        Ok(())
    }

    /// Periodic work: renew the claims of live runners, look at runners of earlier runs.
    pub fn on_tick(&mut self, now_ms: i64) -> Result<(), RunError> {
        if now_ms >= self.next_renewal_ms {
            let held: Vec<(String, String)> = self
                .live
                .iter()
                .filter(|(_, live)| live.child && live.is_running())
                .map(|(task, live)| (task.clone(), live.attempt.clone()))
                .collect();
            if !held.is_empty() {
                self.store.renew_claims(&held, now_ms + self.claim_ms())?;
            }
            for (task, _) in &held {
                if let Some(live) = self.live.get_mut(task) {
                    live.renewed_at_ms = now_ms;
                }
            }
            self.next_renewal_ms = now_ms + self.claim_ms() / 3;
        }
        let watched: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| !live.child && live.ended.is_none())
            .map(|(task, _)| task.clone())
            .collect();
        for task in watched {
            self.poll_orphan(&task, now_ms)?;
        }
        Ok(())
    }

    /// Ctrl+C: the first cancels every running attempt gracefully; a second within
    /// [`KILL_WINDOW`] kills them at once.
    pub fn on_interrupt(&mut self, now_ms: i64, now: Instant) -> Result<(), RunError> {
        let kill = self
            .interrupted_at
            .is_some_and(|at| now.duration_since(at) < KILL_WINDOW);
        self.interrupted_at = Some(now);
        let mut attempts: Vec<String> = self.live.values().map(|l| l.attempt.clone()).collect();
        attempts.sort();
        self.display
            .show(&RunEvent::Interrupting { attempts, kill });
        let tasks: Vec<String> = self.live.keys().cloned().collect();
        for task in tasks {
            if kill {
                self.kill(&task);
            } else {
                self.decide_running(&task, now_ms)?;
            }
        }
        Ok(())
    }
}
