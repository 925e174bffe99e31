//! The append-only event log.

use rusqlite::{Connection, params};

use super::rows::{EventRow, NewEvent};
use super::{Store, StoreError};

pub(super) fn append(conn: &Connection, at_ms: i64, event: &NewEvent) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO events (at_ms, task, attempt, kind, message) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![at_ms, event.task, event.attempt, event.kind, event.message],
    )?;
    Ok(())
}

impl Store {
    /// Appends one event (its own transaction).
    pub fn record_event(&mut self, at_ms: i64, event: &NewEvent) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        append(&tx, at_ms, event)?;
        tx.commit()?;
        Ok(())
    }

    /// The event log, oldest first, optionally only events after `after_seq`.
    pub fn events(&self, after_seq: i64) -> Result<Vec<EventRow>, StoreError> {
        let mut statement = self.conn.prepare(
            "SELECT seq, at_ms, task, attempt, kind, message FROM events
             WHERE seq > ?1 ORDER BY seq",
        )?;
        let rows = statement
            .query_map([after_seq], |row| {
                Ok(EventRow {
                    seq: row.get(0)?,
                    at_ms: row.get(1)?,
                    event: NewEvent {
                        task: row.get(2)?,
                        attempt: row.get(3)?,
                        kind: row.get(4)?,
                        message: row.get(5)?,
                    },
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}
