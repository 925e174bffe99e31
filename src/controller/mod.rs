//! Kubernetes controllers: Feature, Task, claim Leases, agent Pod builder, status.

pub mod budget;
pub mod call;
pub mod claim;
pub mod client;
pub mod context;
pub mod decide;
pub mod descriptions;
pub mod events;
pub mod feature;
pub mod filled;
mod gateway_secret;
pub mod git;
pub mod heap;
pub mod index;
pub mod leader;
pub mod lease_cache;
pub mod memory;
pub mod metrics;
pub mod origin;
pub mod pod;
mod pod_gateway;
pub mod pod_git;
pub mod pod_start;
pub mod pod_wait;
pub mod preflight;
pub mod rests;
pub mod retention;
pub mod run_view;
pub mod runtime;
pub mod selection;
pub mod server;
pub mod shapes;
pub mod shutdown;
pub mod sidecar;
pub mod slots;
pub mod spec_cache;
pub mod status;
pub mod task;
pub mod trim;
pub mod verify;

#[cfg(test)]
mod testing;

pub use runtime::{ControllerConfig, LeaderElection, NativeSidecars, RunError, run};
