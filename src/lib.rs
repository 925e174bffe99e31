//! ralph-operator: runs autonomous coding-agent loops ("Ralph loops") on Kubernetes
//! or on one machine. See `DESIGN.md` in the shared folder and the README.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod engine;
pub mod gateway;
pub mod local;
pub mod manifest;
pub mod runner;
pub mod signals;
pub mod sync;
pub mod workspace;
