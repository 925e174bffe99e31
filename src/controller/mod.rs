//! Kubernetes controllers: Feature, Task, claim Leases, agent Pod builder, status.
