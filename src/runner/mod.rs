//! The ACP client that drives one agent attempt, supervises the agent process and
//! reports the result (`ralph runner`; local mode may call [`run_attempt`] in-process).

mod activity;
mod attempt;
pub(crate) mod check;
mod client;
pub mod config;
pub mod confine;
pub(crate) mod error;
pub(crate) mod events;
pub mod gateway;
pub(crate) mod mode;
pub(crate) mod model;
pub(crate) mod outcome;
pub(crate) mod patterns;
pub(crate) mod permission;
pub(crate) mod process;
mod proposal;
pub(crate) mod protocol;
pub(crate) mod reports;
pub(crate) mod result;
mod stderr;
mod supervise;
pub(crate) mod tool_calls;
mod transport;
pub(crate) mod turn;
pub(crate) mod workspace;

pub use attempt::run_attempt;
pub use config::RunnerConfig;
pub use error::RunnerError;
pub use events::EventLog;
pub use process::children_of;
pub use result::{fit_result, write_result};
