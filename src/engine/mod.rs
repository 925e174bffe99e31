//! Pure logic shared by the controller and the local mode: no I/O, no clock
//! (the current time is always an argument).

pub mod attempt;
pub(crate) mod backoff;
pub(crate) mod budget;
pub mod conclusion;
pub mod dag;
pub mod feature_plan;
pub mod lifecycle;
pub mod memory;
pub(crate) mod outcome;
pub(crate) mod planning;
pub mod policy;
pub mod prompt;
pub mod selection;
pub mod sigils;
pub(crate) mod stable_hash;
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verification;
pub mod workspace;
