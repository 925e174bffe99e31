//! Reading and saving task rows; `task reset` and `task retry`.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::rows::{NewEvent, TaskRow};
use super::{Store, StoreError, events};
use crate::engine::dag::TaskPhase;

const COLUMNS: &str = "spec, ord, generation, phase, retry_count, attempt_count, \
    next_attempt_after_ms, previous_attempt, usage, removed";

struct RawTask {
    spec: String,
    ord: i64,
    generation: i64,
    phase: String,
    retry_count: u32,
    attempt_count: u32,
    next_attempt_after_ms: Option<i64>,
    previous_attempt: Option<String>,
    usage: String,
    removed: bool,
}

fn raw(row: &Row<'_>) -> rusqlite::Result<RawTask> {
    Ok(RawTask {
        spec: row.get(0)?,
        ord: row.get(1)?,
        generation: row.get(2)?,
        phase: row.get(3)?,
        retry_count: row.get(4)?,
        attempt_count: row.get(5)?,
        next_attempt_after_ms: row.get(6)?,
        previous_attempt: row.get(7)?,
        usage: row.get(8)?,
        removed: row.get(9)?,
    })
}

fn decode(raw: RawTask) -> Result<TaskRow, StoreError> {
    let spec: crate::local::feature::LocalTask =
        serde_json::from_str(&raw.spec).map_err(|error| StoreError::corrupt("task spec", error))?;
    let what = |field: &str| format!("task {:?} field {field}", spec.name);
    let phase = TaskPhase::parse(&raw.phase)
        .ok_or_else(|| StoreError::corrupt(what("phase"), &raw.phase))?;
    let usage = serde_json::from_str(&raw.usage)
        .map_err(|error| StoreError::corrupt(what("usage"), error))?;
    let order = u64::try_from(raw.ord).map_err(|error| StoreError::corrupt(what("ord"), error))?;
    Ok(TaskRow {
        spec,
        order,
        generation: raw.generation,
        phase,
        retry_count: raw.retry_count,
        attempt_count: raw.attempt_count,
        next_attempt_after_ms: raw.next_attempt_after_ms,
        previous_attempt: raw.previous_attempt,
        usage,
        removed: raw.removed,
    })
}

pub(super) fn load_all(conn: &Connection) -> Result<Vec<TaskRow>, StoreError> {
    let mut statement = conn.prepare(&format!("SELECT {COLUMNS} FROM tasks ORDER BY ord, name"))?;
    let raws = statement
        .query_map([], raw)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raws.into_iter().map(decode).collect()
}

pub(super) fn load(conn: &Connection, name: &str) -> Result<TaskRow, StoreError> {
    let found = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM tasks WHERE name = ?1"),
            [name],
            raw,
        )
        .optional()?;
    decode(found.ok_or_else(|| StoreError::UnknownTask(name.to_string()))?)
}

/// Saves the mutable fields of a task row.
pub(super) fn save(conn: &Connection, task: &TaskRow) -> Result<(), StoreError> {
    let usage = serde_json::to_string(&task.usage)
        .map_err(|error| StoreError::corrupt(format!("task {:?} usage", task.name()), error))?;
    let changed = conn.execute(
        "UPDATE tasks SET phase = ?2, retry_count = ?3, attempt_count = ?4,
             next_attempt_after_ms = ?5, previous_attempt = ?6, usage = ?7
         WHERE name = ?1",
        params![
            task.name(),
            task.phase.as_str(),
            task.retry_count,
            task.attempt_count,
            task.next_attempt_after_ms,
            task.previous_attempt,
            usage,
        ],
    )?;
    if changed == 0 {
        return Err(StoreError::UnknownTask(task.name().to_string()));
    }
    Ok(())
}

impl Store {
    /// Every task, in creation order.
    pub fn tasks(&self) -> Result<Vec<TaskRow>, StoreError> {
        load_all(&self.conn)
    }

    /// One task by name.
    pub fn task(&self, name: &str) -> Result<TaskRow, StoreError> {
        load(&self.conn, name)
    }

    /// `ralph task reset`: clears the claim and the retry count and sets the task Pending.
    pub fn reset_task(&mut self, name: &str, now_ms: i64) -> Result<TaskRow, StoreError> {
        let tx = self.conn.transaction()?;
        let mut task = load(&tx, name)?;
        let from = task.phase;
        tx.execute("DELETE FROM claims WHERE task = ?1", [name])?;
        task.retry_count = 0;
        task.previous_attempt = None;
        let message = format!("reset by the user (was {from:?}): claim and retries cleared");
        back_to_pending(tx, task, "reset", message, now_ms)
    }

    /// `ralph task retry`: sets a Failed or Blocked task back to Pending.
    pub fn retry_task(&mut self, name: &str, now_ms: i64) -> Result<TaskRow, StoreError> {
        let tx = self.conn.transaction()?;
        let task = load(&tx, name)?;
        if !matches!(task.phase, TaskPhase::Failed | TaskPhase::Blocked) {
            return Err(StoreError::WrongPhase {
                task: name.to_string(),
                phase: task.phase,
                what: "only a Failed or Blocked task can be retried (use `ralph task reset`)"
                    .to_string(),
            });
        }
        let message = format!("retry requested by the user (was {:?})", task.phase);
        back_to_pending(tx, task, "retry", message, now_ms)
    }
}

/// Sets `task` Pending with no backoff, saves it and logs `kind` with `message`, in `tx`,
/// which is committed.
fn back_to_pending(
    tx: rusqlite::Transaction<'_>,
    mut task: TaskRow,
    kind: &str,
    message: String,
    now_ms: i64,
) -> Result<TaskRow, StoreError> {
    task.phase = TaskPhase::Pending;
    task.next_attempt_after_ms = None;
    save(&tx, &task)?;
    events::append(&tx, now_ms, &NewEvent::task(task.name(), kind, message))?;
    tx.commit()?;
    Ok(task)
}
