//! Claims: one row per claimed task, naming the attempt that holds it, its runner process
//! and an expiry that the run loop renews while the process lives.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::ClaimRow;
use super::{Store, StoreError};
use crate::local::process::ProcessId;

pub(super) fn load(conn: &Connection, task: &str) -> rusqlite::Result<Option<ClaimRow>> {
    conn.query_row(
        "SELECT task, holder, pid, pid_start, acquired_at_ms, expires_at_ms
         FROM claims WHERE task = ?1",
        [task],
        read,
    )
    .optional()
}

fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<ClaimRow> {
    let pid: Option<u32> = row.get(2)?;
    let start: Option<i64> = row.get(3)?;
    Ok(ClaimRow {
        task: row.get(0)?,
        holder: row.get(1)?,
        process: pid.map(|pid| ProcessId { pid, start }),
        acquired_at_ms: row.get(4)?,
        expires_at_ms: row.get(5)?,
    })
}

pub(super) fn insert(conn: &Connection, claim: &ClaimRow) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO claims (task, holder, pid, pid_start, acquired_at_ms, expires_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            claim.task,
            claim.holder,
            claim.process.map(|p| p.pid),
            claim.process.and_then(|p| p.start),
            claim.acquired_at_ms,
            claim.expires_at_ms
        ],
    )?;
    Ok(())
}

pub(super) fn release(conn: &Connection, task: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM claims WHERE task = ?1", [task])?;
    Ok(())
}

impl Store {
    /// Every claim.
    pub fn claims(&self) -> Result<Vec<ClaimRow>, StoreError> {
        let mut statement = self.conn.prepare(
            "SELECT task, holder, pid, pid_start, acquired_at_ms, expires_at_ms
             FROM claims ORDER BY acquired_at_ms, task",
        )?;
        let rows = statement
            .query_map([], read)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Records the runner process of the attempt holding `task`'s claim.
    pub fn set_claim_process(
        &mut self,
        task: &str,
        holder: &str,
        process: ProcessId,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "UPDATE claims SET pid = ?3, pid_start = ?4 WHERE task = ?1 AND holder = ?2",
            params![task, holder, process.pid, process.start],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Extends the claims still held by the given `(task, attempt)` pairs; a claim now held
    /// by another attempt is left alone. Returns how many were renewed.
    pub fn renew_claims(
        &mut self,
        held: &[(String, String)],
        expires_at_ms: i64,
    ) -> Result<usize, StoreError> {
        let tx = self.conn.transaction()?;
        let mut renewed = 0;
        for (task, holder) in held {
            renewed += tx.execute(
                "UPDATE claims SET expires_at_ms = ?3 WHERE task = ?1 AND holder = ?2",
                params![task, holder, expires_at_ms],
            )?;
        }
        tx.commit()?;
        Ok(renewed)
    }
}
