//! Follow-up tasks proposed by workers (`<ralph:propose-tasks>`, docs/planning.md): read
//! from the final message of each done attempt, checked like a planner's answer.

use crate::api::TaskTemplate;
use crate::engine::planning::{PLANNING_TASK, proposal_in};
use crate::local::store::{Store, StoreError};
use crate::manifest::answer::{AnswerLimits, AnswerTask, check_answer};

use super::PlanState;

/// What the done attempts proposed since the last look.
#[derive(Debug, Default)]
pub(crate) struct Proposals {
    /// Valid proposed tasks, in the order they came.
    pub tasks: Vec<AnswerTask>,
    /// Refused proposals: the proposing task and the problems.
    pub refused: Vec<(String, Vec<String>)>,
}

/// Reads the proposals of done work attempts not looked at yet (recorded in `state`);
/// each is checked against the Feature's tasks (`existing`, plus the proposals accepted
/// before it) and the tasks `maxTasks` leaves (`room`).
pub(crate) fn take(
    store: &Store,
    state: &mut PlanState,
    existing: &[TaskTemplate],
    mut room: u32,
) -> Result<Proposals, StoreError> {
    let mut proposals = Proposals::default();
    let mut known: Vec<TaskTemplate> = existing.to_vec();
    for attempt in store.attempts(None)? {
        if attempt.task == PLANNING_TASK
            || attempt.outcome.as_deref() != Some("done")
            || state.proposals_read.contains(&attempt.id)
        {
            continue;
        }
        state.proposals_read.push(attempt.id.clone());
        let log = std::fs::read_to_string(store.attempt_dir(&attempt.id).join("runner.jsonl"))
            .unwrap_or_default();
        let message = final_message(&log);
        let Some(body) = proposal_in(&message) else {
            continue;
        };
        let limits = AnswerLimits {
            max_tasks: room,
            existing: &known,
        };
        match check_answer(body, limits) {
            Ok(answer) => {
                room -= u32::try_from(answer.tasks.len()).unwrap_or(room);
                known.extend(answer.templates());
                proposals.tasks.extend(answer.tasks);
            }
            Err(problems) => proposals
                .refused
                .push((attempt.task.clone(), problems.messages())),
        }
    }
    Ok(proposals)
}

/// The last agent message of a runner's log (JSON lines), as the runner's sigil scanner
/// splits messages: a tool call, a thought or any other update ends a message, as does a
/// new `messageId`.
pub(crate) fn final_message(log: &str) -> String {
    const IGNORED: [&str; 5] = [
        "usage_update",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
    ];
    let mut message = String::new();
    let mut ended = false;
    let mut id: Option<String> = None;
    for line in log.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if value["event"] != "update" {
            continue;
        }
        let update = &value["update"];
        let kind = update["sessionUpdate"].as_str().unwrap_or_default();
        if kind == "agent_message_chunk" {
            let chunk_id = update["messageId"].as_str().map(str::to_owned);
            if ended || (chunk_id.is_some() && chunk_id != id) {
                message.clear();
                ended = false;
            }
            id = chunk_id;
            message.push_str(update["content"]["text"].as_str().unwrap_or_default());
        } else if !IGNORED.contains(&kind) {
            ended = true;
            id = None;
        }
    }
    if ended { String::new() } else { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> String {
        serde_json::json!({"event": "update", "kind": "agent_message_chunk", "update": {
            "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}})
        .to_string()
    }

    fn tool_call() -> String {
        serde_json::json!({"event": "update", "kind": "tool_call",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "t"}})
        .to_string()
    }

    #[test]
    fn the_final_message_is_the_chunks_after_the_last_tool_call() {
        let log = [
            chunk("Looking."),
            tool_call(),
            chunk("Done. "),
            chunk("<task-done>a</task-done>"),
        ]
        .join("\n");
        assert_eq!(final_message(&log), "Done. <task-done>a</task-done>");
    }

    #[test]
    fn a_turn_ending_in_a_tool_call_has_no_final_message() {
        let log = [chunk("Looking."), tool_call()].join("\n");
        assert_eq!(final_message(&log), "");
    }
}
