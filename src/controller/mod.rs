//! The Kubernetes side of ralph, in rooms that show its architecture:
//!
//! - [`cache`]: the read model (the watched objects as trimmed and indexed, what the
//!   controller wrote and the watch has not shown yet);
//! - [`plan`]: pure decisions (no I/O, no client, no [`runtime::context::Context`]): what to
//!   do with each Task, the Feature's status, the agent Pod's layout, problems;
//! - [`act`]: the writes (claim Leases, Tasks, Pods, Events, ConfigMaps);
//! - [`runtime`]: what wires them (the Feature reconcile, watches, leader election, metrics);
//! - [`client`]: the API client and the bound on every call;
//! - [`sidecar`]: the claim-keeper that runs in each agent Pod (`ralph sidecar`).

pub mod act;
pub mod cache;
pub mod client;
pub mod plan;
pub mod runtime;
pub mod sidecar;

#[cfg(test)]
mod testing;

pub use runtime::run::{ControllerConfig, LeaderElection, NativeSidecars, RunError, run};
