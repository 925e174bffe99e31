//! Everything a test crate that drives real agents needs, as one module:
//! `#[path = "support/real_agents.rs"] mod real_agents;`. The fake model APIs, the runner
//! and `ralph run` harness and the shared scenarios refer to each other as siblings.
#![allow(dead_code)]

#[path = "fake_anthropic.rs"]
pub mod fake_anthropic;
#[path = "fake_gemini.rs"]
pub mod fake_gemini;
#[path = "fake_model.rs"]
pub mod fake_model;
#[path = "fake_openai.rs"]
pub mod fake_openai;
#[path = "local_run.rs"]
pub mod local_run;
#[path = "real_agent.rs"]
pub mod real_agent;
#[path = "real_agent_scenarios.rs"]
pub mod scenario;
