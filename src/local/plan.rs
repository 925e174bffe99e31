//! Turning a feature of a validated manifest plan into what local mode runs. Task IDs are
//! the plan's local IDs (template names).

use std::time::Duration;

use crate::api::budget::{BudgetError, budget_of};
use crate::api::{MemorySpec, TaskFields, TextSource};
use crate::local::feature::{LocalAgent, LocalFeature, LocalTask};
use crate::manifest::FeatureManifest;

/// A feature that cannot run locally.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Local mode has no cluster to read a ConfigMap from.
    #[error(
        "feature {feature}: spec.context.{field} reads a ConfigMap, which local mode cannot do; \
         use `inline` text"
    )]
    ConfigMapText {
        /// The feature.
        feature: String,
        /// `spec` or `plan`.
        field: &'static str,
    },
    /// Local mode has no cluster to read seeded knowledge from.
    #[error(
        "feature {0}: spec.memory.knowledgeFrom reads a ConfigMap, which local mode cannot do; \
         put the entries in spec.memory.knowledge"
    )]
    ConfigMapKnowledge(String),
    /// No agent command anywhere.
    #[error("feature {0}: spec.agent.command is empty; set it or pass --agent")]
    NoAgent(String),
    /// `spec.budget` cannot be used.
    #[error("feature {feature}: {source}")]
    Budget {
        /// The feature.
        feature: String,
        /// What is wrong with the budget.
        #[source]
        source: BudgetError,
    },
}

fn text(
    feature: &str,
    field: &'static str,
    source: Option<&TextSource>,
) -> Result<Option<String>, PlanError> {
    match source {
        None => Ok(None),
        Some(source) if source.config_map_key_ref.is_some() && source.inline.is_none() => {
            Err(PlanError::ConfigMapText {
                feature: feature.to_string(),
                field,
            })
        }
        Some(source) => Ok(source.inline.clone()),
    }
}

fn local_memory(feature: &str, memory: &MemorySpec) -> Result<MemorySpec, PlanError> {
    match memory.knowledge_from {
        Some(_) => Err(PlanError::ConfigMapKnowledge(feature.to_owned())),
        None => Ok(memory.clone()),
    }
}

/// The variables of `agent.env` that have a value, as the runner's environment (the agent
/// inherits it).
fn agent_env(agent: &crate::api::AgentSpec) -> Vec<(String, String)> {
    agent
        .env
        .iter()
        .filter_map(|var| Some((var.name.clone(), var.value.clone()?)))
        .collect()
}

/// What of the agents' environment a local run cannot resolve (a `valueFrom` or an
/// `envFrom` reads the cluster), one sentence each naming the field and the fix; the
/// primary agent's only when its command is the manifest's (not `--agent`).
pub fn unresolved_env(plan: &FeatureManifest, agent_overridden: bool) -> Vec<String> {
    let spec = &plan.feature.spec;
    let primary = (!agent_overridden).then(|| ("spec.agent".to_owned(), &spec.agent));
    let agents = primary.into_iter().chain(
        spec.fallback_agents
            .iter()
            .enumerate()
            .map(|(index, named)| (format!("spec.fallbackAgents[{index}]"), &named.agent)),
    );
    let mut unresolved = Vec::new();
    for (field, agent) in agents {
        for var in agent.env.iter().filter(|var| var.value_from.is_some()) {
            unresolved.push(format!(
                "{field}.env {}: valueFrom reads the cluster, which a local run cannot do; the \
                 variable is not set (export it in your shell or give it a value)",
                var.name
            ));
        }
        if !agent.env_from.is_empty() {
            unresolved.push(format!(
                "{field}.envFrom reads Secrets or ConfigMaps of the cluster, which a local run \
                 cannot do; its variables are not set (export them in your shell or list them \
                 in {field}.env)"
            ));
        }
    }
    unresolved
}

/// The local feature spec of a planned feature.
pub fn feature_spec(plan: &FeatureManifest) -> Result<LocalFeature, PlanError> {
    let name = plan.name();
    let spec = &plan.feature.spec;
    let mut agent_command = spec.agent.command.clone();
    agent_command.extend(spec.agent.args.iter().cloned());
    Ok(LocalFeature {
        agent_command,
        agent_env: agent_env(&spec.agent),
        fallback_agents: spec
            .fallback_agents
            .iter()
            .map(|named| LocalAgent {
                name: named.name.clone(),
                command: [named.agent.command.clone(), named.agent.args.clone()].concat(),
                env: agent_env(&named.agent),
            })
            .collect(),
        model: spec.model.clone(),
        parallelism: spec.parallelism,
        max_iterations: spec.max_iterations,
        budget: budget_of(spec.budget.as_ref()).map_err(|source| PlanError::Budget {
            feature: name.clone(),
            source,
        })?,
        max_retries: spec.retry.max_retries,
        backoff_base: Duration::from_secs(spec.retry.backoff_base_seconds),
        backoff_max: Duration::from_secs(spec.retry.backoff_max_seconds),
        verify: spec.verify.clone(),
        suspend: spec.suspend,
        spec_text: text(&name, "spec", spec.context.spec.as_ref())?,
        plan_text: text(&name, "plan", spec.context.plan.as_ref())?,
        memory: local_memory(&name, &spec.memory)?,
        tasks: plan
            .tasks
            .iter()
            .map(|task| LocalTask {
                name: task.id.clone(),
                fields: TaskFields {
                    title: task.title().to_string(),
                    ..task.fields.clone()
                },
            })
            .collect(),
        name,
    })
}

/// The agent's idle and total timeouts from the manifest, as runner options.
pub fn agent_timeouts(plan: &FeatureManifest) -> (Duration, Duration) {
    let agent = &plan.feature.spec.agent;
    (
        Duration::from_secs(agent.idle_timeout_seconds),
        Duration::from_secs(agent.total_timeout_seconds),
    )
}
