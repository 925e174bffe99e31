//! The scripted agent's script: what to do, per task and attempt (pure parsing).
//!
//! ```yaml
//! model: scripted-1         # optional: reported as the session's model
//! models: [small, large]    # optional: the models a client may choose (session/set_config_option)
//! default:                 # tasks not listed: a bare list of steps = every attempt
//!   - text: "Did it. <task-done>{task}</task-done>"
//! tasks:
//!   write-test:            # a list of attempts, each a list of steps
//!     - [ {text: "trying"}, {stop: max_tokens} ]
//!     - [ {text: "ok. <task-done>{task}</task-done>"} ]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_yaml_ng::Value;

/// A script that cannot be used, with where the problem is.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {location}: {message}")]
pub(crate) struct ScriptError {
    /// The script file (or other source name).
    pub source_name: String,
    /// Where in the script (e.g. `tasks.write-test attempt 2 step 1`).
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// One thing the agent does during a prompt turn.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// Send an agent message chunk (`{task}` and `{attempt}` substituted).
    Text(String),
    /// Send an agent thought chunk.
    Thought(String),
    /// Wait (a cancellation ends the turn with `cancelled`).
    Delay(Duration),
    /// Go quiet (no traffic at all) for a while; a cancellation still ends the turn.
    Silence(Duration),
    /// Stop answering anything, cancellations included.
    Hang,
    /// A tool call: ask permission, then read or write a file through the client.
    Tool(ToolStep),
    /// End the turn with this stop reason (any string).
    Stop(String),
    /// Answer the prompt with a JSON-RPC error.
    Error(ErrorStep),
    /// Exit the process with this code.
    Exit(i32),
    /// SIGKILL the process.
    Kill,
    /// Print a line on stderr.
    Stderr(String),
    /// Run a shell command (`sh -c`) in the session's cwd without asking permission, as an
    /// agent that approves its own tool calls does; its exit and stderr are sent as text.
    Shell(String),
    /// Report usage: a `usage_update` notification, and token usage in the prompt response.
    Usage(UsageStep),
    /// Send one message chunk of this many bytes.
    Big(usize),
    /// Send this text one character per message chunk.
    Split(String),
    /// Replay this text as history when the session is set up, before any prompt.
    History(String),
    /// Report a model API failure inside the turn, as codex-acp does: the error as a
    /// message chunk, then a `session_info_update` whose `_meta.codex.threadStatus` is
    /// a `systemError`.
    SystemError(String),
    /// A `session_info_update` with `_meta.codex.threadStatus.type` set to this.
    ThreadStatus(String),
    /// Send an informational message chunk (`_meta.claudeCode.kind: "informational"`).
    Informational(String),
    /// Report token counts only in the prompt response's `_meta.quota`, as gemini-cli does.
    QuotaTokens(UsageStep),
}

/// A permissioned file tool call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolStep {
    /// The file (relative paths are taken from the session's cwd).
    pub path: PathBuf,
    /// Write this content; `None` reads the file instead.
    pub write: Option<String>,
    /// Text sent after the tool succeeded.
    pub ok_text: Option<String>,
    /// Text sent after the tool was denied or failed.
    pub fail_text: Option<String>,
    /// How the permission request describes the call.
    pub request: PermissionRequestStyle,
    /// End the turn with `cancelled` when the permission is refused, as codex-acp does
    /// when its `cancel` option is selected.
    pub cancel_on_reject: bool,
}

/// What a scripted permission request carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PermissionRequestStyle {
    /// The `tool_call` update and the request both carry title, kind, input and location.
    #[default]
    Full,
    /// The `tool_call` update carries everything; the request only the `toolCallId`.
    IdOnly,
    /// No `tool_call` update; the request only carries a `toolCallId`.
    Unannounced,
}

/// A JSON-RPC error answer to the prompt.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ErrorStep {
    /// The error code (default -32603, internal error).
    pub code: i32,
    /// The error message.
    pub message: String,
    /// `data.errorKind`, claude-agent-acp style.
    pub error_kind: Option<String>,
}

/// Usage to report.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct UsageStep {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in US dollars.
    pub cost_usd: Option<f64>,
}

/// Steps for every attempt, or per attempt (the last repeats).
#[derive(Clone, Debug, PartialEq)]
enum Plan {
    Every(Vec<Step>),
    PerAttempt(Vec<Vec<Step>>),
}

/// A parsed script.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Script {
    model: Option<String>,
    models: Vec<String>,
    default: Plan,
    tasks: BTreeMap<String, Plan>,
}

impl Script {
    /// Parses a YAML script; `source_name` names it in errors.
    pub(crate) fn from_yaml(text: &str, source_name: &str) -> Result<Self, ScriptError> {
        let fail = |location: &str, message: String| ScriptError {
            source_name: source_name.to_string(),
            location: location.to_string(),
            message,
        };
        let root: Value =
            serde_yaml_ng::from_str(text).map_err(|error| fail("document", error.to_string()))?;
        let root = match root {
            Value::Null => serde_yaml_ng::Mapping::new(),
            Value::Mapping(root) => root,
            _ => {
                return Err(fail(
                    "document",
                    "expected a mapping with `default` and `tasks`".into(),
                ));
            }
        };
        let mut model = None;
        let mut models = Vec::new();
        let mut default = Plan::Every(Vec::new());
        let mut tasks = BTreeMap::new();
        for (key, value) in root {
            match key.as_str() {
                Some("model") => {
                    model = Some(string(&value, "model").map_err(|message| fail("model", message))?)
                }
                Some("models") => {
                    let Value::Sequence(items) = &value else {
                        return Err(fail("models", "expected a list of model names".into()));
                    };
                    for item in items {
                        models.push(
                            string(item, "models").map_err(|message| fail("models", message))?,
                        );
                    }
                }
                Some("default") => {
                    default = parse_plan(&value, "default").map_err(|(l, m)| fail(&l, m))?
                }
                Some("tasks") => {
                    let Value::Mapping(entries) = value else {
                        return Err(fail(
                            "tasks",
                            "expected a mapping of task name to attempts".into(),
                        ));
                    };
                    for (name, plan) in entries {
                        let Some(name) = name.as_str() else {
                            return Err(fail("tasks", "task names must be strings".into()));
                        };
                        let location = format!("tasks.{name}");
                        let plan = parse_plan(&plan, &location).map_err(|(l, m)| fail(&l, m))?;
                        tasks.insert(name.to_string(), plan);
                    }
                }
                _ => {
                    return Err(fail(
                        "document",
                        format!(
                            "unknown key {} (expected `default` or `tasks`)",
                            describe(&key)
                        ),
                    ));
                }
            }
        }
        Ok(Self {
            model,
            models,
            default,
            tasks,
        })
    }

    /// The model the agent reports for its sessions (`model:` at the top).
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The models a client may choose (`models:` at the top).
    pub(crate) fn models(&self) -> &[String] {
        &self.models
    }

    /// The steps for `task` on attempt number `attempt` (1-based; beyond the list, the
    /// last attempt repeats).
    pub(crate) fn steps_for(&self, task: &str, attempt: u32) -> &[Step] {
        match self.tasks.get(task).unwrap_or(&self.default) {
            Plan::Every(steps) => steps,
            Plan::PerAttempt(attempts) => {
                let index = (attempt.max(1) as usize - 1).min(attempts.len().saturating_sub(1));
                attempts.get(index).map_or(&[], Vec::as_slice)
            }
        }
    }
}

/// The attempt number in `RALPH_ATTEMPT`: the trailing number of `<task>-a<N>`, or a
/// plain number; 1 when absent or unreadable.
pub(crate) fn attempt_number(attempt: Option<&str>) -> u32 {
    let Some(attempt) = attempt else { return 1 };
    let digits: String = attempt
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().unwrap_or(1).max(1)
}

/// Substitutes `{task}` and `{attempt}`.
pub(crate) fn substitute(text: &str, task: &str, attempt: u32) -> String {
    text.replace("{task}", task)
        .replace("{attempt}", &attempt.to_string())
}

type Failure = (String, String);

fn parse_plan(value: &Value, location: &str) -> Result<Plan, Failure> {
    let Value::Sequence(items) = value else {
        return Err((
            location.into(),
            "expected a list of steps or a list of attempts".into(),
        ));
    };
    if items.first().is_some_and(Value::is_sequence) {
        let attempts = items
            .iter()
            .enumerate()
            .map(|(index, attempt)| {
                let location = format!("{location} attempt {}", index + 1);
                match attempt {
                    Value::Sequence(steps) => parse_steps(steps, &location),
                    _ => Err((location, "expected a list of steps".into())),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Plan::PerAttempt(attempts))
    } else {
        Ok(Plan::Every(parse_steps(items, location)?))
    }
}

fn parse_steps(items: &[Value], location: &str) -> Result<Vec<Step>, Failure> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let location = format!("{location} step {}", index + 1);
            parse_step(item).map_err(|message| (location, message))
        })
        .collect()
}

const STEP_KINDS: &str = "text, thought, delay, silence, hang, tool, stop, error, exit, kill, stderr, usage, big, split, history, system_error, thread_status, informational, quota_tokens";

fn parse_step(item: &Value) -> Result<Step, String> {
    let (kind, argument) = match item {
        Value::String(kind) => (kind.as_str(), &Value::Null),
        Value::Mapping(map) if map.len() == 1 => match map.iter().next() {
            Some((Value::String(kind), argument)) => (kind.as_str(), argument),
            _ => return Err("a step is a mapping with one key (its kind)".into()),
        },
        _ => {
            return Err(format!(
                "a step is a mapping with one key, one of: {STEP_KINDS}"
            ));
        }
    };
    let text = || string(argument, kind);
    Ok(match kind {
        "text" => Step::Text(text()?),
        "thought" => Step::Thought(text()?),
        "stderr" => Step::Stderr(text()?),
        "shell" => Step::Shell(text()?),
        "split" => Step::Split(text()?),
        "system_error" => Step::SystemError(text()?),
        "thread_status" => Step::ThreadStatus(text()?),
        "informational" => Step::Informational(text()?),
        "quota_tokens" => Step::QuotaTokens(usage(argument)?),
        "stop" => Step::Stop(text()?),
        "delay" => Step::Delay(duration(argument, kind)?),
        "silence" => Step::Silence(duration(argument, kind)?),
        "hang" => Step::Hang,
        "kill" => Step::Kill,
        "exit" => Step::Exit(match argument {
            Value::Null => 0,
            other => other
                .as_i64()
                .and_then(|code| i32::try_from(code).ok())
                .ok_or("`exit` takes an exit code")?,
        }),
        "big" => Step::Big(size(argument)?),
        "history" => Step::History(match argument {
            Value::Null => "<task-done>{task}</task-done>".into(),
            _ => text()?,
        }),
        "tool" => Step::Tool(tool(argument)?),
        "error" => Step::Error(error_step(argument)?),
        "usage" => Step::Usage(usage(argument)?),
        other => {
            return Err(format!(
                "unknown step `{other}` (expected one of: {STEP_KINDS})"
            ));
        }
    })
}

fn string(value: &Value, kind: &str) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        Value::Bool(flag) => Ok(flag.to_string()),
        _ => Err(format!("`{kind}` takes a string")),
    }
}

fn duration(value: &Value, kind: &str) -> Result<Duration, String> {
    let text = string(value, kind)?;
    crate::clock::parse_duration(&text).map_err(|error| format!("`{kind}`: {error}"))
}

fn size(value: &Value) -> Result<usize, String> {
    if let Some(bytes) = value.as_u64() {
        return usize::try_from(bytes).map_err(|_| "`big`: size too large".to_string());
    }
    let text = value
        .as_str()
        .ok_or("`big` takes a size in bytes, e.g. 10MB")?
        .trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number
        .parse()
        .map_err(|_| format!("`big`: invalid size `{text}`"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1024,
        "mb" => 1_000_000,
        "mib" => 1024 * 1024,
        _ => {
            return Err(format!(
                "`big`: unknown unit in `{text}` (B, KB, KiB, MB, MiB)"
            ));
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("`big`: size `{text}` too large"))
}

fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    value.as_mapping().and_then(|map| map.get(name))
}

fn optional_string(value: &Value, name: &str, kind: &str) -> Result<Option<String>, String> {
    field(value, name)
        .map(|value| string(value, &format!("{kind}.{name}")))
        .transpose()
}

fn check_fields(value: &Value, kind: &str, allowed: &[&str]) -> Result<(), String> {
    let Some(map) = value.as_mapping() else {
        return Err(format!(
            "`{kind}` takes a mapping with: {}",
            allowed.join(", ")
        ));
    };
    for key in map.keys() {
        if !key.as_str().is_some_and(|key| allowed.contains(&key)) {
            return Err(format!(
                "`{kind}`: unknown field {} (expected: {})",
                describe(key),
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

fn tool(value: &Value) -> Result<ToolStep, String> {
    check_fields(
        value,
        "tool",
        &[
            "path",
            "write",
            "read",
            "ok_text",
            "fail_text",
            "request",
            "on_reject",
        ],
    )?;
    let cancel_on_reject = match optional_string(value, "on_reject", "tool")?.as_deref() {
        None | Some("continue") => false,
        Some("cancel") => true,
        Some(other) => {
            return Err(format!(
                "`tool.on_reject`: unknown choice `{other}` (expected continue or cancel)"
            ));
        }
    };
    let request = match optional_string(value, "request", "tool")?.as_deref() {
        None | Some("full") => PermissionRequestStyle::Full,
        Some("id_only") => PermissionRequestStyle::IdOnly,
        Some("unannounced") => PermissionRequestStyle::Unannounced,
        Some(other) => {
            return Err(format!(
                "`tool.request`: unknown style `{other}` (expected full, id_only or unannounced)"
            ));
        }
    };
    let path = optional_string(value, "path", "tool")?.ok_or("`tool` needs a `path`")?;
    let write = optional_string(value, "write", "tool")?;
    if write.is_some() == field(value, "read").is_some() {
        return Err("`tool` needs exactly one of `write: CONTENT` or `read: true`".into());
    }
    Ok(ToolStep {
        path: PathBuf::from(path),
        write,
        ok_text: optional_string(value, "ok_text", "tool")?,
        fail_text: optional_string(value, "fail_text", "tool")?,
        request,
        cancel_on_reject,
    })
}

fn error_step(value: &Value) -> Result<ErrorStep, String> {
    if let Value::String(message) = value {
        return Ok(ErrorStep {
            code: -32603,
            message: message.clone(),
            error_kind: None,
        });
    }
    check_fields(value, "error", &["code", "message", "error_kind"])?;
    let code = match field(value, "code") {
        None => -32603,
        Some(code) => code
            .as_i64()
            .and_then(|code| i32::try_from(code).ok())
            .ok_or("`error.code` takes an integer")?,
    };
    Ok(ErrorStep {
        code,
        message: optional_string(value, "message", "error")?
            .unwrap_or_else(|| "Internal error".into()),
        error_kind: optional_string(value, "error_kind", "error")?,
    })
}

fn usage(value: &Value) -> Result<UsageStep, String> {
    check_fields(
        value,
        "usage",
        &["input_tokens", "output_tokens", "cost_usd"],
    )?;
    let count = |name: &str| match field(value, name) {
        None => Ok(0),
        Some(count) => count
            .as_u64()
            .ok_or(format!("`usage.{name}` takes a whole number")),
    };
    let cost_usd = match field(value, "cost_usd") {
        None => None,
        Some(cost) => Some(cost.as_f64().ok_or("`usage.cost_usd` takes a number")?),
    };
    Ok(UsageStep {
        input_tokens: count("input_tokens")?,
        output_tokens: count("output_tokens")?,
        cost_usd,
    })
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(text) => format!("`{text}`"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
default:
  - text: "Did it. <task-done>{task}</task-done>"
tasks:
  write-test:
    - [ {text: "trying"}, {stop: max_tokens} ]
    - [ {text: "ok"} ]
"#;

    /// The first attempt's steps of a script that only has these `default` steps.
    fn default_steps(steps: &str) -> Vec<Step> {
        let script = Script::from_yaml(&format!("default: {steps}"), "s").unwrap();
        script.steps_for("t", 1).to_vec()
    }

    /// The tool of a script whose first `default` step is a tool call.
    fn first_tool(steps: &str) -> ToolStep {
        match default_steps(steps).remove(0) {
            Step::Tool(tool) => tool,
            other => panic!("expected a tool step, got {other:?}"),
        }
    }

    /// Why a script that only has these `default` steps is rejected.
    fn default_steps_error(steps: &str) -> String {
        Script::from_yaml(&format!("default: {steps}"), "s")
            .unwrap_err()
            .message
    }

    #[test]
    fn an_unlisted_task_gets_the_default_steps() {
        let script = Script::from_yaml(SCRIPT, "s.yaml").unwrap();
        assert_eq!(
            script.steps_for("other", 3),
            &[Step::Text("Did it. <task-done>{task}</task-done>".into())]
        );
    }

    #[test]
    fn attempts_pick_their_own_steps_and_the_last_repeats() {
        let script = Script::from_yaml(SCRIPT, "s.yaml").unwrap();
        assert_eq!(script.steps_for("write-test", 1).len(), 2);
        assert_eq!(
            script.steps_for("write-test", 2),
            &[Step::Text("ok".into())]
        );
        assert_eq!(
            script.steps_for("write-test", 7),
            &[Step::Text("ok".into())]
        );
    }

    #[test]
    fn an_unknown_step_names_task_attempt_and_step() {
        let error = Script::from_yaml("tasks:\n  t:\n    - [ {text: a}, {txt: b} ]\n", "s.yaml")
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "s.yaml: tasks.t attempt 1 step 2: unknown step `txt` (expected one of: {STEP_KINDS})"
            )
        );
    }

    #[test]
    fn bare_words_are_steps_without_arguments() {
        let steps = default_steps("[hang, kill, history]");
        assert_eq!(
            steps,
            &[
                Step::Hang,
                Step::Kill,
                Step::History("<task-done>{task}</task-done>".into())
            ]
        );
    }

    #[test]
    fn sizes_accept_units() {
        let steps = default_steps("[{big: 10MB}, {big: 2KiB}, {big: 5}]");
        assert_eq!(
            steps,
            &[Step::Big(10_000_000), Step::Big(2048), Step::Big(5)]
        );
    }

    #[test]
    fn a_tool_can_end_the_turn_cancelled_when_refused() {
        assert!(first_tool("[{tool: {path: a, read: true, on_reject: cancel}}]").cancel_on_reject);
        let error = default_steps_error("[{tool: {path: a, read: true, on_reject: stop}}]");
        assert!(error.contains("`tool.on_reject`"), "{error}");
    }

    #[test]
    fn a_tool_needs_exactly_one_of_read_and_write() {
        let error = default_steps_error("[{tool: {path: a}}]");
        assert!(error.contains("exactly one of"));
    }

    #[test]
    fn an_error_step_carries_its_error_kind() {
        let steps = default_steps("[{error: {message: too long, error_kind: max_output_tokens}}]");
        assert_eq!(
            steps,
            &[Step::Error(ErrorStep {
                code: -32603,
                message: "too long".into(),
                error_kind: Some("max_output_tokens".into()),
            })]
        );
    }

    #[test]
    fn a_tool_can_ask_permission_by_id_only() {
        let tool = first_tool("[{tool: {path: a, write: x, request: id_only}}]");
        assert_eq!(tool.request, PermissionRequestStyle::IdOnly);
    }

    #[test]
    fn an_invalid_duration_is_named() {
        let error = default_steps_error("[{delay: soon}]");
        assert!(error.starts_with("`delay`: invalid duration `soon`"));
    }

    #[test]
    fn attempt_numbers_come_from_the_attempt_id_or_a_plain_number() {
        assert_eq!(attempt_number(Some("write-test-a3")), 3);
        assert_eq!(attempt_number(Some("2")), 2);
        assert_eq!(attempt_number(Some("")), 1);
        assert_eq!(attempt_number(None), 1);
    }

    #[test]
    fn placeholders_are_substituted() {
        assert_eq!(substitute("{task}/{attempt}", "t", 2), "t/2");
    }
}
