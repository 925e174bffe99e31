//! What the user must fix, as a condition reason and a message.

/// Something the user must fix: a reason for a condition and a message naming the object
/// and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The condition reason (CamelCase), e.g. `InvalidPlan`.
    pub reason: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}
