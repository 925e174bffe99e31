//! Kubernetes controllers: Feature, Task, claim Leases, agent Pod builder, status.

pub mod call;
pub mod claim;
pub mod shutdown;
pub mod sidecar;
