//! `ralph journal` and `ralph knowledge`: what a local run remembers.

use std::fmt::Write;
use std::process::ExitCode;

use crate::cli::status::StateArgs;
use crate::engine::memory::{JournalEntry, KnowledgeEntry};

/// Options of `ralph journal`.
#[derive(Debug, clap::Args)]
pub struct JournalArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Only this task's entries.
    #[arg(long, value_name = "TASK")]
    task: Option<String>,
    /// Only entries holding every one of these words (full-text search), best match first.
    #[arg(long, short = 's', value_name = "WORDS")]
    search: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Options of `ralph knowledge`.
#[derive(Debug, clap::Args)]
pub struct KnowledgeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `ralph journal`: one entry per ended attempt, oldest first.
pub(crate) async fn journal(args: JournalArgs) -> anyhow::Result<ExitCode> {
    let store = args.state.open()?;
    let task = args.task.as_deref();
    let entries = match &args.search {
        Some(words) => store.search_journal(words, task)?,
        None => store.journal(task)?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        print!("{}", render_journal(&entries));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `ralph knowledge`: what agents of the run learned (the manifest's seeded knowledge
/// is not repeated).
pub(crate) async fn knowledge(args: KnowledgeArgs) -> anyhow::Result<ExitCode> {
    let book = args.state.open()?.learned_knowledge()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&book)?);
    } else {
        print!("{}", render_knowledge(&book));
    }
    Ok(ExitCode::SUCCESS)
}

fn render_journal(entries: &[JournalEntry]) -> String {
    if entries.is_empty() {
        return "no journal entries\n".to_owned();
    }
    let mut out = String::new();
    for entry in entries {
        let _ = writeln!(
            out,
            "{}-a{}  {}  {}",
            entry.task,
            entry.attempt,
            entry.outcome,
            entry.figures()
        );
        if let Some(detail) = &entry.detail {
            let _ = writeln!(out, "  why: {detail}");
        }
        for note in &entry.notes {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    out
}

fn render_knowledge(book: &[KnowledgeEntry]) -> String {
    if book.is_empty() {
        return "no knowledge learned\n".to_owned();
    }
    let mut out = String::new();
    for entry in book {
        let source = entry.source.as_deref().unwrap_or("unknown");
        let _ = writeln!(
            out,
            "{} [{}] (from {source})",
            entry.title,
            entry.tags.join(", ")
        );
        for line in entry.body.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}
