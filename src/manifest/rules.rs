//! The CRDs' CEL rules (and name rules the API server applies), checked in Rust for local
//! validation. Rules the task DAG already enforces (unique names, self-dependency,
//! unknown parent) are left to `engine::dag`, so each problem is reported once.

use crate::api::names::{DNS_LABEL_MAX_LEN, check_dns_subdomain};
use crate::api::{Feature, Task, TaskFields, TextSource};

/// A rule violation: the field path and what is wrong.
pub type RuleViolation = (String, String);

/// Violations of the Feature CRD's rules.
pub fn feature_rules(feature: &Feature, name: &str) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    if let Err(problem) = check_dns_subdomain(name) {
        out.push(("metadata.name".to_owned(), problem));
    } else if name.len() > DNS_LABEL_MAX_LEN {
        out.push((
            "metadata.name".to_owned(),
            format!(
                "a Feature name must be at most {DNS_LABEL_MAX_LEN} characters (it is used as a label value); it has {}",
                name.len()
            ),
        ));
    }
    let spec = &feature.spec;
    if spec.retry.backoff_base_seconds > spec.retry.backoff_max_seconds {
        out.push((
            "spec.retry".to_owned(),
            format!(
                "backoffBaseSeconds ({}) must not exceed backoffMaxSeconds ({})",
                spec.retry.backoff_base_seconds, spec.retry.backoff_max_seconds
            ),
        ));
    }
    for (field, source) in [("spec", &spec.context.spec), ("plan", &spec.context.plan)] {
        if let Some(source) = source {
            text_source_rule(source, &format!("spec.context.{field}"), &mut out);
        }
    }
    for template in &spec.tasks {
        duplicate_dependencies(
            &template.fields,
            &format!("spec.tasks[{}].dependsOn", template.name),
            &mut out,
        );
    }
    out
}

/// Violations of the Task CRD's rules.
pub fn task_rules(task: &Task, name: &str) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    if let Err(problem) = check_dns_subdomain(name) {
        out.push(("metadata.name".to_owned(), problem));
    }
    duplicate_dependencies(&task.spec.fields, "spec.dependsOn", &mut out);
    out
}

fn text_source_rule(source: &TextSource, path: &str, out: &mut Vec<RuleViolation>) {
    if source.inline.is_some() == source.config_map_key_ref.is_some() {
        out.push((
            path.to_owned(),
            "exactly one of inline and configMapKeyRef must be set".to_owned(),
        ));
    }
}

fn duplicate_dependencies(fields: &TaskFields, path: &str, out: &mut Vec<RuleViolation>) {
    for (index, dependency) in fields.depends_on.iter().enumerate() {
        if fields.depends_on[..index].contains(dependency) {
            out.push((path.to_owned(), format!("names {dependency:?} twice")));
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
        assert_eq!(found[0].0, "spec.retry");
    }

    #[test]
    fn a_text_source_needs_exactly_one_source() {
        let feature = feature(serde_json::json!({"agent": agent(), "context": {"spec": {}}}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(found[0].0, "spec.context.spec");
    }

    #[test]
    fn a_feature_name_longer_than_a_label_value_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent()}));
        let found = feature_rules(&feature, &"a".repeat(64));
        assert_eq!(found[0].0, "metadata.name");
    }

    #[test]
    fn a_dependency_named_twice_is_reported() {
        let feature = feature(serde_json::json!({"agent": agent(), "tasks": [
            {"name": "a"}, {"name": "b", "dependsOn": ["a", "a"]}]}));
        let found = feature_rules(&feature, "hello");
        assert_eq!(
            found,
            [(
                "spec.tasks[b].dependsOn".to_owned(),
                "names \"a\" twice".to_owned()
            )]
        );
    }
}
