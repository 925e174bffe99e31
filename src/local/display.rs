//! What a person sees during `ralph run`: a live progress display on a terminal (one line per
//! running task with its elapsed time and last activity, and an overall bar), plain log lines
//! otherwise, or one JSON event per line with `--json`.

use crate::engine::verification::AttemptKind;
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::local::run_event::RunEvent;

/// How run events are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Live progress bars on the terminal (stderr), final summary on stdout.
    Progress,
    /// One plain log line per event on stdout.
    Plain,
    /// One JSON object per event on stdout.
    Json,
}

impl Mode {
    /// `Json` when asked, else `Progress` on a terminal and `Plain` otherwise.
    pub fn detect(json: bool) -> Mode {
        use std::io::IsTerminal;
        if json {
            Mode::Json
        } else if std::io::stderr().is_terminal() && std::io::stdout().is_terminal() {
            Mode::Progress
        } else {
            Mode::Plain
        }
    }
}

struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    running: HashMap<String, ProgressBar>,
}

/// Renders [`RunEvent`]s in one [`Mode`].
pub struct Display {
    mode: Mode,
    started: Instant,
    bars: Option<Bars>,
}

impl std::fmt::Debug for Display {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Display").field("mode", &self.mode).finish()
    }
}

impl Display {
    /// A display in `mode`.
    pub fn new(mode: Mode) -> Display {
        Display {
            mode,
            started: Instant::now(),
            bars: None,
        }
    }

    /// Runs `f` with the live progress hidden (a question to a person on the terminal).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bars {
            Some(bars) => bars.multi.suspend(f),
            None => f(),
        }
    }

    /// Shows one event.
    pub fn show(&mut self, event: &RunEvent) {
        match self.mode {
            Mode::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    print_line(&line);
                }
            }
            Mode::Plain => {
                if let Some(line) = plain_line(event) {
                    let secs = self.started.elapsed().as_secs_f64();
                    print_line(&format!("[{secs:7.1}s] {line}"));
                }
            }
            Mode::Progress => self.progress(event),
        }
    }

    fn progress(&mut self, event: &RunEvent) {
        if let RunEvent::Plan { total, done, .. } = event {
            self.bars = Some(new_bars(*total, *done));
        }
        let Some(bars) = self.bars.as_mut() else {
            if let Some(line) = plain_line(event) {
                eprintln!("{line}");
            }
            return;
        };
        match event {
            RunEvent::Started { task, attempt, .. } => {
                let bar = bars
                    .multi
                    .insert_before(&bars.overall, task_bar(task, attempt));
                bars.running.insert(attempt.clone(), bar);
            }
            RunEvent::Activity { attempt, text, .. } => {
                if let Some(bar) = bars.running.get(attempt) {
                    bar.set_message(text.clone());
                }
            }
            RunEvent::Ended {
                task,
                attempt,
                phase,
                ..
            } => {
                if let Some(bar) = bars.running.remove(attempt) {
                    bar.finish_and_clear();
                    bars.multi.remove(&bar);
                }
                // A planning attempt is no task of the plan the bar counts.
                if *phase == crate::engine::dag::TaskPhase::Done
                    && task != crate::engine::planning::PLANNING_TASK
                {
                    bars.overall.inc(1);
                }
                println_above(bars, event);
            }
            RunEvent::Transition { to, .. } => {
                if *to == crate::engine::dag::TaskPhase::Done {
                    bars.overall.inc(1);
                }
                println_above(bars, event);
            }
            RunEvent::Finished { .. } | RunEvent::Summary(_) => {
                for (_, bar) in bars.running.drain() {
                    bar.finish_and_clear();
                }
                bars.overall.finish_and_clear();
                let _ = bars.multi.clear();
                if let RunEvent::Summary(summary) = event {
                    print!("{}", summary.render());
                } else if let Some(line) = plain_line(event) {
                    print_line(&line);
                }
            }
            _ => println_above(bars, event),
        }
    }
}

fn new_bars(total: usize, done: usize) -> Bars {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let overall = multi.add(ProgressBar::new(total as u64));
    overall.set_style(
        ProgressStyle::with_template("{bar:40.cyan/blue} {pos}/{len} tasks done  [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    overall.set_position(done as u64);
    overall.enable_steady_tick(Duration::from_millis(250));
    Bars {
        multi,
        overall,
        running: HashMap::new(),
    }
}

fn task_bar(task: &str, attempt: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix:.bold} {elapsed:>4} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let number = attempt.rsplit("-a").next().unwrap_or(attempt);
    bar.set_prefix(format!("{task} (a{number})"));
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn println_above(bars: &Bars, event: &RunEvent) {
    if let Some(line) = plain_line(event) {
        let _ = bars.multi.println(line);
    }
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) must not stop the run.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The plain-text line for an event, `None` for events shown only live (activity).
pub(crate) fn plain_line(event: &RunEvent) -> Option<String> {
    Some(match event {
        RunEvent::Plan {
            feature,
            total,
            done,
            added,
            edited,
            removed,
        } => plan_line(feature, *total, *done, [added, edited, removed]),
        RunEvent::Started {
            task,
            attempt,
            generation,
            kind: AttemptKind::Work,
        } => format!("{task}: started {attempt} (generation {generation})"),
        RunEvent::Started {
            task,
            attempt,
            generation,
            kind: AttemptKind::Verify,
        } => format!("{task}: started {attempt}: verification (generation {generation})"),
        RunEvent::Activity { .. } => return None,
        RunEvent::Ended {
            task,
            attempt,
            outcome,
            phase,
            duration_ms,
            retry_at_ms,
            message,
        } => {
            let ended = format!(
                "{task}: {attempt} {outcome} after {:.1}s, task {phase:?}",
                *duration_ms as f64 / 1000.0
            );
            ended_line(ended, *retry_at_ms, message.as_deref())
        }
        RunEvent::Transition {
            task,
            from,
            to,
            reason,
        } => format!("{task}: {from:?} -> {to:?} ({reason})"),
        RunEvent::Warning {
            task: Some(task),
            message,
        } => format!("{task}: warning: {message}"),
        RunEvent::Warning {
            task: None,
            message,
        } => format!("warning: {message}"),
        RunEvent::Waiting { wait_ms, .. } => format!(
            "waiting {:.1}s for the next attempt (retry backoff or agent rest)",
            *wait_ms as f64 / 1000.0
        ),
        RunEvent::Interrupting {
            attempts,
            kill: false,
        } => format!(
            "interrupted: cancelling {} (Ctrl+C again within 3s to kill)",
            list(attempts)
        ),
        RunEvent::Interrupting {
            attempts,
            kill: true,
        } => format!("interrupted again: killing {}", list(attempts)),
        RunEvent::Finished {
            outcome: Some(outcome),
            message,
        } => format!("finished: {outcome:?}: {message}"),
        RunEvent::Finished {
            outcome: None,
            message,
        } => format!("finished: {message}"),
        RunEvent::Summary(summary) => summary.render().trim_end().to_string(),
    })
}

/// The line of a [`RunEvent::Plan`]: the feature's tasks and the tasks the sync added,
/// edited and removed.
fn plan_line(feature: &str, total: usize, done: usize, changed: [&[String]; 3]) -> String {
    let plural = if total == 1 { "" } else { "s" };
    let mut line = format!("feature {feature}: {total} task{plural}, {done} done");
    for (names, what) in changed.into_iter().zip(["added", "edited", "removed"]) {
        if !names.is_empty() {
            line.push_str(&format!("; {what}: {}", names.join(", ")));
        }
    }
    line
}

/// The line of a [`RunEvent::Ended`]: how it `ended`, then when the task is retried and why.
fn ended_line(ended: String, retry_at_ms: Option<i64>, message: Option<&str>) -> String {
    let mut line = ended;
    if let Some(at) = retry_at_ms {
        let wait = (at - crate::clock::now_ms()).max(0);
        line.push_str(&format!(" (retry in {:.1}s)", wait as f64 / 1000.0));
    }
    if let Some(message) = message {
        line.push_str(&format!(": {message}"));
    }
    line
}

fn list(attempts: &[String]) -> String {
    if attempts.is_empty() {
        "no running attempts".to_string()
    } else {
        attempts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::dag::TaskPhase;

    #[test]
    fn an_ended_attempt_is_one_line_with_outcome_phase_and_reason() {
        let event = RunEvent::Ended {
            task: "t".to_string(),
            attempt: "t-a1".to_string(),
            outcome: "crashed".to_string(),
            phase: TaskPhase::Pending,
            duration_ms: 1500,
            retry_at_ms: None,
            message: Some("exit code 1".to_string()),
        };
        assert_eq!(
            plain_line(&event).as_deref(),
            Some("t: t-a1 crashed after 1.5s, task Pending: exit code 1")
        );
    }

    #[test]
    fn activity_is_shown_live_only() {
        let event = RunEvent::Activity {
            task: "t".to_string(),
            attempt: "t-a1".to_string(),
            text: "tool_call: Write".to_string(),
        };
        assert_eq!(plain_line(&event), None);
    }

    #[test]
    fn the_first_interrupt_says_how_to_kill() {
        let event = RunEvent::Interrupting {
            attempts: vec!["t-a1".to_string()],
            kill: false,
        };
        let line = plain_line(&event).expect("a line");
        assert!(
            line.contains("cancelling t-a1") && line.contains("again within 3s"),
            "{line}"
        );
    }

    #[test]
    fn json_events_are_tagged_with_their_kind() {
        let event = RunEvent::Started {
            task: "t".to_string(),
            attempt: "t-a1".to_string(),
            generation: 1,
            kind: AttemptKind::Work,
        };
        let json = serde_json::to_value(&event).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"event": "started", "task": "t", "attempt": "t-a1", "generation": 1})
        );
    }
}
