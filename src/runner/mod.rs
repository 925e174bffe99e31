//! The ACP client that drives one agent attempt, supervises the agent process and
//! reports the result (`ralph runner`; local mode may call [`run_attempt`] in-process).

mod activity;
mod attempt;
pub mod check;
mod client;
pub mod config;
pub mod confine;
pub mod error;
pub mod events;
pub mod gateway;
pub mod mode;
pub mod model;
pub mod outcome;
pub mod patterns;
pub mod permission;
pub(crate) mod process;
pub mod protocol;
pub mod reports;
pub mod result;
mod stderr;
mod supervise;
pub mod tool_calls;
mod transport;
pub mod turn;
pub mod workspace;

pub use attempt::run_attempt;
pub use config::RunnerConfig;
pub use error::RunnerError;
pub use events::EventLog;
pub use process::children_of;
pub use result::{fit_result, write_result};
