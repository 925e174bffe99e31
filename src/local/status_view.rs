//! What `ralph status` and `ralph task list|show` print about a local run's state.

use crate::engine::verification::AttemptKind;
use std::fmt::Write as _;

use serde::Serialize;

use crate::engine::budget::{Budget, UsageTotals};
use crate::engine::dag::TaskPhase;
use crate::local::planning::PlanState;
use crate::local::store::{AttemptRow, ClaimRow, TaskRow};
use crate::local::table::{
    Column::{Left, Right},
    Table,
};

/// One task in `ralph status` / `ralph task list`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskLine {
    /// Task ID.
    pub task: String,
    /// Phase.
    pub phase: TaskPhase,
    /// Where the task came from.
    pub origin: Origin,
    /// Spec generation.
    pub generation: i64,
    /// Attempts started.
    pub attempts: u32,
    /// Retries used.
    pub retries: u32,
    /// Attempt holding the claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimLine>,
    /// No attempt before this time (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_after_ms: Option<i64>,
    /// Last failure or crash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_problem: Option<String>,
    /// Tokens and cost of its ended attempts (unknown costs counted apart).
    pub usage: UsageTotals,
    /// Its ended attempts that reported no tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens_unreported: u32,
}

/// Where a task came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Origin {
    /// Written in the manifest.
    #[default]
    HandWritten,
    /// Written by the planner (docs/planning.md).
    Planned,
    /// Proposed by a done task's attempt (`<ralph:propose-tasks>`).
    Proposed,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::HandWritten => "hand-written",
            Origin::Planned => "planned",
            Origin::Proposed => "proposed",
        })
    }
}

/// A claim as shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimLine {
    /// Attempt ID.
    pub holder: String,
    /// Runner pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Expiry (Unix ms).
    pub expires_at_ms: i64,
}

/// The whole state as shown by `ralph status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusView {
    /// Feature name.
    pub feature: String,
    /// The outcome the last run ended with, if it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why the feature was stopped, if an agent promised FAILURE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Tasks per phase.
    pub counts: Counts,
    /// Tasks in creation order.
    pub tasks: Vec<TaskLine>,
    /// Tokens and cost of all ended attempts.
    pub usage: UsageTotals,
    /// Ended attempts that reported no tokens (their tokens are unknown, not 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens_unreported: u32,
    /// The feature's budget (`spec.budget`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// Tasks per phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Counts {
    /// All tasks.
    pub total: usize,
    /// Pending.
    pub pending: usize,
    /// Running.
    pub running: usize,
    /// Done.
    pub done: usize,
    /// Failed.
    pub failed: usize,
    /// Blocked.
    pub blocked: usize,
}

impl Counts {
    /// Counts the phases of `tasks`.
    pub(crate) fn of(tasks: &[TaskRow]) -> Counts {
        let mut counts = Counts {
            total: tasks.len(),
            ..Counts::default()
        };
        for task in tasks {
            *match task.phase {
                TaskPhase::Pending => &mut counts.pending,
                TaskPhase::Running => &mut counts.running,
                TaskPhase::Done => &mut counts.done,
                TaskPhase::Failed => &mut counts.failed,
                TaskPhase::Blocked => &mut counts.blocked,
            } += 1;
        }
        counts
    }
}

/// The budget as used of limit: `budget: cost $0.05 of $5.00, tokens 2480 of 2000000`.
fn budget_line(budget: &Budget, usage: &UsageTotals) -> String {
    let mut parts = Vec::new();
    if let Some(limit) = budget.max_cost {
        let spent = match (usage.cost_usd, usage.attempts_with_unknown_cost) {
            (None, 0) => "$0.00".to_owned(),
            _ => usage.cost_text(),
        };
        parts.push(format!("cost {spent} of ${limit}"));
    }
    if let Some(limit) = budget.max_tokens {
        parts.push(format!("tokens {} of {limit}", usage.tokens()));
    }
    format!("budget: {}", parts.join(", "))
}

/// One line per task; usage from the stored `attempts`, origin from `planning`.
pub(crate) fn task_lines(
    tasks: &[TaskRow],
    claims: &[ClaimRow],
    attempts: &[AttemptRow],
    planning: &PlanState,
) -> Vec<TaskLine> {
    tasks
        .iter()
        .map(|task| TaskLine {
            task: task.name().to_string(),
            phase: task.phase,
            origin: planning.origin(task.name()),
            generation: task.generation,
            attempts: task.attempt_count,
            retries: task.retry_count,
            claim: claims
                .iter()
                .find(|c| c.task == task.name())
                .map(|c| ClaimLine {
                    holder: c.holder.clone(),
                    pid: c.process.map(|p| p.pid),
                    expires_at_ms: c.expires_at_ms,
                }),
            next_attempt_after_ms: task.next_attempt_after_ms,
            last_problem: task.previous_attempt.as_deref().map(previous_attempt_text),
            usage: crate::local::budget::task_totals(task.name(), attempts),
            tokens_unreported: crate::local::budget::tokens_unreported(
                attempts
                    .iter()
                    .filter(|attempt| attempt.task == task.name()),
            ),
        })
        .collect()
}

/// Tokens in a table column, marked as the cost column is: `240`, `240+?` (some attempts
/// reported none), `?` (none did), `-` (nothing ended).
fn tokens_column(usage: &UsageTotals, unreported: u32) -> String {
    match (usage.tokens(), unreported) {
        (0, 0) => "-".to_owned(),
        (tokens, 0) => tokens.to_string(),
        (0, _) => "?".to_owned(),
        (tokens, _) => format!("{tokens}+?"),
    }
}

/// The task table as text; times relative to `now_ms`.
pub(crate) fn render_tasks(lines: &[TaskLine], now_ms: i64) -> String {
    let mut table = Table::of_tasks(
        lines.iter().map(|l| l.task.as_str()),
        &[
            Left(8),
            Right(3),
            Right(8),
            Right(7),
            Right(9),
            Right(9),
            Left(12),
        ],
    );
    table.row(&[
        &"TASK",
        &"PHASE",
        &"GEN",
        &"ATTEMPTS",
        &"RETRIES",
        &"TOKENS",
        &"COST",
        &"FROM",
        &"NOTE",
    ]);
    for line in lines {
        let note = match (&line.claim, line.next_attempt_after_ms, &line.last_problem) {
            (Some(claim), ..) => format!(
                "claimed by {} (pid {}, expires in {})",
                claim.holder,
                claim.pid.map_or("-".to_string(), |p| p.to_string()),
                relative(claim.expires_at_ms - now_ms)
            ),
            (None, Some(after), _) if after > now_ms => {
                format!("retry in {}", relative(after - now_ms))
            }
            (None, _, Some(problem)) => problem.clone(),
            _ => String::new(),
        };
        table.row(&[
            &line.task,
            &format!("{:?}", line.phase),
            &line.generation,
            &line.attempts,
            &line.retries,
            &tokens_column(&line.usage, line.tokens_unreported),
            &line.usage.cost_column(),
            &line.origin,
            &crate::local::activity::truncate(&note, 100),
        ]);
    }
    table.render()
}

/// `ralph status` as text.
pub(crate) fn render_status(view: &StatusView, now_ms: i64) -> String {
    let mut out = String::new();
    let state = view.outcome.as_deref().unwrap_or("not finished");
    let _ = writeln!(out, "feature {}: {state}", view.feature);
    if let Some(reason) = &view.stopped {
        let _ = writeln!(out, "stopped by an agent: {reason}");
    }
    let c = &view.counts;
    let _ = writeln!(
        out,
        "tasks: {} total, {} done, {} running, {} pending, {} failed, {} blocked",
        c.total, c.done, c.running, c.pending, c.failed, c.blocked
    );
    let _ = writeln!(out, "{}", usage_line(&view.usage, view.tokens_unreported));
    if let Some(budget) = &view.budget {
        let _ = writeln!(out, "{}", budget_line(budget, &view.usage));
    }
    out.push_str(&render_tasks(&view.tasks, now_ms));
    out
}

/// `ralph task show NAME` as text.
pub(crate) fn render_task(
    task: &TaskRow,
    claim: Option<&ClaimRow>,
    attempts: &[AttemptRow],
) -> String {
    let spec = &task.spec;
    let mut out = String::new();
    let _ = writeln!(out, "task {}: {}", spec.name, spec.fields.title);
    let _ = writeln!(
        out,
        "phase: {:?} (generation {})",
        task.phase, task.generation
    );
    let _ = writeln!(out, "priority: {}", spec.fields.priority);
    if !spec.fields.depends_on.is_empty() {
        let _ = writeln!(out, "depends on: {}", spec.fields.depends_on.join(", "));
    }
    if let Some(parent) = &spec.fields.parent {
        let _ = writeln!(out, "parent: {parent}");
    }
    let _ = writeln!(
        out,
        "attempts: {}, retries used: {}",
        task.attempt_count, task.retry_count
    );
    if let Some(claim) = claim {
        let _ = writeln!(
            out,
            "claim: {} (pid {}), expires at {} ms",
            claim.holder,
            claim.process.map_or("-".to_string(), |p| p.pid.to_string()),
            claim.expires_at_ms
        );
    }
    if let Some(previous) = &task.previous_attempt {
        let _ = writeln!(out, "{}", previous_attempt_text(previous));
    }
    let usage = crate::local::budget::attempt_totals(attempts);
    let unreported = crate::local::budget::tokens_unreported(attempts);
    let _ = writeln!(out, "{}", usage_line(&usage, unreported));
    for attempt in attempts {
        let duration = attempt.ended_at_ms.map_or("running".to_string(), |end| {
            format!("{:.1}s", (end - attempt.started_at_ms) as f64 / 1000.0)
        });
        let kind = match attempt.kind {
            AttemptKind::Work => "",
            AttemptKind::Verify => "verification ",
        };
        let _ = writeln!(
            out,
            "  {} (gen {}): {kind}{} {} {} {}",
            attempt.id,
            attempt.generation,
            attempt.outcome.as_deref().unwrap_or("-"),
            duration,
            attempt_usage(attempt),
            attempt
                .details
                .crash
                .as_deref()
                .or(attempt.details.message.as_deref())
                .unwrap_or("")
        );
    }
    let _ = writeln!(out, "description:\n{}", spec.fields.description);
    out
}

/// `usage: 240 tokens (...); cost $0.50`, and how many attempts reported no tokens.
fn usage_line(usage: &UsageTotals, tokens_unreported: u32) -> String {
    let unreported = match tokens_unreported {
        0 => String::new(),
        1 => " (1 attempt reported no tokens)".to_owned(),
        n => format!(" ({n} attempts reported no tokens)"),
    };
    format!(
        "usage: {}{unreported}; cost {}",
        usage.tokens_text(),
        usage.cost_text()
    )
}

/// One attempt's tokens and cost in words: `2040 tokens, $0.0126`, `tokens unknown, cost
/// unknown`, or nothing while it runs.
fn attempt_usage(attempt: &AttemptRow) -> String {
    if attempt.ended_at_ms.is_none() {
        return String::new();
    }
    let spent = crate::local::budget::attempt_totals([attempt]);
    let tokens = match crate::local::budget::tokens_unreported([attempt]) {
        0 => format!("{} tokens", spent.tokens()),
        _ => "tokens unknown".to_owned(),
    };
    let cost = spent
        .cost_usd
        .map_or_else(|| "cost unknown".to_owned(), |cost| format!("${cost}"));
    format!("{tokens}, {cost}")
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

fn relative(ms: i64) -> String {
    if ms <= 0 {
        "now (expired)".to_string()
    } else {
        crate::clock::format_duration(std::time::Duration::from_secs(
            u64::try_from(ms / 1000).unwrap_or(0),
        ))
    }
}

/// "Previous attempt crashed: …" from the stored JSON (the raw text if it does not parse).
pub(crate) fn previous_attempt_text(json: &str) -> String {
    serde_json::from_str::<crate::engine::policy::PreviousAttempt>(json)
        .map_or_else(|_| json.to_string(), |previous| previous.to_string())
}
