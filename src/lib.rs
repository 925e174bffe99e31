//! ralph-operator: runs autonomous coding-agent loops ("Ralph loops") on Kubernetes
//! or on one machine. `ARCHITECTURE.md` at the repository root shows the modules, the
//! path of a Feature from apply to Complete, the claim protocol and the outcome table;
//! `docs/` holds the details of each subject.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub(crate) mod agent;
#[allow(unreachable_pub)]
// the API types are public; kube's CustomResource derive makes items this lint misjudges
pub mod api;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod engine;
pub mod gateway;
pub mod local;
pub mod manifest;
pub mod runner;
pub(crate) mod signals;
pub(crate) mod sync;
pub mod workspace;
