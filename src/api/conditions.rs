//! Condition types and reasons on Feature and Task status, and a pure helper to set one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Feature: the plan is well-formed (names, dependencies, no cycle).
pub const VALID: &str = "Valid";
/// Feature: attempts are running or tasks are ready.
pub const PROGRESSING: &str = "Progressing";
/// Feature: every task is done.
pub const COMPLETE: &str = "Complete";
/// Feature: the feature ended failed.
pub const FAILED: &str = "Failed";
/// Feature and Task: the agent Pod can be built and created, and the agent works; `False`
/// names what the user must fix (reasons below).
pub const CONFIGURED: &str = "Configured";

/// Feature: some agent of the pool is not resting after exhausting its quota; `False` while
/// every agent rests (the message says until when). Set once an agent of the pool rested.
pub const AGENTS_AVAILABLE: &str = "AgentsAvailable";

/// `Configured=False`: the Feature names no `spec.agent.image`.
pub const REASON_MISSING_AGENT_IMAGE: &str = "MissingAgentImage";
/// `Configured=False`: the Feature's `spec.agent.command` is empty.
pub const REASON_MISSING_AGENT_COMMAND: &str = "MissingAgentCommand";
/// `Configured=False`: the API server refused the agent Pod (missing ServiceAccount, policy).
pub const REASON_POD_REJECTED: &str = "PodRejected";
/// `Configured=False`: an attempt's prompt does not fit in its Pod's annotations (the API
/// server refuses more than 256 KiB).
pub const REASON_PROMPT_TOO_LARGE: &str = "PromptTooLarge";
/// `Configured=False`: the agent Pods' ServiceAccount does not exist in the namespace.
pub const REASON_MISSING_SERVICE_ACCOUNT: &str = "MissingServiceAccount";
/// `Configured=False`: the runner reported the agent misconfigured (binary missing, not an
/// ACP agent, authentication required).
pub const REASON_AGENT_MISCONFIGURED: &str = "AgentMisconfigured";
/// `Configured=False`: the Feature sets `spec.verify.agent` without `spec.workspace.git`: a
/// verification Pod would check an empty directory.
pub const REASON_VERIFY_NEEDS_WORKSPACE: &str = "VerifyNeedsWorkspace";
/// Task: the task's work was reported done and a verification attempt checks it (`True`
/// while the verification is pending or running).
pub const VERIFYING: &str = "Verifying";
/// `Configured=False`: `spec.workspace.git` is invalid (a bad URL or branch name).
pub const REASON_GIT_WORKSPACE_INVALID: &str = "GitWorkspaceInvalid";
/// `Configured=False`: the git credentials Secret is missing or lacks a key.
pub const REASON_GIT_CREDENTIALS_MISSING: &str = "GitCredentialsMissing";
/// `Configured=False`: the model gateway's credential Secret is missing, lacks its key, or
/// the key is empty.
pub const REASON_GATEWAY_CREDENTIALS_MISSING: &str = "GatewayCredentialsMissing";
/// `Valid=False`: the API server rejected a Task the Feature's templates describe.
pub const REASON_TASK_REJECTED: &str = "TaskRejected";
/// `Valid=False`: the task DAG is invalid (unknown names, cycles, duplicates).
pub const REASON_INVALID_PLAN: &str = "InvalidPlan";

/// Task: the kernel confined the last attempt's agent with Landlock and it ran in the mode
/// where it asks before it acts; `False` names what weakened that (docs/security.md).
pub const CONFINED: &str = "Confined";

/// `Confined` of an attempt's confinement report: `True` (reason `Landlock`) when the
/// kernel enforced it all and nothing weakened it, else `False` with the reason
/// `LandlockUnavailable`, `LandlockPartial`, `ConfinementDisabled` or `Weakened`.
pub fn confined(
    report: &crate::engine::attempt::ConfinementReport,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    use crate::engine::attempt::LandlockState;
    let (status, reason, message) = if report.is_confined() {
        let abi = report.abi.unwrap_or_default();
        let message = format!(
            "Landlock ABI {abi}: the agent could write only its workspace, HOME and temp directory"
        );
        (STATUS_TRUE, "Landlock", message)
    } else {
        let reason = match report.landlock {
            LandlockState::Unavailable => "LandlockUnavailable",
            LandlockState::Partial => "LandlockPartial",
            LandlockState::Disabled => "ConfinementDisabled",
            LandlockState::Enforced => "Weakened",
        };
        (STATUS_FALSE, reason, report.problems.join("; "))
    };
    condition(CONFINED, status, reason, message, observed_generation, now)
}

/// A Feature's `Confined` from its Tasks' (name, `Confined`): the first `False` one named
/// (how many more), else `True` once a Task has one; `None` before any attempt ran.
pub fn feature_confined<'a>(
    tasks: impl IntoIterator<Item = (&'a str, &'a Condition)>,
    observed_generation: Option<i64>,
    now: Time,
) -> Option<Condition> {
    let mut confined = 0;
    let mut unconfined: Vec<(&str, &Condition)> = Vec::new();
    for (task, condition) in tasks {
        if condition.status == STATUS_FALSE {
            unconfined.push((task, condition));
        } else {
            confined += 1;
        }
    }
    let (status, reason, message) = match unconfined.as_slice() {
        [] if confined == 0 => return None,
        [] => (
            STATUS_TRUE,
            "Landlock",
            format!("the last attempt of each of {confined} tasks was confined"),
        ),
        [(task, first), rest @ ..] => {
            let more = match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more tasks)"),
            };
            let message = format!("task {task}: {}{more}", first.message);
            (STATUS_FALSE, first.reason.as_str(), message)
        }
    };
    Some(condition(
        CONFINED,
        status,
        reason,
        message,
        observed_generation,
        now,
    ))
}

/// Condition status `True`.
pub const STATUS_TRUE: &str = "True";
/// Condition status `False`.
pub const STATUS_FALSE: &str = "False";
/// Condition status `Unknown`.
pub const STATUS_UNKNOWN: &str = "Unknown";

/// Builds a condition; `status` is [`STATUS_TRUE`], [`STATUS_FALSE`] or [`STATUS_UNKNOWN`].
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// Sets `new` in `conditions`, replacing the condition of the same type. The
/// `lastTransitionTime` of the existing condition is kept when its status does not change.
/// Returns true when anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == new {
                return false;
            }
            *existing = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::{ConfinementReport, LandlockState};

    fn at(seconds: i64) -> Time {
        match jiff::Timestamp::from_second(seconds) {
            Ok(timestamp) => Time(timestamp),
            Err(error) => panic!("bad test timestamp: {error}"),
        }
    }

    /// Valid=True (PlanValid) at generation 1, since time 10.
    fn valid_since_10() -> Condition {
        condition(VALID, STATUS_TRUE, "PlanValid", "", Some(1), at(10))
    }

    #[test]
    fn set_condition_adds_a_missing_type() {
        let mut conditions = Vec::new();
        let changed = set_condition(&mut conditions, valid_since_10());
        assert!(changed);
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn set_condition_keeps_transition_time_when_status_is_unchanged() {
        let mut conditions = vec![valid_since_10()];
        let changed = set_condition(
            &mut conditions,
            condition(VALID, STATUS_TRUE, "PlanValid", "", Some(2), at(20)),
        );
        assert!(changed, "observedGeneration changed");
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn set_condition_moves_transition_time_when_status_flips() {
        let mut conditions = vec![valid_since_10()];
        set_condition(
            &mut conditions,
            condition(VALID, STATUS_FALSE, "Cycle", "a -> b -> a", Some(1), at(20)),
        );
        assert_eq!(conditions[0].last_transition_time, at(20));
        assert_eq!(conditions[0].reason, "Cycle");
    }

    #[test]
    fn set_condition_reports_no_change_for_an_identical_condition() {
        let mut conditions = vec![valid_since_10()];
        let changed = set_condition(
            &mut conditions,
            condition(VALID, STATUS_TRUE, "PlanValid", "", Some(1), at(30)),
        );
        assert!(!changed);
    }

    fn report(landlock: LandlockState, problems: &[&str]) -> ConfinementReport {
        ConfinementReport {
            landlock,
            abi: Some(7),
            problems: problems.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn an_enforced_confinement_without_problems_is_confined() {
        let confined = confined(&report(LandlockState::Enforced, &[]), Some(1), at(10));
        assert_eq!(
            (confined.status.as_str(), confined.reason.as_str()),
            (STATUS_TRUE, "Landlock")
        );
    }

    #[test]
    fn a_missing_landlock_is_not_confined_and_says_why() {
        let why = "the kernel does not enforce Landlock";
        let confined = confined(&report(LandlockState::Unavailable, &[why]), Some(1), at(10));
        assert_eq!(
            (confined.status.as_str(), confined.reason.as_str()),
            (STATUS_FALSE, "LandlockUnavailable")
        );
        assert_eq!(confined.message, why);
    }

    #[test]
    fn an_agent_left_in_its_own_mode_weakens_an_enforced_confinement() {
        let report = report(
            LandlockState::Enforced,
            &["the agent offers no session mode"],
        );
        assert_eq!(confined(&report, None, at(10)).reason, "Weakened");
    }

    #[test]
    fn a_feature_is_unconfined_when_one_task_is_naming_it() {
        let good = confined(&report(LandlockState::Enforced, &[]), None, at(1));
        let bad = confined(
            &report(LandlockState::Unavailable, &["no Landlock"]),
            None,
            at(1),
        );
        let feature = feature_confined([("a", &good), ("b", &bad)], Some(2), at(5)).unwrap();
        assert_eq!(
            (
                feature.status.as_str(),
                feature.reason.as_str(),
                feature.message.as_str()
            ),
            (STATUS_FALSE, "LandlockUnavailable", "task b: no Landlock")
        );
    }

    #[test]
    fn a_feature_without_attempts_has_no_confined_condition() {
        assert_eq!(feature_confined([], None, at(1)), None);
    }
}
