//! The planning Task's attempts (docs/planning.md): their prompt, and what the controller
//! does with the answer a finished attempt's claim-keeper uploaded (ConfigMap
//! `<attempt>-answer`, [`crate::controller::sidecar::AnswerUpload`]). A valid answer
//! becomes the Feature's plan, ConfigMap `<feature>-plan` (owned by the Feature), and the
//! planning Task is done; an invalid one is sent back to the planner at once with its
//! problems, until more than `spec.planning.maxInvalidAnswers` were refused in a row. Every
//! other end (a crash, a misconfigured agent, its quota) is concluded as any attempt's.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use super::error::TaskError;
use super::plan_maps::{REVISION_KEY, claim_keeper_runs, keep_config_map, plan_config_map};
use super::scope::TaskScope;
use super::task_end::conclude_in_workspace;
use crate::api::planning::{
    ApprovalState, PlanningSpec, answer_config_map_name, plan_config_map_name,
    revision_config_map_name,
};
use crate::api::{Feature, TaskTemplate};
use crate::controller::client::call::bounded;
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::plan_map::{PROBLEM_KEY, read_plan_map, text};
use crate::controller::plan::pod::{SIDECAR_CONTAINER, WORKSPACE};
use crate::engine::attempt::OutcomeClass;
use crate::engine::conclusion::{NextState, phase_after};
use crate::engine::lifecycle::{AttemptEnd, attempt_id};
use crate::engine::planning::{
    ANSWER_DIR, DOCUMENT_FILE, PLANNING_TASK, PlanningPrompt, Revision, TASKS_FILE, not_written,
    plan_hash, planned, refused, refused_in_a_row, refused_problems, render,
};
use crate::engine::policy::AttemptOutcome;
use crate::manifest::answer::{Answer, AnswerLimits, AnswerTask, check_answer};

/// Whether `plan` is the planning Task's.
pub(crate) fn is_planning(feature: &Feature, plan: &TaskPlan) -> bool {
    plan.task_id == PLANNING_TASK && feature.spec.planning.is_some()
}

/// The answer file's path in the planning Pod.
fn answer_path() -> String {
    format!("{WORKSPACE}/{ANSWER_DIR}/{TASKS_FILE}")
}

/// The planning attempt's prompt (a revision's when the plan is being revised).
pub(crate) async fn prompt(scope: &TaskScope<'_>, plan: &TaskPlan) -> Result<String, TaskError> {
    let revision = revision_of(scope).await?;
    let feature = scope.feature;
    let spec = planning_spec(feature);
    let hand_written = &feature.spec.tasks;
    let answer = answer_path();
    // `ralph plan check` knows no hand-written task without the manifest, so it would refuse
    // a dependency on one: it is offered only when there is none.
    let check_command = if hand_written.is_empty() {
        format!(
            "{} plan check --max-tasks {} {answer}",
            crate::controller::plan::pod::RALPH,
            spec.max_tasks
        )
    } else {
        String::new()
    };
    Ok(render(&PlanningPrompt {
        feature: feature.name_any(),
        spec: scope.texts.spec.clone(),
        plan: scope.texts.plan.clone(),
        guidance: spec.guidance.clone(),
        hand_written: hand_written
            .iter()
            .map(crate::api::TaskTemplate::outline)
            .collect(),
        max_tasks: spec.max_tasks,
        answer_path: answer,
        document_path: format!("{WORKSPACE}/{ANSWER_DIR}/{DOCUMENT_FILE}"),
        check_command,
        repository: None,
        repository_dir: feature.spec.git().map(|_| WORKSPACE.to_owned()),
        problems: last_problems(&plan.task),
        rejection: rejection(feature),
        revision,
    }))
}

fn planning_spec(feature: &Feature) -> PlanningSpec {
    feature.spec.planning.clone().unwrap_or_default()
}

/// The problems of the last refused answer, unless a plan was made since.
fn last_problems(task: &CachedTask) -> Vec<String> {
    let Some(status) = task.status.as_ref() else {
        return Vec::new();
    };
    for record in status.attempts.iter().rev() {
        if record.outcome == Some(AttemptOutcome::Done) {
            break;
        }
        if let Some(problems) = record.reason.as_deref().and_then(refused_problems) {
            return problems;
        }
    }
    Vec::new()
}

/// A person's comment on the plan they rejected.
fn rejection(feature: &Feature) -> Option<String> {
    let approval = feature
        .status
        .as_ref()?
        .planning
        .as_ref()?
        .approval
        .as_ref()?;
    (approval.state == ApprovalState::Rejected)
        .then(|| approval.comment.clone().unwrap_or_default())
}

/// The planning attempt's conclusion `next` (the engine's, from `end`) with its answer
/// judged: `None` while a finished attempt's claim-keeper may still upload it (the Pod's
/// change when it ends triggers the next reconcile).
pub(crate) async fn conclude(
    scope: &TaskScope<'_>,
    plan: &TaskPlan,
    end: &AttemptEnd,
    next: NextState,
) -> Result<Option<NextState>, TaskError> {
    let finished =
        matches!(end, AttemptEnd::Reported(result) if result.outcome == OutcomeClass::Finished);
    if !finished {
        return Ok(Some(next));
    }
    let task = &plan.task;
    let namespace = task.namespace().unwrap_or_default();
    let attempt = current_attempt(task);
    let name = answer_config_map_name(&attempt);
    let api: Api<ConfigMap> = Api::namespaced(scope.ctx.client.clone(), &namespace);
    let answer = bounded(
        scope.ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    let Some(answer) = answer else {
        if claim_keeper_runs(scope, &namespace, &attempt) {
            return Ok(None);
        }
        let reason = format!(
            "the planning attempt ended without an answer: its claim-keeper uploaded no \
             ConfigMap {name} (see `kubectl logs -n {namespace} {attempt} -c {SIDECAR_CONTAINER}`)"
        );
        return Ok(Some(conclude_in_workspace(
            scope.feature,
            task,
            &plan.task_id,
            &AttemptEnd::NoResult { reason },
            None,
            scope.now_ms,
            rand::random::<f64>(),
        )));
    };
    let judged = match plan_of_answer(scope, &namespace, &answer).await? {
        Ok((map, tasks, hash)) => {
            keep_config_map(scope.ctx, map).await?;
            planned(next.decision.clone(), &plan.task_id, tasks, &hash)
        }
        Err(problems) => {
            let max = planning_spec(scope.feature).max_invalid_answers;
            refused(
                next.decision.clone(),
                &problems,
                refused_before(task).saturating_add(1),
                max,
            )
        }
    };
    Ok(Some(NextState {
        phase: phase_after(judged.phase),
        without_verdict: 0,
        next_attempt_after_ms: None,
        previous_attempt: judged.previous_attempt.clone(),
        message: judged.event.message.clone(),
        agent_rest: None,
        crash: None,
        decision: judged,
        ..next
    }))
}

/// The plan ConfigMap an answer makes (with the done tasks a revision keeps), its task count
/// and hash; or the problems the planner must fix.
async fn plan_of_answer(
    scope: &TaskScope<'_>,
    namespace: &str,
    answer: &ConfigMap,
) -> Result<Result<(ConfigMap, usize, String), Vec<String>>, TaskError> {
    let revised = match revision_of(scope).await? {
        Some(revision) => Some(kept_by(scope, namespace, &revision).await?),
        None => None,
    };
    let (kept_tasks, kept_document) = revised.unwrap_or_default();
    Ok(
        answered(answer, scope.feature, &kept_tasks).and_then(|(answer, document)| {
            let tasks = kept_tasks.into_iter().chain(answer.tasks).collect();
            let answer = Answer { tasks };
            let document = document.or(kept_document);
            let hash = plan_hash(&answer.canonical(), document.as_deref());
            plan_config_map(scope.feature, &answer, document, &hash)
                .map(|map| (map, answer.tasks.len(), hash))
                .map_err(|error| vec![error.to_string()])
        }),
    )
}

/// Deletes the ended attempt's answer ConfigMap, once its conclusion is recorded (it is
/// owned by the Pod too, and goes with it).
pub(crate) async fn forget_answer(scope: &TaskScope<'_>, plan: &TaskPlan) -> Result<(), TaskError> {
    let namespace = plan.task.namespace().unwrap_or_default();
    let name = answer_config_map_name(&current_attempt(&plan.task));
    let api: Api<ConfigMap> = Api::namespaced(scope.ctx.client.clone(), &namespace);
    let deleted = bounded(
        scope.ctx.api_timeout,
        format!("delete ConfigMap {namespace}/{name}"),
        api.delete(&name, &DeleteParams::default()),
    )
    .await;
    match deleted {
        Err(error) if !error.is_not_found() => Err(error.into()),
        _ => Ok(()),
    }
}

/// The attempt id of the Task's current attempt.
fn current_attempt(task: &CachedTask) -> String {
    let number = task.status.as_ref().map_or(0, |s| s.attempt_count);
    attempt_id(&task.name_any(), number)
}

/// Answers refused in a row before the current attempt.
fn refused_before(task: &CachedTask) -> u32 {
    let Some(status) = task.status.as_ref() else {
        return 0;
    };
    refused_in_a_row(
        status
            .attempts
            .iter()
            .filter(|a| a.number < status.attempt_count && a.outcome.is_some())
            .map(|a| a.reason.as_deref()),
    )
}

/// The tasks of the running plan a revision keeps (the done ones) and its document.
async fn kept_by(
    scope: &TaskScope<'_>,
    namespace: &str,
    revision: &Revision,
) -> Result<(Vec<AnswerTask>, Option<String>), TaskError> {
    let name = plan_config_map_name(&scope.feature.name_any());
    let api: Api<ConfigMap> = Api::namespaced(scope.ctx.client.clone(), namespace);
    let map = bounded(
        scope.ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    let Some(files) = map.as_ref().and_then(|m| read_plan_map(m).ok()) else {
        return Ok((Vec::new(), None));
    };
    let running: Answer = files
        .tasks
        .as_deref()
        .and_then(|yaml| serde_yaml_ng::from_str(yaml).ok())
        .unwrap_or_default();
    let kept = running
        .tasks
        .into_iter()
        .filter(|t| revision.done.contains(&t.name))
        .collect();
    Ok((kept, files.document))
}

/// The answer an answer ConfigMap holds, checked against the Feature's hand-written tasks,
/// the planned tasks a revision keeps (`kept`) and the `maxTasks` they leave, with its
/// document; or the problems the planner must fix.
pub(crate) fn answered(
    config_map: &ConfigMap,
    feature: &Feature,
    kept: &[AnswerTask],
) -> Result<(Answer, Option<String>), Vec<String>> {
    if let Some(problem) = text(config_map, PROBLEM_KEY) {
        return Err(vec![problem.to_owned()]);
    }
    let files = read_plan_map(config_map).map_err(|error| vec![error.to_string()])?;
    let Some(tasks) = files.tasks else {
        return Err(vec![not_written(&answer_path())]);
    };
    let existing: Vec<TaskTemplate> = feature
        .spec
        .tasks
        .iter()
        .cloned()
        .chain(kept.iter().map(AnswerTask::template))
        .collect();
    let kept_count = u32::try_from(kept.len()).unwrap_or(u32::MAX);
    let limits = AnswerLimits {
        max_tasks: planning_spec(feature).max_tasks.saturating_sub(kept_count),
        existing: &existing,
    };
    let answer = check_answer(&tasks, limits).map_err(|problems| problems.messages())?;
    let document = files.document.filter(|text| !text.trim().is_empty());
    Ok((answer, document))
}

/// The revision the Feature's planner works on, while `status.planning.revising` says
/// one is under way (read live: it is written just before the attempt starts).
async fn revision_of(scope: &TaskScope<'_>) -> Result<Option<Revision>, TaskError> {
    let feature = scope.feature;
    let planning = scope.ctx.cache.planning_writes.newest(feature);
    if planning.revising.is_none() {
        return Ok(None);
    }
    let namespace = feature.namespace().unwrap_or_default();
    let name = revision_config_map_name(&feature.name_any());
    let api: Api<ConfigMap> = Api::namespaced(scope.ctx.client.clone(), &namespace);
    let map = bounded(
        scope.ctx.api_timeout,
        format!("get ConfigMap {namespace}/{name}"),
        api.get_opt(&name),
    )
    .await?;
    Ok(map
        .as_ref()
        .and_then(|m| text(m, REVISION_KEY))
        .and_then(|yaml| serde_yaml_ng::from_str(yaml).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Task;
    use crate::controller::plan::plan_map::HASH_KEY;

    fn feature(hand_written: &str) -> Feature {
        let yaml = format!(
            "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata: {{name: shop, namespace: team, uid: f-1}}\n\
             spec:\n  agent: {{image: agent:1, command: [agent]}}\n  planning: {{maxTasks: 3}}\n  tasks: {hand_written}\n"
        );
        serde_yaml_ng::from_str(&yaml).expect("a Feature")
    }

    fn answer_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn an_answer_may_depend_on_the_features_hand_written_tasks() {
        let feature = feature("[{name: schema, title: Schema, acceptance: [done]}]");
        let map = answer_map(&[(
            "tasks.yaml",
            "tasks:\n  - {name: api, title: API, dependsOn: [schema], acceptance: [serves]}\n",
        )]);
        let (answer, document) = answered(&map, &feature, &[]).expect("valid");
        assert_eq!(answer.tasks.len(), 1);
        assert_eq!(document, None);
    }

    #[test]
    fn an_answer_over_max_tasks_is_refused_with_the_limit() {
        let tasks: String = (0..4)
            .map(|i| format!("  - {{name: t{i}, title: T, acceptance: [ok]}}\n"))
            .collect();
        let map = answer_map(&[("tasks.yaml", &format!("tasks:\n{tasks}"))]);
        let problems = answered(&map, &feature("[]"), &[]).expect_err("refused");
        assert!(
            problems.iter().any(|p| p.contains("maxTasks (3)")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_problem_uploaded_instead_of_an_answer_is_the_answers_problem() {
        let map = answer_map(&[(PROBLEM_KEY, "no answer: the task list was not written")]);
        let problems = answered(&map, &feature("[]"), &[]).expect_err("refused");
        assert_eq!(problems, ["no answer: the task list was not written"]);
    }

    #[test]
    fn the_plan_config_map_is_owned_by_the_feature_and_carries_the_plan_hash() {
        let feature = feature("[]");
        let map = answer_map(&[(
            "tasks.yaml",
            "tasks:\n  - {name: api, title: API, acceptance: [serves]}\n",
        )]);
        let (answer, _) = answered(&map, &feature, &[]).expect("valid");
        let hash = plan_hash(&answer.canonical(), Some("# Plan"));
        let plan =
            plan_config_map(&feature, &answer, Some("# Plan".to_owned()), &hash).expect("fits");
        assert_eq!(plan.metadata.name.as_deref(), Some("shop-plan"));
        assert_eq!(text(&plan, HASH_KEY), Some(hash.as_str()));
        let owner = &plan.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("Feature", Some(true))
        );
        let files = read_plan_map(&plan).expect("readable");
        assert_eq!(files.tasks, Some(answer.canonical()));
        assert_eq!(files.document.as_deref(), Some("# Plan"));
    }

    #[test]
    fn refused_answers_before_the_current_attempt_are_counted() {
        let refused = crate::engine::planning::refused_message(&["no task".to_owned()]);
        let task: Task = serde_yaml_ng::from_str(&format!(
            "apiVersion: ralph.dev/v1alpha1\nkind: Task\nmetadata: {{name: shop-planning, namespace: team}}\n\
             spec: {{featureRef: shop, title: Plan}}\n\
             status:\n  attemptCount: 3\n  attempts:\n\
             \x20   - {{number: 1, outcome: failed, reason: \"{refused}\"}}\n\
             \x20   - {{number: 2, outcome: failed, reason: \"{refused}\"}}\n\
             \x20   - {{number: 3}}\n"
        ))
        .expect("a Task");
        let task = CachedTask::from(task);
        assert_eq!(refused_before(&task), 2);
        assert_eq!(last_problems(&task), ["no task"]);
    }
}
