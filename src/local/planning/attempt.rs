//! Running planning attempts until a valid plan is kept or planning stops.

use std::path::{Path, PathBuf};

use crate::api::TaskTemplate;
use crate::api::planning::PlanningSpec;
use crate::clock::now_ms;
use crate::engine::attempt::AttemptResult;
use crate::engine::dag::TaskPhase;
use crate::engine::lifecycle::attempt_id;
use crate::engine::planning::{
    ANSWER_DIR, DOCUMENT_FILE, PLANNING_TASK, PlanningPrompt, Revision, TASKS_FILE, Unanswered,
    not_written, refused_message, render, unanswered,
};
use crate::engine::verification::AttemptKind;
use crate::local::display::Display;
use crate::local::executor::{self, AttemptFiles, Ended, Launch, Report, RunnerCommand};
use crate::local::feature::LocalFeature;
use crate::local::run_event::RunEvent;
use crate::local::store::{AttemptRow, EndDetails, NewEvent, Store};
use crate::manifest::answer::{Answer, AnswerLimits, check_answer};

use super::{PlanState, StoredPlan, load, rfc3339, save, with_plan};

/// What planning needs besides the store and the Feature.
pub(crate) struct PlanningRun<'a> {
    /// `spec.planning`.
    pub spec: &'a PlanningSpec,
    /// How runners start (the planner's agent is chosen from it).
    pub runner: &'a RunnerCommand,
    /// The directory the planner works in (the repository's top in a git run).
    pub workdir: PathBuf,
    /// The files of the repository the planner works in, when it is one.
    pub repository: Option<Vec<String>>,
    /// The command line that checks an answer (`ralph plan check ...`), without the file.
    pub check_command: String,
}

/// How planning ended.
#[derive(Debug)]
pub(crate) enum Planned {
    /// The approved plan's tasks joined the Feature: run it.
    Run(Box<LocalFeature>),
    /// A valid plan waits for a person's approval.
    AwaitingApproval(StoredPlan),
    /// Planning cannot go on.
    Stopped {
        /// What happened and what to do.
        message: String,
        /// Why.
        stop: Stop,
    },
}

/// Why planning stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The planner failed: too many invalid answers or crashes.
    Failed,
    /// The planner's agent cannot run as configured.
    Halted,
    /// A limit: `maxIterations`, the budget, or the agent's quota.
    Limit,
}

/// Errors of the planning machinery (not the planner's: those are outcomes).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanningError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::local::store::StoreError),
    /// The runner could not start.
    #[error(transparent)]
    Executor(#[from] executor::ExecutorError),
    /// The answer directory could not be prepared.
    #[error("cannot prepare the planner's answer directory {path}: {source}")]
    AnswerDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// What one round of planning attempts plans against.
#[derive(Clone, Copy)]
struct Round<'a> {
    /// Tasks the answer may depend on and never name: hand-written ones, and done planned
    /// ones when a plan is revised.
    existing: &'a [TaskTemplate],
    /// The revision asked for, after a failure.
    revision: Option<&'a Revision>,
}

/// How one planning attempt ended.
enum Answered {
    Valid(StoredPlan),
    Invalid(Vec<String>),
    Crashed(String),
    Halted(String),
    Limit(String),
}

/// Plans until the store holds an approved plan (then the Feature with its tasks is
/// returned), a plan waits for approval, or planning stops.
pub(crate) async fn plan(
    store: &mut Store,
    feature: &LocalFeature,
    run: &PlanningRun<'_>,
    display: &mut Display,
) -> Result<Planned, PlanningError> {
    let mut state = load(store)?;
    loop {
        if state.approved().is_some() {
            return Ok(Planned::Run(Box::new(with_plan(feature.clone(), &state))));
        }
        if let Some(plan) = state.awaiting_approval() {
            return Ok(Planned::AwaitingApproval(plan.clone()));
        }
        if let Some((message, stop)) = exhausted(store, &state, run.spec, feature)? {
            return Ok(Planned::Stopped { message, stop });
        }
        let round = Round {
            existing: &feature.tasks,
            revision: None,
        };
        match attempt(store, feature, run, round, &mut state, display).await? {
            Answered::Valid(plan) => {
                state.propose(plan, run.spec.approval, rfc3339(now_ms()));
            }
            refused => {
                if let Some((message, stop)) = count_refused(&mut state, refused) {
                    save(store, &state)?;
                    return Ok(Planned::Stopped { message, stop });
                }
            }
        }
        save(store, &state)?;
    }
}

/// Counts an answer that planned nothing (refused, or a crash) for the next attempt's
/// limits; or how planning stops: a misconfigured planner halts, one out of quota or budget
/// stops at its limit. A valid answer is the caller's and changes nothing here.
fn count_refused(state: &mut PlanState, answered: Answered) -> Option<(String, Stop)> {
    match answered {
        Answered::Valid(_) => None,
        Answered::Invalid(problems) => {
            state.invalid_answers += 1;
            state.problems = problems;
            None
        }
        Answered::Crashed(_) => {
            state.crashes += 1;
            None
        }
        Answered::Halted(message) => Some((message, Stop::Halted)),
        Answered::Limit(message) => Some((message, Stop::Limit)),
    }
}

/// Why no planning attempt may start any more, if so.
fn exhausted(
    store: &Store,
    state: &PlanState,
    spec: &PlanningSpec,
    feature: &LocalFeature,
) -> Result<Option<(String, Stop)>, PlanningError> {
    if state.invalid_answers > spec.max_invalid_answers {
        return Ok(Some((
            format!(
                "planning failed: the planner's last {} answers were refused \
                 (spec.planning.maxInvalidAnswers is {}); the last one's problems:\n  {}\n\
                 `ralph reset FILE` plans again from the start",
                state.invalid_answers,
                spec.max_invalid_answers,
                state.problems.join("\n  ")
            ),
            Stop::Failed,
        )));
    }
    if state.crashes > feature.max_retries {
        return Ok(Some((
            format!(
                "planning failed: {} planning attempts in a row ended without an answer \
                 (retry.maxRetries is {}); see the attempts' files under \
                 attempts/planning-a*/ of the state directory",
                state.crashes, feature.max_retries
            ),
            Stop::Failed,
        )));
    }
    if let Some(max) = feature.max_iterations
        && store.iterations()? >= max
    {
        return Ok(Some((
            format!("limit reached: {max} attempts started (maxIterations) before a plan"),
            Stop::Limit,
        )));
    }
    let attempts = store.attempts(None)?;
    if let Some(spent) = feature
        .budget
        .spent(&crate::local::budget::attempt_totals(&attempts))
    {
        return Ok(Some((
            format!("limit reached before a plan: {spent}"),
            Stop::Limit,
        )));
    }
    Ok(None)
}

/// The planning prompt of the next attempt.
fn prompt(
    feature: &LocalFeature,
    run: &PlanningRun<'_>,
    round: Round<'_>,
    state: &PlanState,
) -> String {
    let answer_dir = run.workdir.join(ANSWER_DIR);
    let answer = answer_dir.join(TASKS_FILE).display().to_string();
    render(&PlanningPrompt {
        feature: feature.name.clone(),
        spec: feature.spec_text.clone(),
        plan: feature.plan_text.clone(),
        guidance: run.spec.guidance.clone(),
        hand_written: feature
            .tasks
            .iter()
            .map(crate::api::TaskTemplate::outline)
            .collect(),
        max_tasks: run.spec.max_tasks,
        check_command: format!("{} {answer}", run.check_command),
        answer_path: answer,
        document_path: answer_dir.join(DOCUMENT_FILE).display().to_string(),
        repository: run.repository.clone(),
        repository_dir: None,
        problems: state.problems.clone(),
        rejection: state.rejection.clone(),
        revision: round.revision.cloned(),
    })
}

/// Proposes a revised plan (approved at once unless approval is Manual) and what the run
/// does next with it.
fn adopt_revision(
    store: &mut Store,
    mut state: PlanState,
    feature: &LocalFeature,
    run: &PlanningRun<'_>,
    plan: StoredPlan,
) -> Result<Planned, PlanningError> {
    state.propose(plan, run.spec.approval, rfc3339(now_ms()));
    state.retry_failed = true;
    save(store, &state)?;
    Ok(match state.approved() {
        Some(_) => Planned::Run(Box::new(with_plan(feature.clone(), &state))),
        None => match &state.plan {
            Some(plan) => Planned::AwaitingApproval(plan.clone()),
            None => Planned::Run(Box::new(feature.clone())),
        },
    })
}

/// Runs one planning attempt and judges its answer.
async fn attempt(
    store: &mut Store,
    feature: &LocalFeature,
    run: &PlanningRun<'_>,
    round: Round<'_>,
    state: &mut PlanState,
    display: &mut Display,
) -> Result<Answered, PlanningError> {
    state.attempts += 1;
    let number = state.attempts;
    let id = attempt_id(PLANNING_TASK, number);
    let answer_dir = run.workdir.join(ANSWER_DIR);
    clear(&answer_dir)?;
    std::fs::create_dir_all(&answer_dir).map_err(|source| PlanningError::AnswerDir {
        path: answer_dir.clone(),
        source,
    })?;
    let agent = run
        .spec
        .agent
        .as_deref()
        .unwrap_or(crate::api::PRIMARY_AGENT);
    let mut command =
        crate::local::selection::runner_for(run.runner, feature, agent, run.spec.model.as_deref());
    command.workspace = run.workdir.clone();
    let text = prompt(feature, run, round, state);
    let started_at_ms = now_ms();
    store.record_event(
        started_at_ms,
        &NewEvent::attempt(
            PLANNING_TASK,
            &id,
            "started",
            format!("attempt {id} started: planning"),
        ),
    )?;
    display.show(&RunEvent::Started {
        task: PLANNING_TASK.to_owned(),
        attempt: id.clone(),
        generation: 0,
        kind: AttemptKind::Work,
    });
    let ended = run_attempt(&command, store, &id, &text, display).await?;
    let answered = judge(&ended, &answer_dir, round.existing, run.spec);
    clear(&answer_dir)?;
    record(
        store,
        display,
        &id,
        number,
        started_at_ms,
        &ended,
        &answered,
    )?;
    Ok(answered)
}

/// Runs the planner's runner until it ended, showing its activity as it comes.
async fn run_attempt(
    command: &RunnerCommand,
    store: &Store,
    id: &str,
    text: &str,
    display: &mut Display,
) -> Result<Ended, PlanningError> {
    let (reports, mut received) = tokio::sync::mpsc::unbounded_channel();
    let launch = Launch {
        task: PLANNING_TASK,
        attempt: id,
        files: AttemptFiles::in_dir(store.attempt_dir(id)),
        prompt: text,
        reports,
    };
    executor::start(command, launch, None)?;
    loop {
        match received.recv().await {
            Some(report) => match report.report {
                Report::Activity(text) => display.show(&RunEvent::Activity {
                    task: PLANNING_TASK.to_owned(),
                    attempt: id.to_owned(),
                    text,
                }),
                Report::Spawned(_) => {}
                Report::Ended(ended) => return Ok(*ended),
            },
            None => {
                return Ok(Ended {
                    exit_code: None,
                    result: Err("the runner's watcher stopped".to_owned()),
                    workspace: None,
                });
            }
        }
    }
}

/// Records the planning attempt and how its answer was judged, in the store and on screen.
fn record(
    store: &mut Store,
    display: &mut Display,
    id: &str,
    number: u32,
    started_at_ms: i64,
    ended: &Ended,
    answered: &Answered,
) -> Result<(), PlanningError> {
    let (outcome, phase, message) = match answered {
        Answered::Valid(plan) => (
            "planned",
            TaskPhase::Done,
            format!("{} tasks, plan {}", plan.answer.tasks.len(), plan.hash),
        ),
        Answered::Invalid(problems) => ("invalid", TaskPhase::Pending, refused_message(problems)),
        Answered::Crashed(why) => ("crashed", TaskPhase::Pending, why.clone()),
        Answered::Halted(why) => ("misconfigured", TaskPhase::Pending, why.clone()),
        Answered::Limit(why) => ("limitReached", TaskPhase::Pending, why.clone()),
    };
    let ended_at_ms = now_ms();
    let result = ended.result.as_ref().ok();
    let row = AttemptRow {
        id: id.to_owned(),
        task: PLANNING_TASK.to_owned(),
        number,
        kind: AttemptKind::Work,
        generation: 0,
        started_at_ms,
        ended_at_ms: Some(ended_at_ms),
        outcome: Some(outcome.to_owned()),
        details: EndDetails {
            stop_reason: result
                .and_then(|r| r.stop_reason.as_ref())
                .map(|r| r.as_str().to_owned()),
            crash: result.and_then(|r| r.crash.clone()),
            message: Some(message.clone()),
            usage: result.map(|r| r.usage.clone()).unwrap_or_default(),
            result: result.and_then(|r| serde_json::to_string(r).ok()),
        },
    };
    let event = NewEvent::attempt(PLANNING_TASK, id, outcome, message.clone());
    store.record_planning_attempt(&row, &event)?;
    display.show(&RunEvent::Ended {
        task: PLANNING_TASK.to_owned(),
        attempt: id.to_owned(),
        outcome: outcome.to_owned(),
        phase,
        duration_ms: ended_at_ms - started_at_ms,
        retry_at_ms: None,
        message: (phase != TaskPhase::Done).then_some(message),
    });
    Ok(())
}

/// Removes the answer directory (a stale answer is never read twice).
fn clear(dir: &Path) -> Result<(), PlanningError> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(PlanningError::AnswerDir {
                path: dir.to_path_buf(),
                source: error,
            })
        }
        _ => Ok(()),
    }
}

/// How an ended planning attempt is judged: a finished one by its answer file; one that
/// could not run by its outcome class.
fn judge(
    ended: &Ended,
    answer_dir: &Path,
    existing: &[TaskTemplate],
    spec: &PlanningSpec,
) -> Answered {
    let result: &AttemptResult = match &ended.result {
        Ok(result) => result,
        Err(why) => return Answered::Crashed(why.clone()),
    };
    match unanswered(result) {
        None => {}
        Some(Unanswered::Halted(why)) => return Answered::Halted(why),
        Some(Unanswered::Limit(why)) => return Answered::Limit(why),
        Some(Unanswered::Crashed(why)) => return Answered::Crashed(why),
    }
    let tasks_file = answer_dir.join(TASKS_FILE);
    let Ok(text) = std::fs::read_to_string(&tasks_file) else {
        return Answered::Invalid(vec![not_written(&tasks_file.display().to_string())]);
    };
    let limits = AnswerLimits {
        max_tasks: spec.max_tasks,
        existing,
    };
    match check_answer(&text, limits) {
        Ok(answer) => {
            let document = std::fs::read_to_string(answer_dir.join(DOCUMENT_FILE))
                .ok()
                .filter(|text| !text.trim().is_empty());
            Answered::Valid(StoredPlan::new(answer, document))
        }
        Err(problems) => Answered::Invalid(problems.messages()),
    }
}

/// What a revision after a failure needs: the task that failed for good, why, and what
/// its journal says.
pub(crate) struct Failure {
    /// The task.
    pub task: String,
    /// Its last attempt's message.
    pub message: String,
    /// Its journal, one line an entry.
    pub journal: Vec<String>,
}

/// Revises the approved plan after `failure` (`replan: OnFailure`): a planning attempt
/// gets the failure, the journal, the done tasks and the pending ones, and answers the
/// tasks that replace the pending ones. The done planned tasks are kept; the new plan is
/// approved as any plan is. `feature` holds the hand-written tasks only; `done` names
/// every task done. `Ok(None)` when no revision may run (`maxReplans` used).
pub(crate) async fn replan(
    store: &mut Store,
    feature: &LocalFeature,
    run: &PlanningRun<'_>,
    failure: &Failure,
    done: &[String],
    display: &mut Display,
) -> Result<Option<Planned>, PlanningError> {
    let mut state = load(store)?;
    let Some(current) = state.approved().cloned() else {
        return Ok(None);
    };
    if state.replans >= run.spec.max_replans {
        return Ok(None);
    }
    state.replans += 1;
    state.invalid_answers = 0;
    state.crashes = 0;
    let (kept, pending): (Vec<_>, Vec<_>) = current
        .answer
        .tasks
        .iter()
        .cloned()
        .partition(|task| done.contains(&task.name));
    let revision = Revision {
        failed_task: failure.task.clone(),
        failure: failure.message.clone(),
        journal: failure.journal.clone(),
        done: done.to_vec(),
        pending_yaml: Answer { tasks: pending }.canonical(),
    };
    let existing: Vec<TaskTemplate> = feature
        .tasks
        .iter()
        .cloned()
        .chain(kept.iter().map(|task| task.template()))
        .collect();
    let round = Round {
        existing: &existing,
        revision: Some(&revision),
    };
    loop {
        if let Some((message, stop)) = exhausted(store, &state, run.spec, feature)? {
            save(store, &state)?;
            return Ok(Some(Planned::Stopped { message, stop }));
        }
        match attempt(store, feature, run, round, &mut state, display).await? {
            Answered::Valid(revised) => {
                let tasks = kept.iter().cloned().chain(revised.answer.tasks).collect();
                let plan = StoredPlan::new(Answer { tasks }, current.document.clone());
                state.previous = Some(current);
                return adopt_revision(store, state, feature, run, plan).map(Some);
            }
            refused => {
                if let Some((message, stop)) = count_refused(&mut state, refused) {
                    save(store, &state)?;
                    return Ok(Some(Planned::Stopped { message, stop }));
                }
            }
        }
        save(store, &state)?;
    }
}
