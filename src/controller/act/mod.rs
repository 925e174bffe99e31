//! The writes: claim Leases, Task applies and status, agent Pods, Events, and the
//! ConfigMaps the controller keeps (rests, knowledge, plans).

pub mod claim;
pub(crate) mod claims;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod gateway_secret;
pub(crate) mod git_secret;
pub(crate) mod memory;
pub(crate) mod plan_maps;
pub(crate) mod planned;
pub(crate) mod planning;
pub(crate) mod pod_start;
pub(crate) mod preflight;
pub(crate) mod proposals;
pub(crate) mod rests;
pub(crate) mod scope;
pub mod task;
mod task_end;
mod task_start;
pub(crate) mod task_status;
pub(crate) mod templates;
