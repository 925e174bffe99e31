//! The prompt for one attempt: rules, sigils (with placeholders), the task and its context.
