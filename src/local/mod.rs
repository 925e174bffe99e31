//! The embedded default: a local store and process executor driving the same engine.

pub mod activity;
pub mod budget;
pub mod display;
pub mod executor;
pub mod feature;
pub mod plan;
pub mod planning;
pub mod process;
pub mod prompt;
pub mod run_event;
pub mod scheduler;
pub mod selection;
pub mod shared_workspace;
pub mod state_dir;
pub mod status_view;
pub mod store;
pub mod summary;
pub mod table;
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;
pub mod worktree;
