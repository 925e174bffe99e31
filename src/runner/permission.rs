//! The answer to `session/request_permission`: allow tool calls inside the workspace,
//! refuse those that touch paths outside it or match a deny pattern.

use std::path::PathBuf;

use agent_client_protocol::v1::schema::ToolKind;
use regex::Regex;

use super::error::RunnerError;
use super::workspace::Workspace;

/// What a permission request is about, reduced to what the policy looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolRequest {
    /// The tool call's title (e.g. `Write src/main.rs`, `` `rm -rf build` ``).
    pub title: Option<String>,
    /// The kind of tool, when the agent said.
    pub kind: Option<ToolKind>,
    /// A shell command in the tool call's raw input, when there is one.
    pub command: Option<String>,
    /// The file paths the tool call names (its locations, and `path`-like raw input).
    pub paths: Vec<PathBuf>,
    /// Nothing at all is known about the call (no title, kind, input or location).
    pub unknown: bool,
}

/// The policy's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the tool run.
    Allow,
    /// Refuse, for the reason given.
    Deny(String),
}

/// Deny globs plus the workspace rule, and for a verification attempt the read-only rule.
#[derive(Clone, Debug, Default)]
pub(crate) struct PermissionPolicy {
    deny: Vec<(String, Regex)>,
    read_only: bool,
}

impl PermissionPolicy {
    /// A policy refusing whatever matches one of `deny` (globs: `*` is any run of
    /// characters, `?` one character; matched against the whole title, the command,
    /// and each path, absolute and workspace-relative).
    pub(crate) fn new(deny: &[String]) -> Result<Self, RunnerError> {
        let deny = deny
            .iter()
            .map(|glob| Ok((glob.clone(), glob_regex(glob)?)))
            .collect::<Result<_, RunnerError>>()?;
        Ok(Self {
            deny,
            read_only: false,
        })
    }

    /// The same policy, refusing every edit, write, delete and move when `read_only` (a
    /// verification attempt checks the work; it must not change it).
    pub(crate) fn read_only(self, read_only: bool) -> Self {
        Self { read_only, ..self }
    }

    /// Whether the agent may write files through the client (`fs/write_text_file`).
    pub(crate) fn allows_writes(&self) -> bool {
        !self.read_only
    }

    /// Decides one permission request: refused when nothing is known about the call,
    /// when a file-changing call names no path, when a path leads outside the workspace,
    /// or when a deny glob matches.
    pub(crate) fn decide(&self, request: &ToolRequest, workspace: &Workspace) -> Answer {
        if request.unknown {
            return Answer::Deny(
                "nothing is known about this tool call (no title, kind, input or location)".into(),
            );
        }
        if self.read_only
            && let Some(kind @ (ToolKind::Edit | ToolKind::Delete | ToolKind::Move)) = request.kind
        {
            return Answer::Deny(format!(
                "this is a read-only verification session: {} tool calls are refused; report \
                 what is wrong in your verdict instead of changing the work",
                kind_name(kind)
            ));
        }
        if self.read_only && request.kind == Some(ToolKind::SwitchMode) {
            return Answer::Deny(
                "this is a read-only verification session: it stays in its read-only mode".into(),
            );
        }
        if request.paths.is_empty()
            && let Some(kind @ (ToolKind::Edit | ToolKind::Delete | ToolKind::Move)) = request.kind
        {
            return Answer::Deny(format!(
                "the {} tool call names no path, so it cannot be checked against the workspace",
                kind_name(kind)
            ));
        }
        for path in &request.paths {
            let Ok(real) = workspace.resolve(path) else {
                return Answer::Deny(format!(
                    "{} is outside the workspace {}",
                    path.display(),
                    workspace.root().display()
                ));
            };
            let relative = workspace.relative(&real).map(|p| p.display().to_string());
            let candidates = [
                Some(path.display().to_string()),
                Some(real.display().to_string()),
                relative,
            ];
            if let Some(glob) = self.matching(candidates.iter().flatten()) {
                return Answer::Deny(format!("{} matches deny pattern `{glob}`", path.display()));
            }
        }
        let texts = [&request.title, &request.command];
        if let Some(glob) = self.matching(texts.iter().copied().flatten()) {
            return Answer::Deny(format!("tool call matches deny pattern `{glob}`"));
        }
        Answer::Allow
    }

    fn matching<'a>(&self, mut texts: impl Iterator<Item = &'a String>) -> Option<&str> {
        texts.find_map(|text| {
            self.deny
                .iter()
                .find(|(_, regex)| regex.is_match(text.trim()))
                .map(|(glob, _)| glob.as_str())
        })
    }
}

fn kind_name(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Edit => "edit",
        ToolKind::Delete => "delete",
        ToolKind::Move => "move",
        _ => "other",
    }
}

fn glob_regex(glob: &str) -> Result<Regex, RunnerError> {
    if glob.trim().is_empty() {
        return Err(RunnerError::DenyPattern {
            pattern: glob.to_string(),
            reason: "empty pattern".into(),
        });
    }
    let mut pattern = String::from("^");
    for ch in glob.chars() {
        match ch {
            '*' => pattern.push_str(".*"),
            '?' => pattern.push('.'),
            other => pattern.push_str(&regex::escape(&other.to_string())),
        }
    }
    pattern.push('$');
    Regex::new(&pattern).map_err(|error| RunnerError::DenyPattern {
        pattern: glob.to_string(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy refusing what matches the `deny` globs.
    fn denying(deny: &[&str]) -> PermissionPolicy {
        let deny: Vec<String> = deny.iter().map(|glob| glob.to_string()).collect();
        PermissionPolicy::new(&deny).unwrap()
    }

    /// The policy of a verification session.
    fn read_only() -> PermissionPolicy {
        denying(&[]).read_only(true)
    }

    /// What `policy` decides for `request` in a fresh workspace.
    fn decide(policy: &PermissionPolicy, request: &ToolRequest) -> Answer {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        policy.decide(request, &workspace)
    }

    /// Why `request` is refused; fails the test when it is allowed.
    #[track_caller]
    fn refusal(policy: &PermissionPolicy, request: &ToolRequest) -> String {
        match decide(policy, request) {
            Answer::Deny(reason) => reason,
            Answer::Allow => panic!("{request:?} was allowed"),
        }
    }

    fn call(title: &str, kind: ToolKind) -> ToolRequest {
        ToolRequest {
            title: Some(title.into()),
            kind: Some(kind),
            ..ToolRequest::default()
        }
    }

    fn writing(path: &str) -> ToolRequest {
        ToolRequest {
            title: Some(format!("Write {path}")),
            kind: Some(ToolKind::Edit),
            command: None,
            paths: vec![PathBuf::from(path)],
            unknown: false,
        }
    }

    #[test]
    fn a_write_inside_the_workspace_is_allowed() {
        assert_eq!(decide(&denying(&[]), &writing("src/lib.rs")), Answer::Allow);
    }

    #[test]
    fn a_write_outside_the_workspace_is_denied() {
        let reason = refusal(&denying(&[]), &writing("../elsewhere.txt"));
        assert!(reason.contains("outside the workspace"), "{reason}");
    }

    #[test]
    fn a_deny_glob_matches_workspace_relative_paths() {
        let reason = refusal(&denying(&["secrets/*"]), &writing("secrets/key.pem"));
        assert!(reason.contains("`secrets/*`"), "{reason}");
    }

    #[test]
    fn a_deny_glob_matches_commands() {
        let request = ToolRequest {
            title: Some("Terminal".into()),
            command: Some("git push --force origin main".into()),
            ..ToolRequest::default()
        };
        refusal(&denying(&["git push*"]), &request);
    }

    #[test]
    fn a_call_nothing_is_known_about_is_denied() {
        let request = ToolRequest {
            unknown: true,
            ..ToolRequest::default()
        };
        let reason = refusal(&denying(&[]), &request);
        assert!(reason.starts_with("nothing is known"), "{reason}");
    }

    #[test]
    fn an_edit_naming_no_path_is_denied() {
        let reason = refusal(&denying(&[]), &call("Edit", ToolKind::Edit));
        assert!(reason.contains("names no path"), "{reason}");
    }

    #[test]
    fn a_deny_glob_matches_the_title() {
        let request = call("WebFetch https://example.com", ToolKind::Fetch);
        refusal(&denying(&["WebFetch*"]), &request);
    }

    #[test]
    fn a_read_only_policy_refuses_an_edit_inside_the_workspace() {
        let reason = refusal(&read_only(), &writing("src/lib.rs"));
        assert!(
            reason.contains("read-only verification session"),
            "{reason}"
        );
    }

    #[test]
    fn a_read_only_policy_refuses_deletes_and_moves() {
        for kind in [ToolKind::Delete, ToolKind::Move] {
            let request = ToolRequest {
                kind: Some(kind),
                ..writing("src/lib.rs")
            };
            refusal(&read_only(), &request);
        }
    }

    #[test]
    fn a_read_only_policy_refuses_leaving_its_mode() {
        let exit_plan = call("Ready to code?", ToolKind::SwitchMode);
        assert!(refusal(&read_only(), &exit_plan).contains("stays in its read-only mode"));
        assert_eq!(decide(&denying(&[]), &exit_plan), Answer::Allow);
    }

    #[test]
    fn a_read_only_policy_lets_reads_and_commands_run() {
        let policy = read_only();
        let read = ToolRequest {
            kind: Some(ToolKind::Read),
            ..writing("src/lib.rs")
        };
        let test = ToolRequest {
            command: Some("cargo test".into()),
            ..call("cargo test", ToolKind::Execute)
        };
        assert_eq!(decide(&policy, &read), Answer::Allow);
        assert_eq!(decide(&policy, &test), Answer::Allow);
        assert!(!policy.allows_writes());
    }

    #[test]
    fn an_empty_deny_pattern_is_rejected() {
        let error = PermissionPolicy::new(&[" ".into()]).unwrap_err();
        assert!(error.to_string().contains("empty pattern"));
    }
}
