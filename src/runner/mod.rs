//! The ACP client that drives one agent attempt, supervises the agent process and reports the result.
