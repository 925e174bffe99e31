//! `spec.verify` of a Feature: how a task an agent reports done is checked before it counts
//! as done (docs/verification.md).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::engine::verification::{
    DEFAULT_COMMAND_TIMEOUT_SECONDS, MAX_OUTPUT_TAIL_BYTES, Verification,
};

/// Verified completion: after an agent reports a task done, `command` runs in the workspace,
/// then (when `agent` is set) a fresh, read-only agent session checks the work. A failing
/// command or a rejecting (crashing, silent) verifier sends the task back with the reason
/// in its next prompt, counted against its retries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.command) || (!has(self.commandTimeoutSeconds) && !has(self.outputTailBytes))").message("commandTimeoutSeconds and outputTailBytes apply to verify.command: set command, or remove them"))]
pub struct VerifySpec {
    /// Run a verification attempt after a done verdict (and a passing command): a fresh
    /// agent session, read-only (edits, writes and deletes are refused), that answers
    /// `<verify-pass>ID</verify-pass>` or `<verify-fail>ID</verify-fail>`. On a cluster it
    /// needs `spec.workspace.git`, so that its Pod sees the work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent: bool,

    /// A deterministic check run with `sh -c` in the workspace after a done verdict (for
    /// example `cargo test`); a non-zero exit or a timeout fails the verification, and the
    /// end of its output goes into the next prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096), pattern(r"\S"))]
    pub command: Option<String>,

    /// Time limit of `command`, in seconds (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub command_timeout_seconds: Option<u32>,

    /// How many bytes of the end of `command`'s output are kept (default and most 2048:
    /// the attempt's result must fit the 4 KiB termination message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_OUTPUT_TAIL_BYTES))]
    pub output_tail_bytes: Option<u32>,
}

impl VerifySpec {
    /// True when nothing is verified.
    pub fn is_off(&self) -> bool {
        !self.agent && self.command.is_none()
    }

    /// What the conclusion needs to know.
    pub fn verification(&self) -> Verification {
        Verification {
            agent: self.agent,
            command: self.command.is_some(),
        }
    }

    /// `commandTimeoutSeconds`, or its default.
    pub fn command_timeout_seconds(&self) -> u32 {
        self.command_timeout_seconds
            .unwrap_or(DEFAULT_COMMAND_TIMEOUT_SECONDS)
    }

    /// `outputTailBytes`, or its default.
    pub fn output_tail_bytes(&self) -> u32 {
        self.output_tail_bytes
            .unwrap_or(MAX_OUTPUT_TAIL_BYTES)
            .min(MAX_OUTPUT_TAIL_BYTES)
    }

    /// The `ralph runner` flags that run `command` after a done verdict (none without one).
    pub fn runner_args(&self) -> Vec<String> {
        let Some(command) = &self.command else {
            return Vec::new();
        };
        vec![
            "--verify-command".to_owned(),
            command.clone(),
            "--verify-command-timeout".to_owned(),
            format!("{}s", self.command_timeout_seconds()),
            "--verify-output-tail-bytes".to_owned(),
            self.output_tail_bytes().to_string(),
        ]
    }
}
