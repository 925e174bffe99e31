//! The read model: the watched objects as the controller keeps them (trimmed, indexed by
//! Feature), the specs and texts the caches drop (read on demand), and the read-your-writes
//! overlay of what the controller wrote and the watch has not shown yet.

pub(crate) mod descriptions;
pub(crate) mod filled;
pub(crate) mod index;
pub(crate) mod lease_cache;
pub(crate) mod planning_writes;
pub mod retention;
pub(crate) mod shapes;
pub(crate) mod slots;
pub(crate) mod spec_cache;
pub(crate) mod store;
pub(crate) mod task_writes;
pub(crate) mod texts;
pub mod trim;
