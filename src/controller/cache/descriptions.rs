//! The prompt texts of standalone Tasks that may still run, taken from the Task watch
//! before the cache drops them (a [`CachedTask`] has none): an attempt of such a Task
//! starts without a GET of its description (one request per attempt under the client's
//! rate limit). Templated Tasks take theirs from the Feature's spec instead. Bounded by
//! [`MAX_BYTES`], oldest kept first out; a text not kept, or kept for another generation
//! of the Task, is read live as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::api::Task;
use crate::controller::plan::cached::CachedTask;
use crate::engine::dag::TaskPhase;
use crate::sync::lock;

/// Most bytes held at once: the texts and, per Task, its uid and [`ENTRY_OVERHEAD`].
pub(crate) const MAX_BYTES: usize = 2 * 1024 * 1024;

/// What one kept text costs besides its own bytes and its uid's (map slots, the generation,
/// the age).
const ENTRY_OVERHEAD: usize = 96;

/// The kept descriptions (one per process, shared by the Task watch and the reconciles).
#[derive(Clone, Default)]
pub struct Descriptions {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    by_uid: HashMap<String, Kept>,
    /// The uids, oldest kept first.
    by_age: BTreeMap<u64, String>,
    next_age: u64,
    bytes: usize,
}

struct Kept {
    generation: i64,
    text: String,
    age: u64,
}

impl Kept {
    fn bytes(&self, uid: &str) -> usize {
        self.text.len() + uid.len() + ENTRY_OVERHEAD
    }
}

impl Descriptions {
    /// Follows `task` as its watch delivers it, whole: keeps the description of a
    /// standalone Task that is pending or running, forgets that of any other.
    pub fn follow(&self, task: &Task) {
        let Some(uid) = task.metadata.uid.as_deref() else {
            return;
        };
        let generation = task.metadata.generation.unwrap_or_default();
        let may_run = may_run_standalone(task);
        let mut state = lock(&self.state);
        let same_spec = state.by_uid.get(uid).map(|k| k.generation) == Some(generation);
        if may_run && same_spec {
            // A status change: this generation's text is kept already.
            return;
        }
        state.forget(uid);
        if !may_run {
            return;
        }
        let kept = Kept {
            generation,
            text: task.spec.fields.description.clone(),
            age: state.next_age,
        };
        if kept.bytes(uid) > MAX_BYTES {
            return;
        }
        state.next_age += 1;
        state.bytes += kept.bytes(uid);
        state.by_age.insert(kept.age, uid.to_owned());
        state.by_uid.insert(uid.to_owned(), kept);
        state.evict_to(MAX_BYTES);
    }

    /// The description of `task` at its generation, if kept.
    pub fn of(&self, task: &CachedTask) -> Option<String> {
        let uid = task.metadata.uid.as_deref()?;
        let state = lock(&self.state);
        let kept = state.by_uid.get(uid)?;
        (Some(kept.generation) == task.metadata.generation).then(|| kept.text.clone())
    }

    /// Forgets the text of `task`, deleted (its watch's delete event; a Task deleted while
    /// the watch was away goes out with age).
    pub fn forget(&self, task: &CachedTask) {
        if let Some(uid) = task.metadata.uid.as_deref() {
            lock(&self.state).forget(uid);
        }
    }

    /// Bytes held, as [`MAX_BYTES`] counts them.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }
}

impl State {
    fn forget(&mut self, uid: &str) {
        if let Some(kept) = self.by_uid.remove(uid) {
            self.bytes -= kept.bytes(uid);
            self.by_age.remove(&kept.age);
        }
    }

    fn evict_to(&mut self, limit: usize) {
        while self.bytes > limit {
            let Some((_, uid)) = self.by_age.pop_first() else {
                return;
            };
            self.forget(&uid);
        }
    }
}

/// A Task the controller did not apply from a Feature's template (it has no template hash),
/// pending or running (a retry or a re-run brings a finished one back through the watch,
/// whole).
fn may_run_standalone(task: &Task) -> bool {
    let phase = task.status.as_ref().map(|s| s.phase).unwrap_or_default();
    let standalone = crate::controller::plan::origin::of(task)
        .template_hash
        .is_none();
    standalone && matches!(phase, TaskPhase::Pending | TaskPhase::Running)
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;

    use super::*;
    use crate::api::{TaskSpec, TaskStatus};

    fn task(uid: &str, generation: i64, description: &str, phase: TaskPhase) -> Task {
        let mut spec: TaskSpec =
            serde_json::from_value(serde_json::json!({"featureRef": "f"})).expect("spec");
        spec.fields.description = description.to_owned();
        let mut task = Task::new(uid, spec);
        task.metadata.uid = Some(uid.to_owned());
        task.metadata.generation = Some(generation);
        task.status = Some(TaskStatus {
            phase,
            ..TaskStatus::default()
        });
        task
    }

    /// The descriptions kept after the watch delivered `tasks`, in order.
    fn following(tasks: &[&Task]) -> Descriptions {
        let descriptions = Descriptions::default();
        for task in tasks {
            descriptions.follow(task);
        }
        descriptions
    }

    /// What an attempt of `task`, as cached, finds.
    fn kept_for(descriptions: &Descriptions, task: &Task) -> Option<String> {
        descriptions.of(&CachedTask::from(task.clone()))
    }

    #[test]
    fn a_pending_standalone_tasks_description_is_kept_for_its_generation() {
        let solo = task("u1", 1, "Write hello.txt", TaskPhase::Pending);
        let descriptions = following(&[&solo]);
        assert_eq!(
            kept_for(&descriptions, &solo).as_deref(),
            Some("Write hello.txt")
        );
        let newer = task("u1", 2, "", TaskPhase::Pending);
        assert_eq!(kept_for(&descriptions, &newer), None);
    }

    #[test]
    fn an_edited_description_replaces_the_kept_one() {
        let edited = task("u1", 2, "new", TaskPhase::Pending);
        let descriptions = following(&[&task("u1", 1, "old", TaskPhase::Pending), &edited]);
        assert_eq!(kept_for(&descriptions, &edited).as_deref(), Some("new"));
        let expected = "new".len() + "u1".len() + ENTRY_OVERHEAD;
        assert_eq!(descriptions.bytes(), expected);
    }

    #[test]
    fn a_finished_task_is_forgotten() {
        let done = task("u1", 1, "text", TaskPhase::Done);
        let descriptions = following(&[&task("u1", 1, "text", TaskPhase::Running), &done]);
        assert_eq!(kept_for(&descriptions, &done), None);
        assert_eq!(descriptions.bytes(), 0);
    }

    #[test]
    fn a_deleted_task_is_forgotten() {
        let solo = task("u1", 1, "text", TaskPhase::Pending);
        let descriptions = following(&[&solo]);
        descriptions.forget(&CachedTask::from(solo.clone()));
        assert_eq!(kept_for(&descriptions, &solo), None);
        assert_eq!(descriptions.bytes(), 0);
    }

    #[test]
    fn a_templated_task_is_not_kept() {
        let mut templated = task("u1", 1, "text", TaskPhase::Pending);
        templated.annotations_mut().insert(
            crate::controller::plan::origin::TEMPLATE_HASH_ANNOTATION.to_owned(),
            "0123abcd".to_owned(),
        );
        assert_eq!(following(&[&templated]).bytes(), 0);
    }

    #[test]
    fn the_oldest_kept_go_first_past_the_limit() {
        let text = "x".repeat(MAX_BYTES / 4);
        let tasks: Vec<Task> = (0..4)
            .map(|i| task(&format!("u{i}"), 1, &text, TaskPhase::Pending))
            .collect();
        let descriptions = following(&tasks.iter().collect::<Vec<_>>());
        assert_eq!(kept_for(&descriptions, &tasks[0]), None);
        assert!(kept_for(&descriptions, &tasks[1]).is_some());
        assert!(kept_for(&descriptions, &tasks[3]).is_some());
        assert!(descriptions.bytes() <= MAX_BYTES);
    }
}
