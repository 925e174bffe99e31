//! Putting the agent in the ACP session mode where it asks the client before edits and
//! commands (a work attempt), or in its read-only mode (a verifier): an agent that approves
//! its own tool calls never lets the runner's permission policy decide. The mode is set
//! after `session/new` the way the agent offers it: its session configuration option of
//! category `mode` (`session/set_config_option`), else `session/set_mode`. The table of
//! agents and modes is in docs/security.md.

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, JsonRpcRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{RawSetConfigOption, RawSetResponse};

/// `session/set_mode`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "session/set_mode", response = RawSetResponse)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawSetMode {
    /// The session.
    pub session_id: String,
    /// The chosen mode.
    pub mode_id: String,
}

/// The modes of an agent ralph knows: matched by the name it reports in `initialize`.
struct KnownAgent {
    name: &'static str,
    /// The mode where it asks before edits and commands.
    work: &'static str,
    /// A verifier's modes, the first the session offers wins.
    verify: &'static [&'static str],
    /// Under Landlock, for work and verification: the agent's asking modes run commands in a
    /// sandbox of its own that cannot start inside Landlock (it needs mounts), so it runs
    /// unsandboxed without asking and the kernel confines it.
    under_landlock: Option<&'static str>,
}

/// The agents ralph knows (docs/security.md has this table).
const KNOWN_AGENTS: &[KnownAgent] = &[
    KnownAgent {
        name: "claude-agent-acp",
        work: "default",
        verify: &["plan"],
        under_landlock: None,
    },
    KnownAgent {
        name: "codex-acp",
        work: "read-only",
        verify: &["read-only"],
        under_landlock: Some("agent-full-access"),
    },
    KnownAgent {
        name: "ralph-script",
        work: "default",
        verify: &["plan"],
        under_landlock: None,
    },
    KnownAgent {
        name: "gemini-cli",
        work: "default",
        verify: &["plan", "default"],
        under_landlock: None,
    },
];

/// Modes tried by name on an agent ralph does not know.
const GENERIC: KnownAgent = KnownAgent {
    name: "",
    work: "default",
    verify: &["plan", "read-only", "default"],
    under_landlock: None,
};

/// What the runner wants of the agent's mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// A verifier: the read-only mode.
    pub read_only: bool,
    /// Landlock confines the agent.
    pub landlock: bool,
    /// The runner refuses tool calls matching `--deny` globs, which only an asking agent meets.
    pub deny_globs: bool,
}

/// What came of setting the mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ModeSet {
    /// The mode the agent now runs in, when the runner set one.
    pub mode: Option<String>,
    /// Why the agent may not ask before it acts (unknown agent, mode missing or refused).
    pub problem: Option<String>,
}

/// How a session lets the client choose its mode.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ModeRoute {
    /// A configuration option (`id`) offering these values.
    ConfigOption { id: String, offered: Vec<String> },
    /// The `modes` state offering these ids.
    SessionMode { offered: Vec<String> },
    /// Neither.
    None,
}

impl ModeRoute {
    fn of(config_options: Option<&Value>, modes: Option<&Value>) -> ModeRoute {
        let options = config_options
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        let selector = options.clone().find(|o| o["id"] == "mode").or_else(|| {
            options
                .clone()
                .find(|o| o["category"] == "mode" && o["type"] == "select")
        });
        if let Some(selector) = selector
            && let Some(id) = selector["id"].as_str()
        {
            return ModeRoute::ConfigOption {
                id: id.to_owned(),
                offered: super::model::offered_values(selector),
            };
        }
        match modes.and_then(|m| m["availableModes"].as_array()) {
            Some(available) => ModeRoute::SessionMode {
                offered: available
                    .iter()
                    .filter_map(|m| Some(m["id"].as_str()?.to_owned()))
                    .collect(),
            },
            None => ModeRoute::None,
        }
    }

    fn offered(&self) -> &[String] {
        match self {
            ModeRoute::ConfigOption { offered, .. } | ModeRoute::SessionMode { offered } => offered,
            ModeRoute::None => &[],
        }
    }
}

/// The mode to ask `agent` (its `initialize` name) for, among those `offered`, and what
/// it leaves unguarded; `Err`: why none fits.
fn choose(agent: &str, wanted: Wanted, offered: &[String]) -> Result<ModeSet, String> {
    let known = KNOWN_AGENTS.iter().find(|known| agent.contains(known.name));
    let entry = known.unwrap_or(&GENERIC);
    let landlock_mode = entry.under_landlock.filter(|_| wanted.landlock);
    let candidates: Vec<&str> = match landlock_mode {
        Some(mode) => vec![mode],
        None if wanted.read_only => entry.verify.to_vec(),
        None => vec![entry.work],
    };
    let Some(mode) = candidates
        .iter()
        .find(|mode| offered.iter().any(|o| o == *mode))
    else {
        return Err(format!(
            "the agent offers no mode {} (it offers: {})",
            candidates.join(" or "),
            offered.join(", ")
        ));
    };
    let problem = match (known, landlock_mode) {
        (None, _) => Some(format!(
            "ralph does not know the agent {agent}: it chose mode `{mode}` by its name only; \
             check that the agent asks before edits and commands in it"
        )),
        (Some(_), Some(_)) if wanted.deny_globs => Some(format!(
            "the agent {agent} runs in mode `{mode}` under Landlock and does not ask, so the \
             --deny patterns never apply to it"
        )),
        _ => None,
    };
    Ok(ModeSet {
        mode: Some((*mode).to_owned()),
        problem,
    })
}

/// Puts the session in the mode where `agent` asks before it acts (a verifier: its
/// read-only mode), as far as it lets the client choose.
pub(crate) async fn set(
    cx: &ConnectionTo<Agent>,
    session_id: &str,
    agent: &str,
    wanted: Wanted,
    (config_options, modes): (Option<&Value>, Option<&Value>),
) -> ModeSet {
    let route = ModeRoute::of(config_options, modes);
    if route == ModeRoute::None {
        return ModeSet {
            mode: None,
            problem: Some(format!(
                "the agent {agent} offers no session mode, so ralph cannot make it ask \
                 before edits and commands"
            )),
        };
    }
    let chosen = match choose(agent, wanted, route.offered()) {
        Ok(chosen) => chosen,
        Err(problem) => {
            return ModeSet {
                mode: None,
                problem: Some(format!(
                    "the agent {agent} was left in its own mode: {problem}"
                )),
            };
        }
    };
    let mode = chosen.mode.clone().unwrap_or_default();
    let answer = match &route {
        ModeRoute::ConfigOption { id, .. } => cx
            .send_request(RawSetConfigOption {
                session_id: session_id.to_owned(),
                config_id: id.clone(),
                value: mode.clone(),
            })
            .block_task()
            .await
            .map(drop),
        _ => cx
            .send_request(RawSetMode {
                session_id: session_id.to_owned(),
                mode_id: mode.clone(),
            })
            .block_task()
            .await
            .map(drop),
    };
    match answer {
        Ok(()) => chosen,
        Err(error) => ModeSet {
            mode: None,
            problem: Some(format!(
                "the agent {agent} refused mode `{mode}`: {}",
                error.message
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn offered(modes: &[&str]) -> Vec<String> {
        modes.iter().map(|m| (*m).to_owned()).collect()
    }

    const WORK: Wanted = Wanted {
        read_only: false,
        landlock: true,
        deny_globs: false,
    };
    const VERIFY: Wanted = Wanted {
        read_only: true,
        ..WORK
    };

    fn mode(agent: &str, wanted: Wanted, modes: &[&str]) -> ModeSet {
        choose(agent, wanted, &offered(modes)).unwrap()
    }

    #[test]
    fn claude_works_in_default_and_verifies_in_plan() {
        let modes = ["auto", "default", "acceptEdits", "plan", "dontAsk"];
        let agent = "@agentclientprotocol/claude-agent-acp 0.49.0";
        assert_eq!(mode(agent, WORK, &modes).mode.as_deref(), Some("default"));
        assert_eq!(mode(agent, VERIFY, &modes).mode.as_deref(), Some("plan"));
    }

    #[test]
    fn codex_runs_in_full_access_under_landlock_where_its_sandbox_cannot_start() {
        let modes = ["read-only", "workspace-write", "agent", "agent-full-access"];
        let agent = "@agentclientprotocol/codex-acp 2.6.0";
        let chosen = mode(agent, WORK, &modes);
        assert_eq!(chosen.mode.as_deref(), Some("agent-full-access"));
        assert_eq!(chosen.problem, None);
        assert_eq!(
            mode(agent, VERIFY, &modes).mode.as_deref(),
            Some("agent-full-access")
        );
    }

    #[test]
    fn codex_without_landlock_asks_before_every_edit_in_read_only() {
        let modes = ["read-only", "workspace-write", "agent", "agent-full-access"];
        let agent = "@agentclientprotocol/codex-acp 2.6.0";
        let unconfined = Wanted {
            landlock: false,
            ..WORK
        };
        let verifying = Wanted {
            read_only: true,
            ..unconfined
        };
        assert_eq!(
            mode(agent, unconfined, &modes).mode.as_deref(),
            Some("read-only")
        );
        assert_eq!(
            mode(agent, verifying, &modes).mode.as_deref(),
            Some("read-only")
        );
    }

    #[test]
    fn deny_globs_that_never_reach_a_non_asking_agent_are_a_problem() {
        let modes = ["read-only", "workspace-write", "agent-full-access"];
        let wanted = Wanted {
            deny_globs: true,
            ..WORK
        };
        let chosen = mode("codex-acp", wanted, &modes);
        assert!(
            chosen
                .problem
                .unwrap()
                .contains("--deny patterns never apply")
        );
    }

    #[test]
    fn gemini_verifies_in_default_when_plan_is_not_offered() {
        let chosen = mode(
            "gemini-cli 0.61.0",
            VERIFY,
            &["default", "autoEdit", "yolo"],
        );
        assert_eq!(chosen.mode.as_deref(), Some("default"));
    }

    #[test]
    fn an_unknown_agent_gets_default_by_name_and_a_problem() {
        let chosen = mode("fast-agent 0.3", WORK, &["default", "yolo"]);
        assert_eq!(chosen.mode.as_deref(), Some("default"));
        assert!(chosen.problem.unwrap().contains("does not know the agent"));
    }

    #[test]
    fn a_missing_mode_names_what_the_agent_offers() {
        let problem = choose("claude-agent-acp", WORK, &offered(&["auto"])).unwrap_err();
        assert!(
            problem.contains("no mode default (it offers: auto)"),
            "{problem}"
        );
    }

    #[test]
    fn the_mode_config_option_wins_over_the_modes_state() {
        let options = json!([{"id": "mode", "category": "mode", "type": "select",
            "currentValue": "agent", "options": [{"value": "read-only"}, {"value": "agent"}]}]);
        let modes = json!({"currentModeId": "agent", "availableModes": [{"id": "x"}]});
        assert_eq!(
            ModeRoute::of(Some(&options), Some(&modes)),
            ModeRoute::ConfigOption {
                id: "mode".into(),
                offered: offered(&["read-only", "agent"])
            }
        );
    }

    #[test]
    fn the_modes_state_is_used_without_a_mode_option() {
        let modes = json!({"currentModeId": "default",
            "availableModes": [{"id": "default"}, {"id": "yolo"}]});
        assert_eq!(
            ModeRoute::of(None, Some(&modes)),
            ModeRoute::SessionMode {
                offered: offered(&["default", "yolo"])
            }
        );
    }
}
