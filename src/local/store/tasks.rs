//! Reading and saving task rows; `task reset` and `task retry`.

use rusqlite::{Connection, Row, params};

use super::rows::{NewEvent, TaskRow};
use super::{Store, StoreError, events};
use crate::engine::dag::TaskPhase;

const COLUMNS: &str = "spec, ord, generation, phase, retry_count, attempt_count, \
    next_attempt_after_ms, previous_attempt, usage, removed";

/// Reads a task row: its columns ([`COLUMNS`]), the JSON and the phase decoded.
fn decode(row: &Row<'_>) -> Result<TaskRow, StoreError> {
    let spec: crate::local::feature::LocalTask = serde_json::from_str(&row.get::<_, String>(0)?)
        .map_err(|error| StoreError::corrupt("task spec", error))?;
    let what = |field: &str| format!("task {:?} field {field}", spec.name);
    let order = u64::try_from(row.get::<_, i64>(1)?)
        .map_err(|error| StoreError::corrupt(what("ord"), error))?;
    let phase: String = row.get(3)?;
    let phase =
        TaskPhase::parse(&phase).ok_or_else(|| StoreError::corrupt(what("phase"), &phase))?;
    let usage = serde_json::from_str(&row.get::<_, String>(8)?)
        .map_err(|error| StoreError::corrupt(what("usage"), error))?;
    Ok(TaskRow {
        spec,
        order,
        generation: row.get(2)?,
        phase,
        retry_count: row.get(4)?,
        attempt_count: row.get(5)?,
        next_attempt_after_ms: row.get(6)?,
        previous_attempt: row.get(7)?,
        usage,
        removed: row.get(9)?,
    })
}

pub(super) fn load_all(conn: &Connection) -> Result<Vec<TaskRow>, StoreError> {
    let mut statement = conn.prepare(&format!("SELECT {COLUMNS} FROM tasks ORDER BY ord, name"))?;
    statement.query_and_then([], decode)?.collect()
}

pub(super) fn load(conn: &Connection, name: &str) -> Result<TaskRow, StoreError> {
    let mut statement = conn.prepare(&format!("SELECT {COLUMNS} FROM tasks WHERE name = ?1"))?;
    let found = statement.query_and_then([name], decode)?.next();
    found.unwrap_or_else(|| Err(StoreError::UnknownTask(name.to_string())))
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

    /// `ralph task retry`: sets a Failed or Blocked task back to Pending with its retries
    /// given back; what the next prompt says about the last failure is kept.
    pub fn retry_task(&mut self, name: &str, now_ms: i64) -> Result<TaskRow, StoreError> {
        let tx = self.conn.transaction()?;
        let mut task = load(&tx, name)?;
        if !matches!(task.phase, TaskPhase::Failed | TaskPhase::Blocked) {
            return Err(StoreError::WrongPhase {
                task: name.to_string(),
                phase: task.phase,
                what: "only a Failed or Blocked task can be retried (use `ralph task reset`)"
                    .to_string(),
            });
        }
        let message = format!(
            "retry requested by the user (was {:?}): {} retries given back",
            task.phase, task.retry_count
        );
        task.retry_count = 0;
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
