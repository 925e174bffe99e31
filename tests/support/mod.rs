//! Test support shared by every module of the integration-test crate: the fake API server
//! and kubelet stand-in, the controller harness, fake model APIs and real-agent launchers,
//! the git server, and the `ralph run` harness.

pub mod cluster_objects;
pub mod fake_anthropic;
pub mod fake_apiserver;
pub use fake_apiserver::mentions;
pub mod fake_gemini;
pub mod fake_model;
pub mod fake_openai;
pub mod git_cluster;
pub mod git_server;
#[path = "controller_harness.rs"]
pub mod harness;
pub mod kubelet_standin;
pub mod local_run;
pub mod real_agent;
pub mod real_agents;
#[path = "real_agent_scenarios.rs"]
pub mod scenario;
pub mod scripted;
pub mod sigil_scan;
