//! The controller-wide limit on running attempts (`--max-concurrent-attempts`): a set of
//! tasks holding a slot, taken before a claim and given back when the attempt ends.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// Slots for running attempts, shared by all Feature reconciles.
#[derive(Clone, Debug)]
pub struct Slots {
    limit: usize,
    held: Arc<Mutex<HashSet<String>>>,
}

impl Slots {
    /// At most `limit` attempts at once (`usize::MAX` for no limit).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            held: Arc::default(),
        }
    }

    /// Takes a slot for `task` (a `namespace/name` key); true if it holds one now.
    pub fn take(&self, task: &str) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains(task) {
            return true;
        }
        if held.len() >= self.limit {
            return false;
        }
        held.insert(task.to_owned())
    }

    /// Records that `task` runs an attempt (found running after a restart), even above the limit.
    pub fn hold(&self, task: &str) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.insert(task.to_owned());
    }

    /// Gives `task`'s slot back.
    pub fn give_back(&self, task: &str) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(task);
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_slot_beyond_the_limit() {
        let slots = Slots::new(1);
        assert!(slots.take("ns/a"));
        assert!(!slots.take("ns/b"));
    }

    #[test]
    fn taking_twice_for_the_same_task_uses_one_slot() {
        let slots = Slots::new(1);
        assert!(slots.take("ns/a"));
        assert!(slots.take("ns/a"));
        assert_eq!(slots.in_use(), 1);
    }

    #[test]
    fn a_given_back_slot_can_be_taken_again() {
        let slots = Slots::new(1);
        slots.take("ns/a");
        slots.give_back("ns/a");
        assert!(slots.take("ns/b"));
    }

    #[test]
    fn running_attempts_found_after_restart_hold_slots_even_above_the_limit() {
        let slots = Slots::new(1);
        slots.hold("ns/a");
        slots.hold("ns/b");
        assert_eq!(slots.in_use(), 2);
        assert!(!slots.take("ns/c"));
    }
}
