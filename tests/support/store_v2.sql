-- The schema of a local run's store as ralph wrote it at schema version 2 (PRAGMA
-- user_version = 2), before the store named its Feature: the previous release's store.
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
PRAGMA user_version = 2;
