//! The tool calls of a session, tracked by `toolCallId`: a `tool_call` update creates
//! one, `tool_call_update`s and permission requests change the fields they carry (ACP:
//! fields sent replace the known ones, collections are replaced, not extended). The
//! permission policy decides on this merged state, so an agent that asks permission with
//! only `{toolCallId}` is judged on what it said about the call before.

use std::collections::HashMap;
use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    ToolCall, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;

use super::permission::ToolRequest;

/// Keys of a tool call's raw input that name a file or directory the tool touches
/// (claude-agent-acp, codex-acp, gemini-cli and common MCP file tools).
const PATH_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "notebook_path",
    "absolute_path",
    "dir_path",
    "directory",
    "destination",
    "destination_path",
    "source",
    "source_path",
    "target",
    "target_file",
    "new_path",
    "old_path",
    "from",
    "to",
    "cwd",
    "workdir",
];

/// Keys of a tool call's raw input holding a list of paths.
const PATH_LIST_KEYS: &[&str] = &["paths", "file_paths", "absolute_paths"];

/// Keys of a tool call's raw input holding a map whose keys are paths (codex patches).
const PATH_MAP_KEYS: &[&str] = &["changes"];

/// What is known about one tool call, merged from everything the agent sent about it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KnownToolCall {
    /// The human-readable title.
    pub title: Option<String>,
    /// The kind of tool.
    pub kind: Option<ToolKind>,
    /// The files the call affects.
    pub locations: Vec<PathBuf>,
    /// The files its diffs change (codex-acp shows a file change's paths only there).
    pub diff_paths: Vec<PathBuf>,
    /// The raw input parameters.
    pub raw_input: Option<Value>,
}

impl KnownToolCall {
    /// Takes in the fields one update carries.
    pub(crate) fn apply(&mut self, fields: &ToolCallUpdateFields) {
        if let Some(title) = &fields.title {
            self.title = Some(title.clone());
        }
        if let Some(kind) = fields.kind {
            self.kind = Some(kind);
        }
        if let Some(locations) = &fields.locations {
            self.locations = locations
                .iter()
                .map(|location| location.path.clone())
                .collect();
        }
        if let Some(content) = &fields.content {
            self.diff_paths = content
                .iter()
                .filter_map(|content| match content {
                    ToolCallContent::Diff(diff) => Some(diff.path.clone()),
                    _ => None,
                })
                .collect();
        }
        if let Some(raw_input) = &fields.raw_input {
            self.raw_input = Some(raw_input.clone());
        }
    }

    /// Whether nothing at all is known about the call.
    pub(crate) fn is_unknown(&self) -> bool {
        self.title
            .as_deref()
            .is_none_or(|title| title.trim().is_empty())
            && self.kind.is_none_or(|kind| kind == ToolKind::Other)
            && self.locations.is_empty()
            && self.diff_paths.is_empty()
            && self.raw_input.as_ref().is_none_or(is_empty)
    }

    /// The parts of the call the permission policy looks at.
    pub(crate) fn request(&self) -> ToolRequest {
        let mut paths = self.locations.clone();
        paths.extend(self.diff_paths.iter().cloned());
        if let Some(input) = &self.raw_input {
            paths.extend(input_paths(input));
        }
        let mut seen = std::collections::HashSet::new();
        paths.retain(|path| seen.insert(path.clone()));
        ToolRequest {
            title: self.title.clone(),
            kind: self.kind,
            command: self.raw_input.as_ref().and_then(input_command),
            paths,
            unknown: self.is_unknown(),
        }
    }
}

/// The tool calls of one session, by id.
#[derive(Debug, Default)]
pub(crate) struct ToolCalls {
    calls: HashMap<String, KnownToolCall>,
}

impl ToolCalls {
    /// Takes in a `tool_call` session update (a repeated id updates the known call).
    pub(crate) fn record_call(&mut self, call: &ToolCall) {
        let update = ToolCallUpdate::from(call.clone());
        self.record_update(&update);
    }

    /// Takes in a `tool_call_update` session update (an unknown id starts a new call).
    pub(crate) fn record_update(&mut self, update: &ToolCallUpdate) {
        self.calls
            .entry(update.tool_call_id.0.to_string())
            .or_default()
            .apply(&update.fields);
    }

    /// The call a permission request is about: what is known, with the request's own
    /// fields merged in (and remembered).
    pub(crate) fn merge_request(&mut self, tool_call: &ToolCallUpdate) -> KnownToolCall {
        self.record_update(tool_call);
        self.calls
            .get(tool_call.tool_call_id.0.as_ref())
            .cloned()
            .unwrap_or_default()
    }

    /// Takes in one raw `session/update` if it is about a tool call.
    pub(crate) fn record_raw(&mut self, update: &Value) {
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("tool_call") => {
                if let Ok(call) = serde_json::from_value::<ToolCall>(update.clone()) {
                    self.record_call(&call);
                }
            }
            Some("tool_call_update") => {
                if let Ok(update) = serde_json::from_value::<ToolCallUpdate>(update.clone()) {
                    self.record_update(&update);
                }
            }
            _ => {}
        }
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::String(text) => text.is_empty(),
        _ => false,
    }
}

/// The paths a raw input names, at its top level and one level down (e.g. `{"args": {"path": ..}}`).
fn input_paths(input: &Value) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    collect_paths(input, &mut paths);
    if let Value::Object(map) = input {
        for nested in map.values().filter(|value| value.is_object()) {
            collect_paths(nested, &mut paths);
        }
    }
    paths
}

fn collect_paths(input: &Value, paths: &mut Vec<PathBuf>) {
    let Value::Object(map) = input else { return };
    let text_path = |value: &Value| {
        value
            .as_str()
            .filter(|text| !text.trim().is_empty())
            .map(PathBuf::from)
    };
    for key in PATH_KEYS {
        paths.extend(map.get(*key).and_then(text_path));
    }
    for key in PATH_LIST_KEYS {
        if let Some(Value::Array(items)) = map.get(*key) {
            paths.extend(items.iter().filter_map(text_path));
        }
    }
    for key in PATH_MAP_KEYS {
        if let Some(Value::Object(entries)) = map.get(*key) {
            paths.extend(entries.keys().map(PathBuf::from));
        }
    }
}

/// The shell command in a raw input (`command` as a string or an argument list).
fn input_command(input: &Value) -> Option<String> {
    match input.get("command")? {
        Value::String(command) => Some(command.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::ToolCallLocation;
    use serde_json::json;

    fn id_only(id: &str) -> ToolCallUpdate {
        ToolCallUpdate::new(id.to_string(), ToolCallUpdateFields::new())
    }

    #[test]
    fn an_id_only_request_gets_what_the_tool_call_said() {
        let mut calls = ToolCalls::default();
        calls.record_raw(&json!({
            "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Write /etc/x",
            "kind": "edit", "locations": [{"path": "/etc/x"}], "rawInput": {"file_path": "/etc/x"}
        }));
        let known = calls.merge_request(&id_only("c1"));
        assert_eq!(known.title.as_deref(), Some("Write /etc/x"));
        assert_eq!(known.kind, Some(ToolKind::Edit));
        assert_eq!(known.request().paths, [PathBuf::from("/etc/x")]);
    }

    #[test]
    fn updates_replace_the_fields_they_carry() {
        let mut calls = ToolCalls::default();
        calls.record_raw(&json!({
            "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Edit",
            "locations": [{"path": "a.rs"}]
        }));
        calls.record_raw(&json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "c1",
            "locations": [{"path": "b.rs"}], "rawInput": {"path": "c.rs"}
        }));
        let known = calls.merge_request(&id_only("c1"));
        assert_eq!(known.title.as_deref(), Some("Edit"));
        assert_eq!(
            known.request().paths,
            [PathBuf::from("b.rs"), PathBuf::from("c.rs")]
        );
    }

    #[test]
    fn the_requests_own_fields_win() {
        let mut calls = ToolCalls::default();
        calls.record_raw(
            &json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a"}),
        );
        let request = ToolCallUpdate::new(
            "c1",
            ToolCallUpdateFields::new()
                .title("Write b".to_string())
                .locations(vec![ToolCallLocation::new("b")]),
        );
        let known = calls.merge_request(&request);
        assert_eq!(known.title.as_deref(), Some("Write b"));
        assert_eq!(known.locations, [PathBuf::from("b")]);
    }

    #[test]
    fn the_paths_of_a_diff_are_checked_like_locations() {
        let mut calls = ToolCalls::default();
        calls.record_raw(&json!({
            "sessionUpdate": "tool_call", "toolCallId": "patch", "title": "Apply patch", "kind": "edit",
            "content": [{"type": "diff", "path": "/etc/passwd", "oldText": "a", "newText": "b"}]
        }));
        let known = calls.merge_request(&ToolCallUpdate::new(
            "patch",
            ToolCallUpdateFields::new().kind(ToolKind::Edit),
        ));
        assert_eq!(known.request().paths, [PathBuf::from("/etc/passwd")]);
    }

    #[test]
    fn a_call_never_described_is_unknown() {
        let mut calls = ToolCalls::default();
        assert!(calls.merge_request(&id_only("c9")).request().unknown);
    }

    #[test]
    fn raw_input_paths_are_found_under_common_keys_lists_maps_and_one_level_down() {
        let input = json!({
            "destination": "/tmp/d", "paths": ["p1", "p2"],
            "changes": {"/abs/patched.rs": {"type": "add"}},
            "args": {"notebook_path": "n.ipynb"}
        });
        let paths = input_paths(&input);
        for expected in ["/tmp/d", "p1", "p2", "/abs/patched.rs", "n.ipynb"] {
            assert!(
                paths.contains(&PathBuf::from(expected)),
                "{expected} missing"
            );
        }
    }

    #[test]
    fn a_command_list_is_joined() {
        let input = json!({"command": ["git", "push"]});
        assert_eq!(input_command(&input).as_deref(), Some("git push"));
    }
}
