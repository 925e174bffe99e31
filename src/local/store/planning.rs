//! Planning attempts (docs/planning.md): recorded as attempts of the task `planning`, so
//! their usage counts toward the budget and `maxIterations` like any other attempt's.

use rusqlite::params;

use super::rows::{AttemptRow, NewEvent};
use super::{Store, StoreError, events};

/// The attempts table's `kind` of a planning attempt.
pub(super) const PLANNING_KIND: &str = "planning";

impl Store {
    /// Records an ended planning attempt and an event saying how it ended, in one
    /// transaction.
    pub fn record_planning_attempt(
        &mut self,
        attempt: &AttemptRow,
        event: &NewEvent,
    ) -> Result<(), StoreError> {
        let details = &attempt.details;
        let usage = serde_json::to_string(&details.usage)
            .map_err(|error| StoreError::corrupt(format!("attempt {} usage", attempt.id), error))?;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT OR REPLACE INTO attempts (id, task, number, generation, started_at_ms,
                 ended_at_ms, outcome, stop_reason, crash, message, usage, result, kind)
             VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                attempt.id,
                attempt.task,
                attempt.number,
                attempt.started_at_ms,
                attempt.ended_at_ms,
                attempt.outcome,
                details.stop_reason,
                details.crash,
                details.message,
                usage,
                details.result,
                PLANNING_KIND,
            ],
        )?;
        events::append(
            &tx,
            attempt.ended_at_ms.unwrap_or(attempt.started_at_ms),
            event,
        )?;
        tx.commit()?;
        Ok(())
    }
}
