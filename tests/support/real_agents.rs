//! Everything a test that drives real agents needs, as one module: the fake model APIs, the
//! runner and `ralph run` harness and the shared scenarios.

pub use super::{
    fake_anthropic, fake_gemini, fake_model, fake_openai, local_run, real_agent, scenario,
};
