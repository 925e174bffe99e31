//! `ralph plan show|approve|reject feature/NAME`: a Feature's plan in a cluster
//! (docs/planning.md). The plan is read from `status.planning`, the plan ConfigMap and the
//! planned Tasks; an answer is the annotations the controller reads on the Feature, written
//! with a merge patch (a GitOps sync keeps annotations it did not set).

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::exit::Exit;
use crate::api::labels::{
    APPROVE_PLAN_ANNOTATION, FEATURE_LABEL, PLAN_ANSWERED_BY_ANNOTATION, PLAN_LABEL,
    REJECT_COMMENT_ANNOTATION, REJECT_PLAN_ANNOTATION, TASK_LABEL,
};
use crate::api::planning::{
    Approval, ApprovalState, ApprovalStatus, PlanningStatus, plan_config_map_name,
};
use crate::api::{Feature, Task};
use crate::controller::plan::plan_map::{HASH_KEY, read_plan_map, text};
use crate::engine::dag::TaskPhase;
use crate::engine::planning::hash_matches;
use crate::local::planning::{StoredPlan, render_plan_with_phases};
use crate::manifest::answer::Answer;

/// Prefixes that name a Feature in the cluster instead of a manifest file, as kubectl
/// names objects.
const PREFIXES: [&str; 3] = ["feature/", "features/", "feature.ralph.dev/"];

/// The Feature a `ralph plan` argument names in the cluster (`feature/NAME`), or `None`
/// when it names a manifest file (one that exists is always a file).
pub(crate) fn feature_name(argument: Option<&Path>) -> Option<String> {
    let argument = argument?;
    if argument.exists() {
        return None;
    }
    let text = argument.to_str()?;
    PREFIXES
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .map(str::to_owned)
}

/// A Feature in a namespace of the cluster the kubeconfig points at.
pub(crate) struct Target {
    client: Client,
    /// The Feature's name.
    name: String,
    /// Its namespace (`-n`, else the kubeconfig context's).
    namespace: String,
}

impl Target {
    /// Connects with the kubeconfig as kubectl finds it (`KUBECONFIG`, `~/.kube/config`,
    /// in-cluster).
    pub(crate) async fn connect(name: String, namespace: Option<String>) -> anyhow::Result<Self> {
        let config = kube::Config::infer().await.map_err(|error| {
            anyhow::anyhow!(
                "cannot configure the Kubernetes client: {error}\nPoint KUBECONFIG (or \
                 ~/.kube/config) at the cluster that runs Feature {name}"
            )
        })?;
        let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|error| anyhow::anyhow!("cannot build the Kubernetes client: {error}"))?;
        Ok(Self {
            client,
            name,
            namespace,
        })
    }

    /// How commands name this Feature, for the hints printed.
    fn argument(&self) -> String {
        format!("feature/{} -n {}", self.name, self.namespace)
    }

    /// "Feature NAME (namespace NS)".
    fn describe(&self) -> String {
        format!("Feature {} (namespace {})", self.name, self.namespace)
    }
}

/// What stops a command before it changes anything: said on stderr, with its exit code.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The Feature, or its planning, is not there: exit 3.
    #[error("{0}")]
    Input(String),
    /// The plan is not in a state the command applies to: exit 1.
    #[error("{0}")]
    State(String),
}

/// `result`, a refusal said on stderr and turned into its exit code.
fn said(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    match result.map_err(anyhow::Error::downcast::<Refusal>) {
        Ok(code) => Ok(code),
        Err(Ok(refusal)) => {
            eprintln!("error: {refusal}");
            Ok(match refusal {
                Refusal::Input(_) => Exit::InvalidInput.into(),
                Refusal::State(_) => ExitCode::from(1),
            })
        }
        Err(Err(error)) => Err(error),
    }
}

/// A Feature's plan as the cluster holds it.
struct ClusterPlan {
    feature: Feature,
    /// `status.planning` (empty before the controller wrote one).
    status: PlanningStatus,
    /// The plan ConfigMap's plan, when there is one.
    plan: Option<StoredPlan>,
    /// Each planned Task's phase, by its name in the plan.
    phases: HashMap<String, TaskPhase>,
}

impl ClusterPlan {
    /// The current plan's hash, as `status.planning.dagHash` says.
    fn current(&self, target: &Target) -> Result<&str, Refusal> {
        self.status.dag_hash.as_deref().ok_or_else(|| {
            Refusal::State(format!(
                "{} has no plan yet: its planning Task runs first{}; `ralph plan show {}` \
                 says where planning stands",
                target.describe(),
                self.status
                    .message
                    .as_deref()
                    .map(|m| format!(" (last: {m})"))
                    .unwrap_or_default(),
                target.argument()
            ))
        })
    }

    /// Whether the Feature's plans are approved without a person.
    fn automatic(&self) -> bool {
        self.feature
            .spec
            .planning
            .as_ref()
            .is_some_and(|p| p.approval == Approval::Automatic)
    }

    /// The answer recorded for the current plan, if any.
    fn answer(&self) -> Option<&ApprovalStatus> {
        let approval = self.status.approval.as_ref()?;
        (Some(approval.hash.as_str()) == self.status.dag_hash.as_deref()).then_some(approval)
    }

    /// The plan as a person reads it: the plan ConfigMap's, each task with its Task's phase.
    fn render(&self, target: &Target) -> String {
        match &self.plan {
            Some(plan) => render_plan_with_phases(plan, &self.feature.spec.tasks, &self.phases),
            None => format!(
                "plan {} ({} tasks; ConfigMap {} not found, so its tasks cannot be shown)\n",
                self.status.dag_hash.as_deref().unwrap_or("-"),
                self.status.tasks,
                plan_config_map_name(&target.name)
            ),
        }
    }

    /// Where the current plan's approval stands, and what a person can do.
    fn approval_line(&self, target: &Target) -> String {
        let Some(hash) = self.status.dag_hash.as_deref() else {
            return "no plan yet: the planning Task runs first".to_owned();
        };
        let by = |answer: &ApprovalStatus| {
            let mut said = String::new();
            if let Some(by) = &answer.by {
                said.push_str(&format!(" by {by}"));
            }
            if let Some(at) = &answer.at {
                said.push_str(&format!(" at {at}"));
            }
            said
        };
        match self.answer() {
            Some(answer) if answer.state == ApprovalState::Approved => {
                format!("approved{}", by(answer))
            }
            Some(answer) if answer.state == ApprovalState::Rejected => format!(
                "rejected{}{}: the planner plans again",
                by(answer),
                answer
                    .comment
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            ),
            _ if self.automatic() => {
                "approved automatically (spec.planning.approval: Automatic) once the \
                 controller takes it"
                    .to_owned()
            }
            _ => format!(
                "waiting for approval: `ralph plan approve {argument} --hash {hash}` or \
                 `ralph plan reject {argument} --comment TEXT`",
                argument = target.argument()
            ),
        }
    }
}

/// Reads the Feature, its plan ConfigMap and its planned Tasks.
async fn read(target: &Target) -> anyhow::Result<ClusterPlan> {
    let features: Api<Feature> = Api::namespaced(target.client.clone(), &target.namespace);
    let feature = features
        .get_opt(&target.name)
        .await
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", target.describe()))?;
    let Some(feature) = feature else {
        return Err(Refusal::Input(format!(
            "{} not found: `kubectl get features -n {}` lists the Features there; -n names \
             another namespace",
            target.describe(),
            target.namespace
        ))
        .into());
    };
    if feature.spec.planning.is_none() {
        return Err(Refusal::Input(format!(
            "{} has no spec.planning: its tasks are hand-written, there is no plan to show, \
             approve or reject",
            target.describe()
        ))
        .into());
    }
    let status = feature
        .status
        .as_ref()
        .and_then(|s| s.planning.clone())
        .unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(target.client.clone(), &target.namespace);
    let map_name = plan_config_map_name(&target.name);
    let config_map = config_maps
        .get_opt(&map_name)
        .await
        .map_err(|error| anyhow::anyhow!("cannot read ConfigMap {map_name}: {error}"))?;
    let plan = match config_map {
        None => None,
        Some(config_map) => Some(stored_plan(&config_map, &map_name)?),
    };
    let tasks: Api<Task> = Api::namespaced(target.client.clone(), &target.namespace);
    let selector = format!("{FEATURE_LABEL}={},{PLAN_LABEL}", target.name);
    let planned = tasks
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|error| {
            anyhow::anyhow!(
                "cannot list the planned Tasks of {}: {error}",
                target.describe()
            )
        })?;
    let phases = planned
        .items
        .iter()
        .filter_map(|task| {
            let name = task.labels().get(TASK_LABEL)?.clone();
            let phase = task.status.as_ref().map(|s| s.phase).unwrap_or_default();
            Some((name, phase))
        })
        .collect();
    Ok(ClusterPlan {
        feature,
        status,
        plan,
        phases,
    })
}

/// The plan a plan ConfigMap holds.
fn stored_plan(config_map: &ConfigMap, map_name: &str) -> anyhow::Result<StoredPlan> {
    let files = read_plan_map(config_map).map_err(|error| anyhow::anyhow!("{error}"))?;
    let tasks = files
        .tasks
        .ok_or_else(|| anyhow::anyhow!("ConfigMap {map_name} holds no task list"))?;
    // The canonical text the controller wrote (checked when the plan was taken).
    let answer: Answer = serde_yaml_ng::from_str(&tasks).map_err(|error| {
        anyhow::anyhow!("ConfigMap {map_name} holds a task list that cannot be read: {error}")
    })?;
    let mut plan = StoredPlan::new(answer, files.document);
    if let Some(hash) = text(config_map, HASH_KEY) {
        hash.clone_into(&mut plan.hash);
    }
    Ok(plan)
}

/// `ralph plan show feature/NAME`.
pub(crate) async fn show(target: &Target, json: bool) -> anyhow::Result<ExitCode> {
    said(show_plan(target, json).await)
}

async fn show_plan(target: &Target, json: bool) -> anyhow::Result<ExitCode> {
    let plan = read(target).await?;
    if json {
        let mut tasks: Vec<_> = plan.phases.iter().collect();
        tasks.sort_by_key(|(name, _)| *name);
        let value = json!({
            "feature": target.name,
            "namespace": target.namespace,
            "status": plan.status,
            "hash": plan.plan.as_ref().map(|p| &p.hash),
            "plan": plan.plan.as_ref().map(|p| &p.answer),
            "document": plan.plan.as_ref().and_then(|p| p.document.as_ref()),
            "tasks": tasks
                .into_iter()
                .map(|(name, phase)| json!({
                    "name": name,
                    "object": crate::api::task_object_name(&target.name, name),
                    "phase": phase,
                }))
                .collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", target.describe());
    if plan.status.dag_hash.is_some() {
        print!("{}", plan.render(target));
    }
    if let Some(message) = &plan.status.message {
        println!("\nplanning: {message}");
    }
    println!("\n{}", plan.approval_line(target));
    Ok(ExitCode::SUCCESS)
}

/// `ralph plan approve feature/NAME [--hash H]`; on a terminal without `yes`, shows the plan
/// and asks first.
pub(crate) async fn approve(
    target: &Target,
    hash: Option<&str>,
    ask: bool,
) -> anyhow::Result<ExitCode> {
    said(approve_plan(target, hash, ask).await)
}

async fn approve_plan(target: &Target, hash: Option<&str>, ask: bool) -> anyhow::Result<ExitCode> {
    let plan = read(target).await?;
    let current = match approvable(&plan, target, hash)? {
        Approvable::Now(current) => current,
        Approvable::Already(already) => {
            println!("{already}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    if ask && !confirm(&plan, target, &current)? {
        eprintln!("nothing approved");
        return Ok(ExitCode::from(1));
    }
    let annotations = json!({
        APPROVE_PLAN_ANNOTATION: current,
        PLAN_ANSWERED_BY_ANNOTATION: who(),
        REJECT_PLAN_ANNOTATION: null,
        REJECT_COMMENT_ANNOTATION: null,
    });
    annotate(target, annotations).await?;
    println!(
        "approved plan {current} of {}: the controller creates its {} Tasks",
        target.describe(),
        plan.status.tasks
    );
    Ok(ExitCode::SUCCESS)
}

/// What approving the current plan would do.
enum Approvable {
    /// Approve this hash.
    Now(String),
    /// Nothing to do: it is approved (what to say).
    Already(String),
}

/// Whether the current plan can be approved (with `hash`, only when it names it).
fn approvable(
    plan: &ClusterPlan,
    target: &Target,
    hash: Option<&str>,
) -> Result<Approvable, Refusal> {
    let current = plan.current(target)?;
    if let Some(given) = hash
        && !hash_matches(given, current)
    {
        return Err(Refusal::State(format!(
            "{given} is not the current plan of {}; the current one is {current}: nothing \
             approved; `ralph plan show {}` prints it",
            target.describe(),
            target.argument()
        )));
    }
    match plan.answer().map(|a| a.state) {
        Some(ApprovalState::Approved) => {
            return Ok(Approvable::Already(format!(
                "plan {current} of {} was approved already",
                target.describe()
            )));
        }
        Some(ApprovalState::Rejected) => {
            return Err(Refusal::State(format!(
                "plan {current} of {} was rejected: the planner plans again; nothing approved",
                target.describe()
            )));
        }
        Some(ApprovalState::Pending) | None => {}
    }
    if plan.automatic() {
        return Err(Refusal::State(format!(
            "{} approves its plans itself (spec.planning.approval: Automatic): plan {current} \
             waits for nobody; set approval: Manual to approve plans by hand",
            target.describe()
        )));
    }
    Ok(Approvable::Now(current.to_owned()))
}

/// `ralph plan reject feature/NAME --comment TEXT`.
pub(crate) async fn reject(target: &Target, comment: &str) -> anyhow::Result<ExitCode> {
    said(reject_plan(target, comment).await)
}

async fn reject_plan(target: &Target, comment: &str) -> anyhow::Result<ExitCode> {
    let plan = read(target).await?;
    let current = plan.current(target)?.to_owned();
    match plan.answer().map(|a| a.state) {
        Some(ApprovalState::Approved) => {
            return Err(Refusal::State(format!(
                "plan {current} of {} is approved already: its Tasks run; nothing rejected",
                target.describe()
            ))
            .into());
        }
        Some(ApprovalState::Rejected) => {
            println!(
                "plan {current} of {} was rejected already",
                target.describe()
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some(ApprovalState::Pending) | None => {}
    }
    let annotations = json!({
        REJECT_PLAN_ANNOTATION: current,
        REJECT_COMMENT_ANNOTATION: comment,
        PLAN_ANSWERED_BY_ANNOTATION: who(),
        APPROVE_PLAN_ANNOTATION: null,
    });
    annotate(target, annotations).await?;
    println!(
        "rejected plan {current} of {}: its planning Task plans again with your comment",
        target.describe()
    );
    Ok(ExitCode::SUCCESS)
}

/// Sets (or, with `null`, removes) annotations of the Feature with a merge patch.
async fn annotate(target: &Target, annotations: serde_json::Value) -> anyhow::Result<()> {
    let features: Api<Feature> = Api::namespaced(target.client.clone(), &target.namespace);
    let patch = json!({ "metadata": { "annotations": annotations } });
    features
        .patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| anyhow::anyhow!("cannot annotate {}: {error}", target.describe()))?;
    Ok(())
}

/// Shows the plan on stderr and asks whether to approve it.
fn confirm(plan: &ClusterPlan, target: &Target, current: &str) -> anyhow::Result<bool> {
    if let Some(shown) = &plan.plan
        && shown.hash != current
    {
        anyhow::bail!(
            "{}: status.planning.dagHash is {current} but ConfigMap {} holds plan {}: the \
             controller is writing a new plan; run the command again in a moment",
            target.describe(),
            plan_config_map_name(&target.name),
            shown.hash
        );
    }
    let question = format!("Approve plan {current} of {}?", target.describe());
    super::plan::confirm(&plan.render(target), &question)
}

/// Who answers: the user's login name, else "ralph".
fn who() -> String {
    std::env::var("USER")
        .ok()
        .filter(|user| !user.is_empty())
        .unwrap_or_else(|| "ralph".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_slash_name_names_a_feature_in_the_cluster() {
        assert_eq!(
            feature_name(Some(Path::new("feature/demo"))).as_deref(),
            Some("demo")
        );
        assert_eq!(
            feature_name(Some(Path::new("features/demo"))).as_deref(),
            Some("demo")
        );
        assert_eq!(feature_name(Some(Path::new("feature.yaml"))), None);
        assert_eq!(feature_name(Some(Path::new("feature/a/b"))), None);
        assert_eq!(feature_name(Some(Path::new("feature/"))), None);
        assert_eq!(feature_name(None), None);
    }
}
