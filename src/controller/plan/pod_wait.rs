//! An attempt whose agent Pod waits to start (pure): the Task shows why
//! (`AttemptStarted=False` with the scheduler's word and when the attempt is released) while
//! the controller keeps the claim, and `True` once the agent started after such a wait. Pods
//! that start at once cost no status write.

use crate::api::{TaskStatus, conditions};
use crate::controller::plan::cached::CachedTask;
use crate::engine::lifecycle::Waiting;

/// Condition type on a Task whose attempt's Pod waited to start.
pub(crate) const ATTEMPT_STARTED: &str = "AttemptStarted";
/// Reason while the Pod waits.
pub(crate) const REASON_POD_PENDING: &str = "PodPending";
/// Reason once it started after a wait.
pub(crate) const REASON_POD_STARTED: &str = "PodStarted";

/// The Task's status showing that attempt `attempt_id` waits for `waiting`; `None` when it
/// shows that already.
pub(crate) fn shown_waiting(
    task: &CachedTask,
    attempt_id: &str,
    waiting: &Waiting,
    now_ms: i64,
) -> Option<TaskStatus> {
    let why = waiting
        .reason
        .as_deref()
        .unwrap_or("its Pod has not started");
    let release = match waiting.release_at_ms {
        Some(at) => format!(
            "; it is released at {} and the task tried again, no retry charged, unless it \
             starts first (spec.podStartTimeoutSeconds)",
            super::time::time(at).0
        ),
        None => String::new(),
    };
    let message = format!("attempt {attempt_id} waits to start: {why}{release}");
    set(
        task,
        conditions::STATUS_FALSE,
        REASON_POD_PENDING,
        message,
        now_ms,
    )
}

/// The Task's status once its attempt's agent started after [`shown_waiting`]; `None` when
/// no wait was shown.
pub(crate) fn shown_started(task: &CachedTask, now_ms: i64) -> Option<TaskStatus> {
    let waited = task
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, ATTEMPT_STARTED))
        .is_some_and(|c| c.status == conditions::STATUS_FALSE);
    waited.then(|| {
        set(
            task,
            conditions::STATUS_TRUE,
            REASON_POD_STARTED,
            "the agent Pod started".to_owned(),
            now_ms,
        )
    })?
}

fn set(
    task: &CachedTask,
    status: &str,
    reason: &str,
    message: String,
    now_ms: i64,
) -> Option<TaskStatus> {
    let mut new = task.status.clone().unwrap_or_default();
    let condition = conditions::condition(
        ATTEMPT_STARTED,
        status,
        reason,
        message,
        task.metadata.generation,
        super::time::time(now_ms),
    );
    conditions::set_condition(&mut new.conditions, condition).then_some(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Task;
    use crate::controller::testing::object;

    const NOW: i64 = 1_800_000_000_000;

    fn task() -> CachedTask {
        let metadata = serde_json::json!({"name": "build", "namespace": "ns", "generation": 1});
        object::<Task>("Task", metadata, serde_json::json!({"featureRef": "hello"})).into()
    }

    fn unschedulable() -> Waiting {
        Waiting {
            reason: Some("not scheduled: 0/1 nodes are available: 1 Too many pods.".to_owned()),
            release_at_ms: Some(NOW + 600_000),
        }
    }

    fn with_status(mut task: CachedTask, status: Option<TaskStatus>) -> CachedTask {
        task.status = status;
        task
    }

    #[test]
    fn a_waiting_attempt_shows_the_schedulers_word_and_its_release_time() {
        let status = shown_waiting(&task(), "build-a1", &unschedulable(), NOW);
        let condition = status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, ATTEMPT_STARTED))
            .cloned();
        let condition = condition.expect("condition set");
        assert_eq!(condition.status, "False");
        assert_eq!(condition.reason, REASON_POD_PENDING);
        assert!(
            condition
                .message
                .contains("build-a1 waits to start: not scheduled: 0/1 nodes")
        );
        assert!(condition.message.contains("no retry charged"));
    }

    #[test]
    fn a_wait_already_shown_is_not_written_again() {
        let shown = with_status(
            task(),
            shown_waiting(&task(), "build-a1", &unschedulable(), NOW),
        );
        assert_eq!(
            shown_waiting(&shown, "build-a1", &unschedulable(), NOW + 20_000),
            None
        );
    }

    #[test]
    fn an_agent_that_starts_after_a_wait_is_shown_started() {
        let shown = with_status(
            task(),
            shown_waiting(&task(), "build-a1", &unschedulable(), NOW),
        );
        let started = shown_started(&shown, NOW + 5_000).expect("written");
        let condition = conditions::find(&started.conditions, ATTEMPT_STARTED).expect("kept");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", REASON_POD_STARTED)
        );
    }

    #[test]
    fn an_agent_that_started_at_once_costs_no_write() {
        assert_eq!(shown_started(&task(), NOW), None);
    }
}
