//! Planning in a local run (docs/planning.md): a planning attempt is a `ralph runner`
//! process like any other; its answer (a task list file) is checked by the manifest's rules
//! and kept in the store with its hash; an approved plan's tasks join the Feature's
//! hand-written ones, and `ralph task list` shows them like any task.

mod attempt;
pub(crate) mod proposals;
mod show;

use serde::{Deserialize, Serialize};

pub(crate) use attempt::{Failure, Planned, PlanningRun, Stop, plan, replan};
pub(crate) use show::{render_plan, render_plan_with_phases};

use crate::api::TaskTemplate;
use crate::api::planning::{Approval, ApprovalState, ApprovalStatus, PlanningSpec, PlanningStatus};
use crate::engine::planning::{PROPOSE_HELP, document_hash, hash_matches, plan_hash};
use crate::local::feature::LocalFeature;
use crate::local::status_view::Origin;
use crate::local::store::{Store, StoreError, keys};
use crate::manifest::answer::Answer;

/// Where planning stands, as the store keeps it (meta key `planning`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PlanState {
    /// Planning attempts started so far.
    #[serde(default)]
    pub attempts: u32,
    /// Invalid answers in the current round (since the last valid plan or rejection).
    #[serde(default)]
    pub invalid_answers: u32,
    /// Planning attempts without an answer (crashes) in the current round.
    #[serde(default)]
    pub crashes: u32,
    /// The problems of the last refused answer (given to the next attempt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// A person's reason for rejecting the last plan (given to the next attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<String>,
    /// Revisions after failures so far.
    #[serde(default)]
    pub replans: u32,
    /// The current plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<StoredPlan>,
    /// Done attempts whose final message was read for proposed tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proposals_read: Vec<String>,
    /// A revision replaced failed tasks: once the store takes its tasks, Failed and Blocked
    /// ones get another chance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_failed: bool,
    /// The hash of the plan whose tasks the store last took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// The plan approved before the current one, whose tasks run while a revision of it
    /// waits for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<StoredPlan>,
    /// The approval of the current plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalStatus>,
    /// Tasks of the plan that done attempts proposed (the others the planner wrote).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proposed: Vec<String>,
}

/// A valid plan: the planner's tasks and document, and the hash that names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredPlan {
    /// The tasks, as the planner wrote them.
    pub answer: Answer,
    /// The plan document, when the planner wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// The plan's hash ([`plan_hash`]).
    pub hash: String,
}

impl StoredPlan {
    /// A plan of `answer` and `document`, hashed.
    pub(crate) fn new(answer: Answer, document: Option<String>) -> StoredPlan {
        let hash = plan_hash(&answer.canonical(), document.as_deref());
        StoredPlan {
            answer,
            document,
            hash,
        }
    }

    /// Its tasks as templates.
    pub(crate) fn templates(&self) -> Vec<TaskTemplate> {
        self.answer.templates()
    }
}

impl PlanState {
    /// The plan whose tasks are the Feature's: the approved one, else the one approved
    /// before a revision that waits for approval.
    pub(crate) fn running(&self) -> Option<&StoredPlan> {
        self.approved().or(self.previous.as_ref())
    }

    /// The current plan, approved.
    pub(crate) fn approved(&self) -> Option<&StoredPlan> {
        let plan = self.plan.as_ref()?;
        let approval = self.approval.as_ref()?;
        (approval.state == ApprovalState::Approved && approval.hash == plan.hash).then_some(plan)
    }

    /// The plan waiting for a person, if any.
    pub(crate) fn awaiting_approval(&self) -> Option<&StoredPlan> {
        let plan = self.plan.as_ref()?;
        let pending = self
            .approval
            .as_ref()
            .is_none_or(|a| a.state == ApprovalState::Pending);
        pending.then_some(plan)
    }

    /// Takes a valid plan: approved at once when `approval` is Automatic; a new round of
    /// planning attempts starts.
    pub(crate) fn propose(&mut self, plan: StoredPlan, approval: Approval, at: String) {
        let state = match approval {
            Approval::Automatic => ApprovalState::Approved,
            Approval::Manual => ApprovalState::Pending,
        };
        self.approval = Some(ApprovalStatus {
            state,
            hash: plan.hash.clone(),
            comment: None,
            by: (approval == Approval::Automatic).then(|| "automatic".to_owned()),
            at: Some(at),
        });
        self.plan = Some(plan);
        self.problems.clear();
        self.rejection = None;
        self.invalid_answers = 0;
        self.crashes = 0;
    }

    /// Where task `task` of the Feature came from: the plan whose tasks run (the planner,
    /// or a done attempt's proposal), else the manifest.
    pub(crate) fn origin(&self, task: &str) -> Origin {
        let planned = self
            .running()
            .is_some_and(|plan| plan.answer.tasks.iter().any(|t| t.name == task));
        if !planned {
            Origin::HandWritten
        } else if self.proposed.iter().any(|p| p == task) {
            Origin::Proposed
        } else {
            Origin::Planned
        }
    }

    /// What `status.planning` says of this state.
    pub(crate) fn status(&self) -> PlanningStatus {
        PlanningStatus {
            attempts: self.attempts,
            replans: self.replans,
            document_hash: self
                .plan
                .as_ref()
                .and_then(|p| p.document.as_deref())
                .map(document_hash),
            dag_hash: self.plan.as_ref().map(|p| p.hash.clone()),
            tasks: self.plan.as_ref().map_or(0, |p| {
                u32::try_from(p.answer.tasks.len()).unwrap_or(u32::MAX)
            }),
            approval: self.approval.clone(),
            message: (!self.problems.is_empty()).then(|| self.problems.join("; ")),
            planned_by: None,
            running: self
                .previous
                .as_ref()
                .filter(|_| self.approved().is_none())
                .map(|p| p.hash.clone()),
            proposed: self.proposed.clone(),
            revising: None,
        }
    }
}

/// Adds proposed `tasks` to the running plan: a new plan, approved as any plan is (the
/// running one goes on while it waits). `None` when there is no running plan.
pub(crate) fn extend(
    state: &mut PlanState,
    tasks: Vec<crate::manifest::answer::AnswerTask>,
    approval: Approval,
    at: String,
) -> Option<()> {
    let running = state.running()?.clone();
    let mut answer = running.answer.clone();
    state.proposed.extend(tasks.iter().map(|t| t.name.clone()));
    answer.tasks.extend(tasks);
    let plan = StoredPlan::new(answer, running.document.clone());
    state.previous = Some(running);
    state.propose(plan, approval, at);
    Some(())
}

/// Reads the planning state (the default when nothing was planned yet).
pub(crate) fn load(store: &Store) -> Result<PlanState, StoreError> {
    match store.meta(keys::PLANNING)? {
        None => Ok(PlanState::default()),
        Some(json) => {
            serde_json::from_str(&json).map_err(|error| StoreError::corrupt("planning", error))
        }
    }
}

/// Writes the planning state.
pub(crate) fn save(store: &mut Store, state: &PlanState) -> Result<(), StoreError> {
    let json =
        serde_json::to_string(state).map_err(|error| StoreError::corrupt("planning", error))?;
    store.set_meta(keys::PLANNING, Some(&json))
}

/// `feature` with the tasks of the approved plan after its hand-written ones, and the plan
/// document after its `context.plan` (every prompt shows it).
pub(crate) fn with_plan(mut feature: LocalFeature, state: &PlanState) -> LocalFeature {
    let Some(plan) = state.running() else {
        return feature;
    };
    feature.tasks.extend(plan.templates());
    let added = [plan.document.as_deref(), Some(PROPOSE_HELP)];
    for text in added.into_iter().flatten() {
        feature.plan_text = Some(match feature.plan_text.take() {
            Some(before) => format!("{before}\n\n{text}"),
            None => text.to_owned(),
        });
    }
    feature
}

/// Why a Feature cannot plan locally, if it cannot.
pub(crate) fn planning_problem(feature: &LocalFeature, spec: &PlanningSpec) -> Option<String> {
    let name = &feature.name;
    if feature.spec_text.is_none() && feature.plan_text.is_none() {
        return Some(format!(
            "feature {name}: spec.planning needs something to plan from: set \
             spec.context.spec (or spec.context.plan)"
        ));
    }
    if let Some(task) = feature
        .tasks
        .iter()
        .find(|t| t.name == crate::engine::planning::PLANNING_TASK)
    {
        return Some(format!(
            "feature {name}: the task name {} is the planning attempts' when spec.planning \
             is set: rename the task",
            task.name
        ));
    }
    if let Some(agent) = spec.agent.as_deref()
        && agent != crate::api::PRIMARY_AGENT
        && !feature.fallback_agents.iter().any(|a| a.name == agent)
    {
        return Some(format!(
            "feature {name}: spec.planning.agent {agent:?} names no agent: use primary or a \
             name of spec.fallbackAgents"
        ));
    }
    None
}

/// What approving a plan did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Approved {
    /// The plan of this hash is approved now.
    Now(String),
    /// It already was.
    Already(String),
    /// The hash given names another plan than the current one: nothing changed.
    Stale {
        /// The hash given.
        given: String,
        /// The current plan's.
        current: String,
    },
    /// There is no plan to approve.
    NoPlan,
}

/// Approves the current plan, or the plan `hash` names when it is the current one.
pub(crate) fn approve(state: &mut PlanState, hash: Option<&str>, by: &str, at: String) -> Approved {
    let Some(plan) = &state.plan else {
        return Approved::NoPlan;
    };
    let current = plan.hash.clone();
    if let Some(given) = hash
        && !hash_matches(given, &current)
    {
        return Approved::Stale {
            given: given.to_owned(),
            current,
        };
    }
    if state.approved().is_some() {
        return Approved::Already(current);
    }
    state.approval = Some(ApprovalStatus {
        state: ApprovalState::Approved,
        hash: current.clone(),
        comment: None,
        by: Some(by.to_owned()),
        at: Some(at),
    });
    Approved::Now(current)
}

/// Rejects the current plan waiting for approval: the next `ralph run` plans again with
/// `comment` in the prompt. `None` when no plan waits.
pub(crate) fn reject(state: &mut PlanState, comment: &str, by: &str, at: String) -> Option<String> {
    let hash = state.awaiting_approval()?.hash.clone();
    state.approval = Some(ApprovalStatus {
        state: ApprovalState::Rejected,
        hash: hash.clone(),
        comment: Some(comment.to_owned()),
        by: Some(by.to_owned()),
        at: Some(at),
    });
    if let Some(previous) = state.previous.take() {
        // Rejected proposals or a rejected revision: the plan approved before goes on.
        state.approval = Some(ApprovalStatus {
            state: ApprovalState::Approved,
            hash: previous.hash.clone(),
            comment: Some(format!("a change was rejected: {comment}")),
            by: Some(by.to_owned()),
            at: state.approval.as_ref().and_then(|a| a.at.clone()),
        });
        state.plan = Some(previous);
        return Some(hash);
    }
    state.rejection = Some(comment.to_owned());
    state.plan = None;
    state.invalid_answers = 0;
    state.crashes = 0;
    Some(hash)
}

/// Most repository files listed for the planner.
const MAX_FILES: usize = 10_000;

/// The files of the directory the planner works in: `git ls-files` in a repository, else
/// the files below it (dot directories, `target` and `node_modules` left out); `None` when
/// it holds none.
pub(crate) fn repository_files(dir: &std::path::Path) -> Option<Vec<String>> {
    let listed = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["ls-files", "-z"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| {
            out.stdout
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .take(MAX_FILES)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>()
        });
    let files = listed.unwrap_or_else(|| {
        let mut files = Vec::new();
        walk(dir, dir, &mut files);
        files.sort();
        files
    });
    (!files.is_empty()).then_some(files)
}

fn walk(top: &std::path::Path, dir: &std::path::Path, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if files.len() >= MAX_FILES {
            return;
        }
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk(top, &path, files);
            }
        } else if let Ok(relative) = path.strip_prefix(top) {
            files.push(relative.display().to_string());
        }
    }
}

/// RFC 3339 of a Unix time in ms.
pub(crate) use crate::clock::rfc3339;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
