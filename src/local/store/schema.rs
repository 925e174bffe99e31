//! The database schema: created on first open, migrated from an older ralph's, refused
//! when a newer ralph wrote it.

use rusqlite::{Connection, TransactionBehavior};

use super::{StoreError, keys};

/// The schema version this ralph writes (`PRAGMA user_version`). 3: the store belongs to
/// one Feature, named in `meta` (`feature_name`).
pub(super) const SCHEMA_VERSION: i64 = 3;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    ord INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    phase TEXT NOT NULL,
    retry_count INTEGER NOT NULL DEFAULT 0,
    attempt_count INTEGER NOT NULL DEFAULT 0,
    next_attempt_after_ms INTEGER,
    previous_attempt TEXT,
    usage TEXT NOT NULL DEFAULT '{}',
    removed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS claims (
    task TEXT PRIMARY KEY REFERENCES tasks (name) ON DELETE CASCADE,
    holder TEXT NOT NULL,
    pid INTEGER,
    pid_start INTEGER,
    acquired_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    number INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    outcome TEXT,
    stop_reason TEXT,
    crash TEXT,
    message TEXT,
    usage TEXT NOT NULL DEFAULT '{}',
    result TEXT,
    kind TEXT NOT NULL DEFAULT 'work'
);
CREATE INDEX IF NOT EXISTS attempts_by_task ON attempts (task, number);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    task TEXT,
    attempt TEXT,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
";

/// Brings the store at `path` to [`SCHEMA_VERSION`] in one transaction: creates the tables
/// when missing and migrates an older ralph's store; a store of a newer ralph is refused,
/// never misread.
pub(super) fn migrate(conn: &mut Connection, path: &std::path::Path) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    add_missing_column(&tx, "attempts", "kind", "TEXT NOT NULL DEFAULT 'work'")?;
    tx.execute_batch(super::memory::SCHEMA)?;
    name_the_feature(&tx)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

/// Version 3: records the name of the Feature a store of version 2 or older holds (from
/// the feature spec it last synced).
fn name_the_feature(conn: &Connection) -> Result<(), StoreError> {
    let Some(spec) = super::read_meta(conn, keys::FEATURE)? else {
        return Ok(());
    };
    let value: serde_json::Value =
        serde_json::from_str(&spec).map_err(|error| StoreError::corrupt("feature spec", error))?;
    let name = value["name"]
        .as_str()
        .ok_or_else(|| StoreError::corrupt("feature spec", "it has no name"))?;
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
        [keys::FEATURE_NAME, name],
    )?;
    Ok(())
}

/// Adds `column` to `table` of a store created before the column existed.
fn add_missing_column(
    conn: &Connection,
    table: &str,
    column: &str,
    definition: &str,
) -> rusqlite::Result<()> {
    let exists: bool = conn.query_row(
        &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = ?1"),
        [column],
        |row| row.get(0),
    )?;
    if !exists {
        conn.execute_batch(&format!(
            "ALTER TABLE {table} ADD COLUMN {column} {definition}"
        ))?;
    }
    Ok(())
}
