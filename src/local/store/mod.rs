//! The embedded state of a local run: one SQLite database (WAL) under the state directory
//! holding tasks, claims, attempts and an event log. Every state change is one transaction.

mod attempts;
mod claims;
mod events;
mod memory;
mod planning;
mod rows;
mod schema;
mod sync;
mod tasks;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

pub use rows::{
    AttemptClose, AttemptRow, ClaimRow, EndDetails, EventRow, NewEvent, TaskRow, Transition,
};
pub use sync::SyncReport;

use crate::engine::dag::TaskPhase;

/// File name of the database inside the state directory.
pub const DATABASE_FILE: &str = "ralph.db";

/// Errors of the local store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory or database could not be created or opened.
    #[error("cannot open the state database {path}: {source}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// The cause.
        source: rusqlite::Error,
    },
    /// The state directory could not be created.
    #[error("cannot create the state directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No state exists at this path (nothing has run there yet).
    #[error("no local run state in {0} (run `ralph run FILE` first, or pass --state DIR)")]
    NoState(PathBuf),
    /// A database operation failed.
    #[error("state database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored value could not be read back.
    #[error("corrupt state: {what}: {detail}")]
    Corrupt {
        /// Which record and field.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The named task is not in the state.
    #[error("no task named {0:?} in this run (see `ralph task list`)")]
    UnknownTask(String),
    /// The task is not in a phase that allows the change.
    #[error("task {task:?} is {phase:?}: {what}")]
    WrongPhase {
        /// The task.
        task: String,
        /// Its phase.
        phase: TaskPhase,
        /// What was refused.
        what: String,
    },
    /// Another `ralph run` is working on this state.
    #[error("another `ralph run` (process {0}) is working on this state; wait for it or stop it")]
    Busy(String),
    /// A newer ralph wrote the store: reading it could misread it.
    #[error(
        "the state database {path} was written by a newer ralph (schema version {found}; this \
         ralph reads up to {supported}): run it with that ralph, or start over with `ralph \
         reset`"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The version it has.
        found: i64,
        /// The newest version this ralph reads.
        supported: i64,
    },
    /// The state belongs to another Feature.
    #[error(
        "the state in {dir} belongs to feature {recorded:?}, not {wanted:?}: each Feature \
         needs its own state directory (leave --state out to use .ralph/{wanted}/ beside the \
         manifest)"
    )]
    OtherFeature {
        /// The state directory.
        dir: PathBuf,
        /// The Feature it holds.
        recorded: String,
        /// The Feature that was to run on it.
        wanted: String,
    },
    /// A claim exists for the task already.
    #[error("task {task:?} is already claimed by attempt {holder}")]
    AlreadyClaimed {
        /// The task.
        task: String,
        /// The attempt holding the claim.
        holder: String,
    },
}

impl StoreError {
    /// `what` (a record and field) holds a value that cannot be read or written: `detail`.
    pub(crate) fn corrupt(what: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        StoreError::Corrupt {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}

/// Handle on the state database of one local run.
pub struct Store {
    conn: Connection,
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the state in `dir`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        Self::connect(dir)
    }

    /// Opens the state in `dir`, failing when nothing has run there.
    pub fn open_existing(dir: &Path) -> Result<Store, StoreError> {
        if !dir.join(DATABASE_FILE).is_file() {
            return Err(StoreError::NoState(dir.to_path_buf()));
        }
        Self::connect(dir)
    }

    fn connect(dir: &Path) -> Result<Store, StoreError> {
        let path = dir.join(DATABASE_FILE);
        let open = |path: &Path| -> rusqlite::Result<Connection> {
            let conn = Connection::open(path)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            Ok(conn)
        };
        let mut conn = open(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        schema::migrate(&mut conn, &path)?;
        Ok(Store {
            conn,
            dir: dir.to_path_buf(),
        })
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Directory kept for one attempt (prompt, result, heartbeat, runner log).
    pub fn attempt_dir(&self, attempt: &str) -> PathBuf {
        self.dir.join("attempts").join(attempt)
    }

    /// Reads a value from the key/value metadata.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(read_meta(&self.conn, key)?)
    }

    /// Records `owner` (e.g. `pid:starttime`) as the run working on this state, unless
    /// another owner is recorded and `alive` says it still runs.
    pub fn take_run_ownership(
        &mut self,
        owner: &str,
        alive: impl Fn(&str) -> bool,
    ) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current = read_meta(&tx, keys::RUN_OWNER)?;
        if let Some(current) = current.filter(|current| current != owner && alive(current)) {
            return Err(StoreError::Busy(current));
        }
        write_meta(&tx, keys::RUN_OWNER, Some(owner))?;
        tx.commit()?;
        Ok(())
    }

    /// Clears the run owner if it is still `owner`.
    pub fn release_run_ownership(&mut self, owner: &str) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "DELETE FROM meta WHERE key = ?1 AND value = ?2",
            params![keys::RUN_OWNER, owner],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Writes a value to the key/value metadata (its own transaction).
    pub fn set_meta(&mut self, key: &str, value: Option<&str>) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        write_meta(&tx, key, value)?;
        tx.commit()?;
        Ok(())
    }
}

fn read_meta(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
        row.get(0)
    })
    .optional()
}

fn write_meta(conn: &Connection, key: &str, value: Option<&str>) -> rusqlite::Result<()> {
    match value {
        Some(value) => conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?,
        None => conn.execute("DELETE FROM meta WHERE key = ?1", [key])?,
    };
    Ok(())
}

/// Metadata keys.
pub(crate) mod keys {
    /// The feature spec last synced, as JSON.
    pub(crate) const FEATURE: &str = "feature";
    /// The name of the Feature the store belongs to (schema 3).
    pub(crate) const FEATURE_NAME: &str = "feature_name";
    /// Why the feature was stopped (`<promise>FAILURE</promise>` reason).
    pub(crate) const STOPPED: &str = "stopped";
    /// `pid:starttime` of the `ralph run` process working on this state.
    pub(crate) const RUN_OWNER: &str = "run_owner";
    /// The outcome the last run ended with.
    pub(crate) const OUTCOME: &str = "outcome";
    /// Where planning stands: the plan, its approval, the planning attempts (JSON).
    pub(crate) const PLANNING: &str = "planning";
}

#[cfg(test)]
mod tests;
