//! The prompt for one attempt: rules, sigils (with placeholders), the task and its context.
//!
//! The rules tell the agent where a sigil must go (the block that ends its final message). The
//! sigils are shown with `{PLACEHOLDERS}` and every piece of user text is passed through
//! [`sigils::defuse`], so the rendered prompt never contains a valid sigil anywhere
//! ([`sigils::contains_sigil`]): an agent that echoes its prompt back completes nothing.

use std::fmt::Write;

use super::memory::Recall;
use super::policy::PreviousAttempt;
use super::sigils;

/// A task as the prompt shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskText {
    /// The task's ID (its name).
    pub id: String,
    /// One-line title.
    pub title: String,
    /// What to do, in the user's words.
    pub description: String,
}

/// A task this one depends on, already done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompletedBlocker {
    /// The blocker's ID.
    pub id: String,
    /// Its title.
    pub title: String,
    /// What it did, when known (e.g. its journal).
    pub summary: Option<String>,
}

/// The feature the task belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureText {
    /// The feature's name.
    pub name: String,
    /// The feature's specification text.
    pub spec: Option<String>,
    /// The feature's plan text.
    pub plan: Option<String>,
}

/// Everything one attempt's prompt is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptInput {
    /// The task to work on.
    pub task: TaskText,
    /// Its parent task, when it is a subtask.
    pub parent: Option<TaskText>,
    /// The tasks it depends on, all done.
    pub completed_blockers: Vec<CompletedBlocker>,
    /// The feature.
    pub feature: FeatureText,
    /// Retries used before this attempt.
    pub retry_count: u32,
    /// Retries allowed.
    pub max_retries: u32,
    /// Why the previous attempt did not finish, when it did not.
    pub previous_attempt: Option<PreviousAttempt>,
    /// For a verification prompt: what the agent that reported the task done said about
    /// its work (its journal notes).
    pub reported: Option<String>,
    /// The journal entries and knowledge recalled for this attempt ([`super::memory::recall`]).
    pub memory: Recall,
}

/// Renders the prompt for one attempt (Markdown).
pub fn render(input: &PromptInput) -> String {
    let mut out = String::new();
    task_section(&mut out, "Task", &input.task);
    context_sections(&mut out, input);
    knowledge_section(&mut out, &input.memory);
    journal_section(&mut out, &input.memory);
    retry_section(&mut out, input);
    out.push_str(RULES);
    out
}

/// Renders the prompt for a verifier attempt: check that the task, reported done, really is.
pub fn render_verification(input: &PromptInput) -> String {
    let mut out = String::new();
    task_section(&mut out, "Verify", &input.task);
    context_sections(&mut out, input);
    reported_section(&mut out, input.reported.as_deref());
    out.push_str(VERIFY_RULES);
    out
}

fn context_sections(out: &mut String, input: &PromptInput) {
    if let Some(parent) = &input.parent {
        parent_section(out, parent);
    }
    blockers_section(out, &input.completed_blockers);
    feature_section(out, &input.feature);
}

/// Appends a line of formatted text; writing to a `String` cannot fail.
macro_rules! push_line {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

fn task_section(out: &mut String, heading: &str, task: &TaskText) {
    push_line!(out, "# {heading}: {}\n", one_line(&task.title));
    push_line!(out, "Your task ID is: {}\n", sigils::defuse(&task.id));
    block(out, &task.description);
}

fn parent_section(out: &mut String, parent: &TaskText) {
    push_line!(out, "## Part of: {}\n", one_line(&parent.title));
    push_line!(
        out,
        "This task is one step of the larger task above ({}); do only this step.\n",
        sigils::defuse(&parent.id)
    );
    block(out, &parent.description);
}

fn blockers_section(out: &mut String, blockers: &[CompletedBlocker]) {
    if blockers.is_empty() {
        return;
    }
    push_line!(out, "## Already done (this task builds on them)\n");
    for blocker in blockers {
        let title = one_line(&blocker.title);
        let id = sigils::defuse(&blocker.id);
        match blocker
            .summary
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            Some(summary) => push_line!(out, "- {title} ({id}): {}", one_line(summary)),
            None => push_line!(out, "- {title} ({id})"),
        }
    }
    out.push('\n');
}

fn feature_section(out: &mut String, feature: &FeatureText) {
    push_line!(out, "## Feature: {}\n", one_line(&feature.name));
    for (heading, text) in [("Specification", &feature.spec), ("Plan", &feature.plan)] {
        if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
            push_line!(out, "### {heading}\n");
            block(out, text);
        }
    }
}

fn reported_section(out: &mut String, reported: Option<&str>) {
    if let Some(reported) = reported.filter(|r| !r.trim().is_empty()) {
        push_line!(out, "## What the agent that did the work said\n");
        block(out, reported);
    }
}

fn knowledge_section(out: &mut String, memory: &Recall) {
    if memory.knowledge.is_empty() {
        return;
    }
    push_line!(out, "## Knowledge\n");
    push_line!(
        out,
        "Lessons earlier runs and the user recorded about this codebase.\n"
    );
    for entry in &memory.knowledge {
        out.push_str(entry);
    }
}

fn journal_section(out: &mut String, memory: &Recall) {
    if memory.own.is_empty() && memory.blockers.is_empty() {
        return;
    }
    push_line!(out, "## Journal\n");
    if !memory.own.is_empty() {
        push_line!(out, "Earlier attempts at this task, newest first:\n");
        memory.own.iter().for_each(|entry| out.push_str(entry));
        out.push('\n');
    }
    if !memory.blockers.is_empty() {
        push_line!(
            out,
            "Attempts of the tasks this one builds on, newest first:\n"
        );
        memory.blockers.iter().for_each(|entry| out.push_str(entry));
        out.push('\n');
    }
}

fn retry_section(out: &mut String, input: &PromptInput) {
    if input.retry_count == 0 && input.previous_attempt.is_none() {
        return;
    }
    push_line!(out, "## Previous attempts\n");
    let attempt = input.retry_count.saturating_add(1);
    let attempts = input.max_retries.saturating_add(1).max(attempt);
    let _ = write!(out, "This is attempt {attempt} of {attempts}.");
    if let Some(previous) = &input.previous_attempt {
        let _ = write!(out, " {}", sigils::defuse(&previous.to_string()));
    }
    out.push_str(
        "\n\nBuild on what is already in the workspace and do not repeat what went wrong.\n\n",
    );
}

/// User text on its own lines, defused, followed by a blank line.
fn block(out: &mut String, text: &str) {
    let text = text.trim();
    if !text.is_empty() {
        push_line!(out, "{}\n", sigils::defuse(text));
    }
}

/// User text collapsed onto one line, defused.
fn one_line(text: &str) -> String {
    sigils::defuse(&text.split_whitespace().collect::<Vec<_>>().join(" "))
}

const RULES: &str = "\
## Rules of this loop

- You are one run of an automated loop. Work only on the task above; other tasks are handled
  by other runs. Do not start, finish or report on any other task.
- Work in the current directory. Leave the work in a state the next task can build on.
- Finish within this turn, then report the result with the tags below. Each tag below shows a
  placeholder in braces: write the tag with the braces removed, `{TASK_ID}` replaced by your
  task ID and `{NOTE}`, `{TAGS}`, `{TITLE}`, `{BODY}`, `{MODEL}` by your own text;
  `{FAILURE}` and `{COMPLETE}` are written as the bare word.

## How to report

Only the very end of your final message counts. End the last message of your turn with a
block of tags, each tag on its own line, and nothing after the block: no more text, no code
fence, no backticks or quotes around the tags. A tag anywhere else (in code, in a quotation,
in a sentence, or followed by more text) is ignored.

End your final message with exactly one of:

- `<task-done>{TASK_ID}</task-done>`: the task is complete. Use your task ID stated above.
- `<task-failed>{TASK_ID}</task-failed>`: you cannot complete the task. Say why in the
  paragraph just before the block.

Never both: a block with both gives no result. For example, a final message ends like this:

    The API serves GET /greeting and its tests pass.

    <task-done>{TASK_ID}</task-done>

Only when the whole feature cannot succeed, whatever any task does, add
`<promise>{FAILURE}</promise>` to the block (say why in the paragraph before it). When you
know the whole feature is complete, add `<promise>{COMPLETE}</promise>`.

Optional notes, any number of times, in the block or anywhere outside code:

- `<journal>{NOTE}</journal>`: a short note on what you did, for the next runs.
- `<knowledge tags=\"{TAGS}\" title=\"{TITLE}\">{BODY}</knowledge>`: a lasting lesson about
  this codebase (tags separated by commas).
- `<next-model>{MODEL}</next-model>`: the model better suited to this task's next attempt,
  when this one does not finish it (with `<task-done>` there is no next attempt: the hint
  is not used).
";

const VERIFY_RULES: &str = "\
## Rules of this verification

- An agent reported the task above done. Check its work in the current directory against the
  task's description: read the changes, build, run the tests. Do not change the work: this
  session is read-only, and edits, writes and deletes are refused.
- Finish within this turn, then report your verdict with the braces removed and `{TASK_ID}`
  replaced by the task ID stated above. Only the very end of your final message counts: end
  it with the verdict tag on its own line, with nothing after it and no code fence, backticks
  or quotes around it. A tag anywhere else is ignored.

End your final message with exactly one of:

- `<verify-pass>{TASK_ID}</verify-pass>`: the task is done as described.
- `<verify-fail>{TASK_ID}</verify-fail>`: it is not. Say what is missing or wrong in the
  paragraph just before the tag; the next attempt at the task will be told.
";

#[cfg(test)]
mod tests;
