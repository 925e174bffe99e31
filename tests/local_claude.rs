//! `ralph run` completing a small feature with the real claude-agent-acp (Claude Code over
//! ACP), offline: the agent talks to the scripted fake Anthropic API on 127.0.0.1. The
//! agent is installed by `scripts/install-agents`; this test fails, not skips, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use real_agents::fake_anthropic::{FakeAnthropic, claude};
use real_agents::scenario::scenario_tests;

scenario_tests! {
    claude;
    claude_agent_acp_completes_a_two_task_feature =
        ralph_run_completes_a_feature_in_dependency_order(
            &["write-greeting", "review-the-greeting"],
            |greeting| FakeAnthropic::write_file(greeting, "Hello, world!\n"),
        );
}
