//! The embedded default: a local store and process executor driving the same engine.

pub(crate) mod activity;
pub mod budget;
pub(crate) mod display;
pub(crate) mod executor;
pub mod feature;
pub mod plan;
pub(crate) mod planning;
pub(crate) mod process;
pub(crate) mod prompt;
pub(crate) mod run_event;
pub mod scheduler;
pub mod selection;
pub(crate) mod shared_workspace;
pub(crate) mod state_dir;
pub(crate) mod status_view;
pub mod store;
pub(crate) mod summary;
pub(crate) mod table;
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub(crate) mod verify;
pub(crate) mod worktree;
