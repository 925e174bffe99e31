//! Pure decisions: what to do with each Task, the Feature's and the Tasks' status, the agent
//! Pod's layout, the problems shown to users. Nothing here does I/O or reads the
//! controller's caches or context: each function takes what it needs and returns a value.

pub mod budget;
pub(crate) mod budget_share;
pub mod cached;
pub mod decide;
pub(crate) mod git;
pub(crate) mod origin;
pub(crate) mod plan_map;
pub(crate) mod planning;
pub mod pod;
pub(crate) mod pod_gateway;
pub(crate) mod pod_git;
pub(crate) mod pod_planning;
pub(crate) mod pod_prompt;
pub mod pod_start;
pub(crate) mod pod_wait;
pub(crate) mod problem;
pub mod run_view;
pub mod selection;
pub mod status;
pub(crate) mod time;
pub(crate) mod verify;
