//! The attempt-outcome policy: one pure function from an attempt result and the task state to a transition.
