//! Proposed follow-up tasks: a worker that finds work outside its task proposes tasks in a
//! `<ralph:propose-tasks>` block of its final message, in the planner's answer form
//! (docs/planning.md). The block counts where a verdict counts: in the block that ends the
//! turn's last message, starting a line, with nothing after it but whitespace and other
//! sigils (the verdict), never inside a code fence.

use crate::engine::sigils::is_placeholder;

/// Opens a proposal.
pub(super) const PROPOSE_OPEN: &str = "<ralph:propose-tasks>";
/// Closes a proposal.
pub(super) const PROPOSE_CLOSE: &str = "</ralph:propose-tasks>";

/// What every prompt of a planning Feature says about proposals (after the plan).
pub(crate) const PROPOSE_HELP: &str = "Follow-up tasks: if you find work that belongs to no task \
of this plan, finish your own task and propose tasks for it at the end of your final \
message, before your verdict, in the planner's YAML form (name, title, description, \
dependsOn, acceptance or verify.command):\n\n<ralph:propose-tasks>\n{TASKS_YAML}\n\
</ralph:propose-tasks>\n";

/// The body of the proposal in `final_message` (the turn's last message), when one stands
/// where a verdict would count.
pub(crate) fn proposal_in(final_message: &str) -> Option<&str> {
    let open = final_message.rfind(PROPOSE_OPEN)?;
    let before = &final_message[..open];
    let line_start = before.trim_end_matches([' ', '\t']);
    if !(line_start.is_empty() || line_start.ends_with('\n')) {
        return None;
    }
    if before.matches("```").count() % 2 == 1 {
        return None;
    }
    let body_start = open + PROPOSE_OPEN.len();
    let close = body_start + final_message[body_start..].find(PROPOSE_CLOSE)?;
    let body = final_message[body_start..close].trim();
    let after = &final_message[close + PROPOSE_CLOSE.len()..];
    (only_sigils(after) && !body.is_empty() && !is_placeholder(body)).then_some(body)
}

/// Whether `text` is whitespace and whole tags (`<name ...>...</name>`) only.
fn only_sigils(mut text: &str) -> bool {
    loop {
        text = text.trim_start();
        if text.is_empty() {
            return true;
        }
        let Some(tag) = text.strip_prefix('<') else {
            return false;
        };
        let name_end = tag.find(['>', ' ']).unwrap_or(tag.len());
        let name = &tag[..name_end];
        if name.is_empty() || name.starts_with('/') {
            return false;
        }
        let close = format!("</{name}>");
        let Some(end) = text.find(&close) else {
            return false;
        };
        text = &text[end + close.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "tasks:\n  - {name: docs, acceptance: [x]}";

    fn message(before: &str, after: &str) -> String {
        format!("{before}{PROPOSE_OPEN}\n{YAML}\n{PROPOSE_CLOSE}{after}")
    }

    #[test]
    fn a_proposal_before_the_verdict_counts() {
        let text = message("Done.\n", "\n<task-done>build</task-done>\n");
        assert_eq!(proposal_in(&text), Some(YAML));
    }

    #[test]
    fn a_proposal_followed_by_prose_does_not_count() {
        let text = message("Done.\n", "\nAnd that is all. <task-done>build</task-done>");
        assert_eq!(proposal_in(&text), None);
    }

    #[test]
    fn a_proposal_inside_a_sentence_or_a_code_fence_does_not_count() {
        assert_eq!(proposal_in(&message("I would write ", "")), None);
        assert_eq!(proposal_in(&message("```\n", "")), None);
    }

    #[test]
    fn the_prompts_example_proposes_nothing() {
        assert_eq!(proposal_in(PROPOSE_HELP), None);
    }
}
