//! The journal and the knowledge of a local run: a journal row per ended attempt (searchable
//! with SQLite FTS5) and the feature's learned knowledge, both written in the transaction
//! that closes the attempt.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::AttemptClose;
use super::{Store, StoreError};
use crate::engine::attempt::AttemptResult;
use crate::engine::memory::journal::{self, AttemptFacts};
use crate::engine::memory::{JournalEntry, KnowledgeEntry, knowledge};
use crate::engine::policy::AttemptOutcome;
use crate::engine::sigils::Sigils;

/// Tables of the memory (part of the schema).
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL,
    number INTEGER NOT NULL,
    ended_at_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT,
    notes TEXT NOT NULL,
    entry TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_by_task ON journal (task, ended_at_ms);
CREATE VIRTUAL TABLE IF NOT EXISTS journal_search USING fts5 (
    task, outcome, detail, notes, content = 'journal', content_rowid = 'seq'
);
CREATE TRIGGER IF NOT EXISTS journal_indexed AFTER INSERT ON journal BEGIN
    INSERT INTO journal_search (rowid, task, outcome, detail, notes)
    VALUES (new.seq, new.task, new.outcome, new.detail, new.notes);
END;
CREATE TABLE IF NOT EXISTS knowledge (
    key TEXT PRIMARY KEY,
    recorded_at_ms INTEGER NOT NULL,
    entry TEXT NOT NULL
);
";

/// Records the journal entry of the attempt `close` ends, and the knowledge it brought.
pub(super) fn record(conn: &Connection, close: &AttemptClose) -> Result<(), StoreError> {
    let started: Option<(String, u32, i64)> = conn
        .query_row(
            "SELECT task, number, started_at_ms FROM attempts WHERE id = ?1",
            [&close.id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()?;
    let Some((task, number, started_at_ms)) = started else {
        return Ok(());
    };
    let outcome: AttemptOutcome =
        serde_json::from_value(serde_json::Value::String(close.outcome.clone()))
            .map_err(|e| StoreError::corrupt(format!("attempt {} outcome", close.id), e))?;
    let sigils = match close.details.result.as_deref() {
        Some(json) => serde_json::from_str::<AttemptResult>(json)
            .map(|result| result.sigils)
            .unwrap_or_default(),
        None => Sigils::default(),
    };
    let entry = journal::entry(&AttemptFacts {
        task: &task,
        attempt: number,
        outcome,
        started_at_ms: Some(started_at_ms),
        ended_at_ms: close.ended_at_ms,
        usage: &close.details.usage,
        sigils: &sigils,
        crash: close.details.crash.as_deref(),
    });
    insert_journal(conn, &close.id, &entry)?;
    let learned: Vec<KnowledgeEntry> = sigils
        .knowledge
        .iter()
        .map(|k| KnowledgeEntry::learned(k, &close.id, close.ended_at_ms))
        .collect();
    if !learned.is_empty() {
        let mut book = load_knowledge(conn)?;
        if knowledge::learn(&mut book, learned) {
            save_knowledge(conn, &book)?;
        }
    }
    Ok(())
}

fn insert_journal(
    conn: &Connection,
    attempt: &str,
    entry: &JournalEntry,
) -> Result<(), StoreError> {
    let json = serde_json::to_string(entry)
        .map_err(|e| StoreError::corrupt(format!("journal of {attempt}"), e))?;
    let notes = entry.notes.join("\n");
    conn.execute(
        "INSERT OR IGNORE INTO journal (attempt, task, number, ended_at_ms, outcome, detail, notes, entry)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            attempt,
            entry.task,
            entry.attempt,
            entry.ended_at_ms,
            entry.outcome.as_str(),
            entry.detail,
            notes,
            json
        ],
    )?;
    Ok(())
}

fn load_knowledge(conn: &Connection) -> Result<Vec<KnowledgeEntry>, StoreError> {
    read_documents(
        conn,
        "SELECT key, entry FROM knowledge ORDER BY recorded_at_ms, key",
        [],
        |key| format!("knowledge {key:?}"),
    )
}

/// Runs `sql`, which selects a key and a JSON document, and parses each document; `what`
/// names the document of a key in errors.
fn read_documents<T: serde::de::DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: impl Fn(&str) -> String,
) -> Result<Vec<T>, StoreError> {
    let mut statement = conn.prepare(sql)?;
    let rows = statement
        .query_map(params, |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(key, json)| {
            serde_json::from_str(&json).map_err(|e| StoreError::corrupt(what(&key), e))
        })
        .collect()
}

fn save_knowledge(conn: &Connection, book: &[KnowledgeEntry]) -> Result<(), StoreError> {
    conn.execute("DELETE FROM knowledge", [])?;
    for entry in book {
        let json = serde_json::to_string(entry)
            .map_err(|e| StoreError::corrupt(format!("knowledge {:?}", entry.title), e))?;
        conn.execute(
            "INSERT INTO knowledge (key, recorded_at_ms, entry) VALUES (?1, ?2, ?3)",
            params![entry.key(), entry.recorded_at_ms, json],
        )?;
    }
    Ok(())
}

/// An FTS5 query matching every word of `query` (each quoted, so no word is an operator).
fn fts_query(query: &str) -> String {
    query
        .split_whitespace()
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Store {
    /// Journal entries, oldest first; of one task when given.
    pub fn journal(&self, task: Option<&str>) -> Result<Vec<JournalEntry>, StoreError> {
        match task {
            Some(task) => self.read_journal(
                "SELECT attempt, entry FROM journal WHERE task = ?1 ORDER BY ended_at_ms, seq",
                params![task],
            ),
            None => self.read_journal(
                "SELECT attempt, entry FROM journal ORDER BY ended_at_ms, seq",
                params![],
            ),
        }
    }

    /// Journal entries whose task, outcome, reason or notes hold every word of `query`
    /// (full-text search), best match first; of one task when given.
    pub fn search_journal(
        &self,
        query: &str,
        task: Option<&str>,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let query = fts_query(query);
        if query.is_empty() {
            return self.journal(task);
        }
        self.read_journal(
            "SELECT journal.attempt, journal.entry FROM journal_search
             JOIN journal ON journal.seq = journal_search.rowid
             WHERE journal_search MATCH ?1 AND (?2 IS NULL OR journal.task = ?2)
             ORDER BY rank",
            params![query, task],
        )
    }

    fn read_journal(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        read_documents(&self.conn, sql, params, |attempt| {
            format!("journal of {attempt}")
        })
    }

    /// The knowledge agents wrote in this run's attempts, oldest first.
    pub fn learned_knowledge(&self) -> Result<Vec<KnowledgeEntry>, StoreError> {
        load_knowledge(&self.conn)
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
