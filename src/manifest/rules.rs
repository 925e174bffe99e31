//! The CRDs' CEL rules (and name rules the API server applies), checked in Rust for local
//! validation. Rules the task DAG already enforces (unique names, self-dependency,
//! unknown parent) are left to `engine::dag`, so each problem is reported once.

use super::path::FieldPath;
use crate::api::budget::{
    BudgetError, BudgetSpec, EMPTY_BUDGET_MESSAGE, MAX_COST_USD_RULE_MESSAGE,
};
use crate::api::names::{DNS_LABEL_MAX_LEN, check_dns_subdomain};
use crate::api::{Feature, Task, TaskFields, TextSource};

/// A rule violation: the field and what is wrong.
pub(super) type RuleViolation = (FieldPath, String);

/// Violations of the Feature CRD's rules.
pub(super) fn feature_rules(feature: &Feature, name: &str) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    if let Err(problem) = check_dns_subdomain(name) {
        out.push((FieldPath::root("metadata").key("name"), problem));
    } else if name.len() > DNS_LABEL_MAX_LEN {
        out.push((
            FieldPath::root("metadata").key("name"),
            format!(
                "a Feature name must be at most {DNS_LABEL_MAX_LEN} characters (it is used as a label value); it has {}",
                name.len()
            ),
        ));
    }
    let spec = &feature.spec;
    if spec.retry.backoff_base_seconds > spec.retry.backoff_max_seconds {
        out.push((
            FieldPath::root("spec").key("retry"),
            format!(
                "backoffBaseSeconds ({}) must not exceed backoffMaxSeconds ({})",
                spec.retry.backoff_base_seconds, spec.retry.backoff_max_seconds
            ),
        ));
    }
    let verify = &spec.verify;
    if verify.command.is_none()
        && (verify.command_timeout_seconds.is_some() || verify.output_tail_bytes.is_some())
    {
        out.push((
            FieldPath::root("spec").key("verify"),
            "commandTimeoutSeconds and outputTailBytes apply to verify.command: set command, \
             or remove them"
                .to_owned(),
        ));
    }
    for (field, source) in [("spec", &spec.context.spec), ("plan", &spec.context.plan)] {
        if let Some(source) = source {
            let path = FieldPath::root("spec").key("context").key(field);
            text_source_rule(source, path, &mut out);
        }
    }
    if let Some(budget) = &spec.budget {
        budget_rules(budget, &mut out);
    }
    for (index, template) in spec.tasks.iter().enumerate() {
        let path = FieldPath::root("spec")
            .key("tasks")
            .item(index, Some(&template.name))
            .key("dependsOn");
        duplicate_dependencies(&template.fields, &path, &mut out);
    }
    pool_rules(feature, &mut out);
    out
}

/// `spec.fallbackAgents` is a map keyed by name (not `primary`, `spec.agent`'s), and
/// `spec.model.models` a set.
fn pool_rules(feature: &Feature, out: &mut Vec<RuleViolation>) {
    let spec = &feature.spec;
    let agents = FieldPath::root("spec").key("fallbackAgents");
    for (index, named) in spec.fallback_agents.iter().enumerate() {
        let path = agents.item(index, Some(&named.name));
        if named.name == crate::api::PRIMARY_AGENT {
            out.push((
                path,
                "the pool name primary is spec.agent's: give each of spec.fallbackAgents another name"
                    .to_owned(),
            ));
        } else if spec.fallback_agents[..index]
            .iter()
            .any(|other| other.name == named.name)
        {
            out.push((path, format!("names the agent {:?} twice", named.name)));
        }
    }
    if let Some(policy) = &spec.model {
        for (index, model) in policy.models.iter().enumerate() {
            if policy.models[..index].contains(model) {
                let path = FieldPath::root("spec").key("model").key("models");
                out.push((path, format!("names {model:?} twice")));
            }
        }
    }
}

/// Violations of the Task CRD's rules.
pub(super) fn task_rules(task: &Task, name: &str) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    if let Err(problem) = check_dns_subdomain(name) {
        out.push((FieldPath::root("metadata").key("name"), problem));
    }
    let path = FieldPath::root("spec").key("dependsOn");
    duplicate_dependencies(&task.spec.fields, &path, &mut out);
    out
}

/// The CRD's rules on `spec.budget`, with the same messages.
fn budget_rules(budget: &BudgetSpec, out: &mut Vec<RuleViolation>) {
    let path = FieldPath::root("spec").key("budget");
    match budget.budget() {
        Ok(_) => {}
        Err(BudgetError::Empty) => out.push((path, EMPTY_BUDGET_MESSAGE.to_owned())),
        Err(BudgetError::Cost(_) | BudgetError::ZeroCost) => out.push((
            path.key("maxCostUSD"),
            format!(
                "{:?}: {MAX_COST_USD_RULE_MESSAGE}",
                budget.max_cost_usd.as_deref().unwrap_or_default()
            ),
        )),
    }
}

fn text_source_rule(source: &TextSource, path: FieldPath, out: &mut Vec<RuleViolation>) {
    if source.inline.is_some() == source.config_map_key_ref.is_some() {
        out.push((
            path,
            "exactly one of inline and configMapKeyRef must be set".to_owned(),
        ));
    }
}

fn duplicate_dependencies(fields: &TaskFields, path: &FieldPath, out: &mut Vec<RuleViolation>) {
    for (index, dependency) in fields.depends_on.iter().enumerate() {
        if fields.depends_on[..index].contains(dependency) {
            out.push((path.clone(), format!("names {dependency:?} twice")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feature(spec: serde_json::Value) -> Feature {
        let value = serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1",
            "kind": "Feature",
            "metadata": {"name": "hello"},
            "spec": spec,
        });
        match serde_json::from_value(value) {
            Ok(feature) => feature,
            Err(error) => panic!("test feature does not parse: {error}"),
        }
    }

    fn agent() -> serde_json::Value {
        serde_json::json!({"command": ["claude-agent-acp"]})
    }

    #[test]
    fn a_fallback_agent_named_primary_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "fallbackAgents": [{"name": "primary", "command": ["codex-acp"]}]}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found.len(), 1);
        assert!(found[0].1.contains("spec.agent's"), "{}", found[0].1);
    }

    #[test]
    fn two_fallback_agents_of_one_name_are_reported() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "fallbackAgents": [{"name": "b", "command": ["x"]}, {"name": "b", "command": ["y"]}]}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, "names the agent \"b\" twice");
    }

    #[test]
    fn a_model_listed_twice_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "model": {"strategy": "escalate", "models": ["haiku", "haiku"]}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found[0].0.to_string(), "spec.model.models");
    }

    #[test]
    fn a_plain_feature_breaks_no_rule() {
        let feature = feature(serde_json::json!({"agent": agent(), "tasks": [{"name": "a"}]}));
        assert_eq!(feature_rules(&feature, "hello"), []);
    }

    #[test]
    fn backoff_base_above_backoff_max_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "retry": {"backoffBaseSeconds": 100, "backoffMaxSeconds": 50}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.to_string(), "spec.retry");
    }

    #[test]
    fn a_text_source_needs_exactly_one_source() {
        let feature = feature(serde_json::json!({"agent": agent(), "context": {"spec": {}}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found[0].0.to_string(), "spec.context.spec");
    }

    #[test]
    fn a_feature_name_longer_than_a_label_value_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent()}));
        let found = feature_rules(&feature, &"a".repeat(64));
        assert_eq!(found[0].0.to_string(), "metadata.name");
    }

    #[test]
    fn a_dependency_named_twice_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(), "tasks": [
            {"name": "a"}, {"name": "b", "dependsOn": ["a", "a"]}]}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.to_string(), "spec.tasks[b].dependsOn");
        assert_eq!(found[0].1, "names \"a\" twice");
    }

    #[test]
    fn a_zero_cost_budget_is_reported_on_max_cost_usd() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "budget": {"maxCostUSD": "0.00"}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.to_string(), "spec.budget.maxCostUSD");
        assert!(
            found[0]
                .1
                .starts_with("\"0.00\": maxCostUSD must be a positive")
        );
    }

    #[test]
    fn a_cost_with_too_many_decimals_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "budget": {"maxCostUSD": "0.1234567"}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found[0].0.to_string(), "spec.budget.maxCostUSD");
    }

    #[test]
    fn a_budget_without_limits_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(), "budget": {}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(
            found,
            [(
                FieldPath::root("spec").key("budget"),
                EMPTY_BUDGET_MESSAGE.to_owned()
            )]
        );
    }

    #[test]
    fn a_budget_with_both_limits_breaks_no_rule() {
        let feature = feature(serde_json::json!({"agent": agent(),
            "budget": {"maxCostUSD": "12.50", "maxTokens": 100000}}));
        assert_eq!(feature_rules(&feature, "hello"), []);
    }
}
