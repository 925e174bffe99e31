//! The database schema, created on first open.

use rusqlite::Connection;

const SCHEMA_VERSION: i64 = 2;

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

/// Creates the tables when missing, adds columns newer versions need, and records the
/// schema version.
pub(super) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(SCHEMA)?;
    add_missing_column(conn, "attempts", "kind", "TEXT NOT NULL DEFAULT 'work'")?;
    conn.execute_batch(super::memory::SCHEMA)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
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
