//! What wires the rooms together: the kube-runtime controller and its watches, the Feature
//! reconcile, the shared context, leader election, the metrics and health server.

pub(crate) mod context;
pub(crate) mod feature;
mod feature_checks;
mod feature_status;
pub(crate) mod heap;
pub mod leader;
pub(crate) mod metrics;
pub(crate) mod run;
pub(crate) mod server;
pub(crate) mod shutdown;
pub(crate) mod term;
pub(crate) mod trigger;
pub(crate) mod watches;
