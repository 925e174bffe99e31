//! Starting attempts (claim + attempt row + Running, in one transaction) and applying the
//! state changes that follow their end.

use rusqlite::{Connection, params};

use super::rows::{AttemptClose, AttemptRow, ClaimRow, EndDetails, NewEvent, Transition};
use super::{Store, StoreError, claims, events, keys, tasks, write_meta};
use crate::engine::dag::TaskPhase;
use crate::engine::verification::AttemptKind;

const COLUMNS: &str = "id, task, number, generation, started_at_ms, ended_at_ms, outcome, \
    stop_reason, crash, message, usage, result, kind";

/// The attempt ID of attempt `number` of `task`.
pub(super) fn attempt_id(task: &str, number: u32) -> String {
    format!("{task}-a{number}")
}

/// Reads an attempt row: its columns ([`COLUMNS`]), the usage JSON decoded.
fn decode(row: &rusqlite::Row<'_>) -> Result<AttemptRow, StoreError> {
    let id: String = row.get(0)?;
    let usage = serde_json::from_str(&row.get::<_, String>(10)?)
        .map_err(|error| StoreError::corrupt(format!("attempt {id} usage"), error))?;
    Ok(AttemptRow {
        id,
        task: row.get(1)?,
        number: row.get(2)?,
        generation: row.get(3)?,
        started_at_ms: row.get(4)?,
        ended_at_ms: row.get(5)?,
        outcome: row.get(6)?,
        details: EndDetails {
            stop_reason: row.get(7)?,
            crash: row.get(8)?,
            message: row.get(9)?,
            usage,
            result: row.get(11)?,
        },
        kind: AttemptKind::parse(&row.get::<_, String>(12)?),
    })
}

fn close(conn: &Connection, close: &AttemptClose) -> Result<(), StoreError> {
    let details = &close.details;
    let usage = serde_json::to_string(&details.usage)
        .map_err(|error| StoreError::corrupt(format!("attempt {} usage", close.id), error))?;
    conn.execute(
        "UPDATE attempts SET ended_at_ms = ?2, outcome = ?3, stop_reason = ?4, crash = ?5,
             message = ?6, usage = ?7, result = ?8
         WHERE id = ?1",
        params![
            close.id,
            close.ended_at_ms,
            close.outcome,
            details.stop_reason,
            details.crash,
            details.message,
            usage,
            details.result
        ],
    )?;
    Ok(())
}

impl Store {
    /// Claims `task` for a new work attempt and marks it Running, in one transaction. An
    /// expired claim is taken over; a live one is refused.
    pub fn start_attempt(
        &mut self,
        task: &str,
        now_ms: i64,
        claim_ms: i64,
    ) -> Result<AttemptRow, StoreError> {
        self.start_attempt_as(task, AttemptKind::Work, now_ms, claim_ms)
    }

    /// [`Store::start_attempt`] for an attempt of `kind`.
    pub fn start_attempt_as(
        &mut self,
        task: &str,
        kind: AttemptKind,
        now_ms: i64,
        claim_ms: i64,
    ) -> Result<AttemptRow, StoreError> {
        let tx = self.conn.transaction()?;
        let mut row = tasks::load(&tx, task)?;
        if let Some(existing) = claims::load(&tx, task)? {
            if existing.expires_at_ms > now_ms {
                return Err(StoreError::AlreadyClaimed {
                    task: task.to_string(),
                    holder: existing.holder,
                });
            }
            claims::release(&tx, task)?;
            let message = format!("expired claim of {} taken over", existing.holder);
            events::append(&tx, now_ms, &NewEvent::task(task, "reclaimed", message))?;
        }
        row.attempt_count += 1;
        row.phase = TaskPhase::Running;
        let id = attempt_id(task, row.attempt_count);
        claims::insert(
            &tx,
            &ClaimRow {
                task: task.to_string(),
                holder: id.clone(),
                process: None,
                acquired_at_ms: now_ms,
                expires_at_ms: now_ms + claim_ms,
            },
        )?;
        tx.execute(
            "INSERT INTO attempts (id, task, number, generation, started_at_ms, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id,
                task,
                row.attempt_count,
                row.generation,
                now_ms,
                kind.as_str()
            ],
        )?;
        tasks::save(&tx, &row)?;
        let message = match kind {
            AttemptKind::Work => format!("attempt {} started (generation {})", id, row.generation),
            AttemptKind::Verify => format!(
                "attempt {} started: verification (generation {})",
                id, row.generation
            ),
        };
        events::append(
            &tx,
            now_ms,
            &NewEvent::attempt(task, &id, "started", message),
        )?;
        tx.commit()?;
        Ok(AttemptRow {
            id,
            task: task.to_string(),
            number: row.attempt_count,
            kind,
            generation: row.generation,
            started_at_ms: now_ms,
            ended_at_ms: None,
            outcome: None,
            details: EndDetails::default(),
        })
    }

    /// Applies a batch of state changes in one transaction.
    pub fn apply(&mut self, transition: &Transition, now_ms: i64) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        if let Some(attempt) = &transition.close {
            close(&tx, attempt)?;
            super::memory::record(&tx, attempt)?;
        }
        for task in &transition.tasks {
            tasks::save(&tx, task)?;
        }
        for task in &transition.release {
            claims::release(&tx, task)?;
        }
        for event in &transition.events {
            events::append(&tx, now_ms, event)?;
        }
        if let Some(reason) = &transition.stop_feature {
            write_meta(&tx, keys::STOPPED, Some(reason))?;
        }
        tx.execute(
            "DELETE FROM tasks WHERE removed = 1 AND name NOT IN (SELECT task FROM claims)",
            [],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Attempts, oldest first; of one task when given.
    pub fn attempts(&self, task: Option<&str>) -> Result<Vec<AttemptRow>, StoreError> {
        let mut statement = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM attempts WHERE (?1 IS NULL OR task = ?1)
             ORDER BY started_at_ms, task, number"
        ))?;
        statement.query_and_then([task], decode)?.collect()
    }

    /// Number of attempts ever started (the feature's iterations).
    pub fn iterations(&self) -> Result<u32, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM attempts", [], |row| row.get(0))?)
    }
}
