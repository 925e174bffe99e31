//! The generated CustomResourceDefinitions carry what the API promises: names, printer
//! columns, status subresource and the CEL rules; and the committed YAML is current.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_apiserver::cel;

use cel::cost::{PER_CRD_LIMIT, PER_RULE_LIMIT, budget_violations, schema_rule_costs};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kube::CustomResourceExt;
use ralph::api::{Feature, Task};
use serde_json::Value;

fn version(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    assert_eq!(crd.spec.versions.len(), 1, "one served version");
    &crd.spec.versions[0]
}

fn column_names(crd: &CustomResourceDefinition) -> Vec<String> {
    version(crd)
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|column| column.name.clone())
        .collect()
}

/// The schema of the Feature's `spec` field at `path` (`tasks/items`: the task template).
fn feature_spec_field(path: &str) -> Value {
    let pointer = format!("/properties/spec/properties/{path}");
    match schema(&Feature::crd()).pointer(&pointer) {
        Some(field) => field.clone(),
        None => panic!("no {pointer} in the Feature schema"),
    }
}

fn schema(crd: &CustomResourceDefinition) -> Value {
    let schema = version(crd)
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    match schema.map(serde_json::to_value) {
        Some(Ok(value)) => value,
        other => panic!("no openAPIV3Schema: {other:?}"),
    }
}

/// Every CEL rule in the schema, as (JSON pointer of the schema node, rule).
fn rules(schema: &Value) -> Vec<(String, String)> {
    fn walk(node: &Value, path: &str, out: &mut Vec<(String, String)>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::Array(list)) = map.get("x-kubernetes-validations") {
                    for rule in list {
                        if let Some(text) = rule.get("rule").and_then(Value::as_str) {
                            out.push((path.to_owned(), text.to_owned()));
                        }
                    }
                }
                for (key, child) in map {
                    walk(child, &format!("{path}/{key}"), out);
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    walk(child, &format!("{path}/{index}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

fn has_rule(schema: &Value, pointer: &str, rule: &str) -> bool {
    rules(schema)
        .iter()
        .any(|(path, text)| path == pointer && text == rule)
}

/// Asserts that the schema of `crd` holds the CEL `rule` on the node at `pointer`.
fn assert_rule(crd: &CustomResourceDefinition, pointer: &str, rule: &str) {
    let schema = schema(crd);
    assert!(
        has_rule(&schema, pointer, rule),
        "no rule {rule:?} at {pointer:?}; the rules: {:#?}",
        rules(&schema)
    );
}

#[test]
fn feature_crd_names_group_kind_and_short_name() {
    let crd = Feature::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("features.ralph.dev"));
    assert_eq!(crd.spec.group, "ralph.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["feat".to_owned()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["ralph".to_owned()]));
    assert_eq!(version(&crd).name, "v1alpha1");
}

#[test]
fn task_crd_names_group_kind_and_short_name() {
    let crd = Task::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("tasks.ralph.dev"));
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["rtask".to_owned()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["ralph".to_owned()]));
}

#[test]
fn feature_crd_prints_phase_ready_done_total_cost_and_age() {
    assert_eq!(
        column_names(&Feature::crd()),
        ["Phase", "Ready", "Done", "Total", "Cost", "Age"]
    );
}

#[test]
fn task_crd_prints_phase_ready_attempts_feature_and_age() {
    assert_eq!(
        column_names(&Task::crd()),
        ["Phase", "Ready", "Attempts", "Feature", "Age"]
    );
}

#[test]
fn printer_columns_point_at_existing_status_and_spec_fields() {
    for crd in [Feature::crd(), Task::crd()] {
        let schema = schema(&crd);
        for column in version(&crd).additional_printer_columns.iter().flatten() {
            if column.json_path == ".metadata.creationTimestamp" {
                continue;
            }
            let pointer: String = column
                .json_path
                .trim_start_matches('.')
                .split('.')
                .map(|segment| format!("/properties/{segment}"))
                .collect();
            assert!(
                schema.pointer(&pointer).is_some(),
                "column {} of {:?} points at missing field {}",
                column.name,
                crd.metadata.name,
                column.json_path
            );
        }
    }
}

#[test]
fn both_crds_enable_the_status_subresource() {
    for crd in [Feature::crd(), Task::crd()] {
        let subresources = version(&crd).subresources.as_ref();
        assert!(
            subresources.and_then(|s| s.status.as_ref()).is_some(),
            "{:?} has no status subresource",
            crd.metadata.name
        );
    }
}

#[test]
fn feature_crd_keys_tasks_by_name_without_a_cel_rule() {
    let tasks = feature_spec_field("tasks");
    assert_eq!(tasks["x-kubernetes-list-type"], "map");
    assert_eq!(
        tasks["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    assert_eq!(tasks["maxItems"], 200);
    assert!(tasks.get("x-kubernetes-validations").is_none());
}

#[test]
fn task_list_map_key_is_required() {
    let required = feature_spec_field("tasks/items/required");
    let required = required.as_array().cloned().unwrap_or_default();
    assert!(required.contains(&Value::from("name")), "{required:?}");
}

#[test]
fn depends_on_is_a_set_in_features_and_tasks() {
    let feature = schema(&Feature::crd());
    let task = schema(&Task::crd());
    for depends_on in [
        &feature["properties"]["spec"]["properties"]["tasks"]["items"]["properties"]["dependsOn"],
        &task["properties"]["spec"]["properties"]["dependsOn"],
    ] {
        assert_eq!(depends_on["x-kubernetes-list-type"], "set");
        assert_eq!(depends_on["maxItems"], 32);
        assert!(depends_on.get("x-kubernetes-validations").is_none());
    }
}

#[test]
fn feature_crd_has_no_rule_per_task_template() {
    let template = feature_spec_field("tasks/items");
    assert!(
        template.get("x-kubernetes-validations").is_none(),
        "a rule per template makes every write cost grow with the number of tasks: {}",
        template["x-kubernetes-validations"]
    );
}

#[test]
fn feature_crd_orders_backoff_base_below_backoff_max() {
    assert_rule(
        &Feature::crd(),
        "/properties/spec/properties/retry",
        "self.backoffBaseSeconds <= self.backoffMaxSeconds",
    );
}

#[test]
fn feature_crd_checks_the_budgets_cost_is_a_positive_decimal_string() {
    let schema = schema(&Feature::crd());
    let cost = "/properties/spec/properties/budget/properties/maxCostUSD";
    assert!(has_rule(
        &schema,
        cost,
        "self.matches('^[0-9]{1,9}([.][0-9]{1,6})?$') && self.matches('[1-9]')"
    ));
    let field = schema.pointer(cost).cloned().unwrap_or_default();
    assert_eq!(
        (&field["type"], &field["maxLength"]),
        (&"string".into(), &16.into())
    );
}

#[test]
fn feature_crd_requires_a_budget_to_set_a_limit() {
    let schema = schema(&Feature::crd());
    assert!(has_rule(
        &schema,
        "/properties/spec/properties/budget",
        "has(self.maxCostUSD) || has(self.maxTokens)"
    ));
    let tokens = feature_spec_field("budget/properties/maxTokens");
    assert_eq!(tokens["minimum"], 1.0);
}

#[test]
fn feature_crd_limits_the_feature_name_to_a_label_value() {
    assert_rule(&Feature::crd(), "", "self.metadata.name.size() <= 63");
}

#[test]
fn task_crd_rejects_a_task_that_depends_on_itself() {
    assert_rule(
        &Task::crd(),
        "",
        "!has(self.spec.dependsOn) || !(self.metadata.name in self.spec.dependsOn)",
    );
}

#[test]
fn task_crd_makes_feature_ref_immutable() {
    assert_rule(
        &Task::crd(),
        "/properties/spec/properties/featureRef",
        "self == oldSelf",
    );
}

#[test]
fn template_names_must_be_dns_labels() {
    let name = feature_spec_field("tasks/items/properties/name");
    assert_eq!(name["pattern"], ralph::api::names::DNS_LABEL_PATTERN);
    assert_eq!(name["maxLength"], 63);
}

#[test]
fn ranges_are_bounded_in_the_schema() {
    let schema = schema(&Feature::crd());
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["parallelism"]["minimum"], 1.0);
    assert_eq!(spec["leaseDurationSeconds"]["minimum"], 15.0);
    assert_eq!(spec["leaseDurationSeconds"]["maximum"], 3600.0);
    assert_eq!(spec["retry"]["properties"]["maxRetries"]["maximum"], 100.0);
    let task = &spec["tasks"]["items"]["properties"];
    assert_eq!(task["priority"]["minimum"], -1000.0);
    assert_eq!(task["priority"]["maximum"], 1000.0);
    assert_eq!(task["maxRetries"]["maximum"], 100.0);
}

/// A structural schema gives every node a type (or an explicit int-or-string /
/// preserve-unknown-fields marker), and has no `$ref`.
#[test]
fn schemas_are_structural() {
    fn check(node: &Value, path: &str, problems: &mut Vec<String>) {
        let Value::Object(map) = node else { return };
        if map.contains_key("$ref") {
            problems.push(format!("{path}: $ref"));
        }
        let typed = map.contains_key("type")
            || map.contains_key("x-kubernetes-int-or-string")
            || map.contains_key("x-kubernetes-preserve-unknown-fields");
        if !typed {
            problems.push(format!("{path}: no type"));
        }
        if let Some(Value::Object(properties)) = map.get("properties") {
            for (name, child) in properties {
                check(child, &format!("{path}.{name}"), problems);
            }
        }
        if let Some(items) = map.get("items") {
            check(items, &format!("{path}[]"), problems);
        }
        if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
            check(additional, &format!("{path}{{}}"), problems);
        }
    }
    for crd in [Feature::crd(), Task::crd()] {
        let mut problems = Vec::new();
        check(&schema(&crd), "", &mut problems);
        assert!(
            problems.is_empty(),
            "{:?}: {problems:#?}",
            crd.metadata.name
        );
    }
}

#[test]
fn crds_yaml_holds_feature_then_task_as_two_documents() {
    let yaml = match ralph::api::crds_yaml() {
        Ok(yaml) => yaml,
        Err(error) => panic!("{error}"),
    };
    assert_eq!(yaml.matches("\n---\n").count() + 1, 2);
    let feature = yaml.find("name: features.ralph.dev");
    let task = yaml.find("name: tasks.ralph.dev");
    assert!(feature.is_some() && task.is_some() && feature < task);
}

#[test]
fn committed_crds_match_the_generated_ones() {
    let committed = include_str!("../crds/ralph.dev_crds.yaml");
    let generated = ralph::api::crds_yaml().ok();
    assert!(
        generated.as_deref() == Some(committed),
        "crds/ralph.dev_crds.yaml is stale: run scripts/gen-crds"
    );
}

#[test]
fn every_rule_fits_the_api_servers_per_rule_cost_budget() {
    for crd in [Feature::crd(), Task::crd()] {
        let costs = match schema_rule_costs(&schema(&crd)) {
            Ok(costs) => costs,
            Err(error) => panic!("{error}"),
        };
        for rule in &costs {
            println!(
                "{:?} {}: cost {} x {} = {} ({})",
                crd.metadata.name,
                rule.path,
                rule.cost,
                rule.cardinality,
                rule.total(),
                rule.rule
            );
            assert!(rule.total() <= PER_RULE_LIMIT, "{rule:?} is over budget");
        }
        let total: u64 = costs.iter().map(|rule| rule.total()).sum();
        println!("{:?} total: {total}", crd.metadata.name);
        assert!(
            total <= PER_CRD_LIMIT,
            "{:?} total {total}",
            crd.metadata.name
        );
    }
}

#[test]
fn every_rule_costs_at_most_a_hundredth_of_the_budget() {
    for crd in [Feature::crd(), Task::crd()] {
        for rule in schema_rule_costs(&schema(&crd)).unwrap_or_default() {
            assert!(rule.total() <= PER_RULE_LIMIT / 100, "{rule:?}");
        }
    }
}

/// A `dependsOn` list schema with the given bound, holding the old uniqueness rule.
fn depends_on_with_quadratic_rule(max_items: u64) -> Value {
    serde_json::json!({
        "type": "array",
        "maxItems": max_items,
        "items": {"type": "string", "maxLength": 253},
        "x-kubernetes-validations": [{"rule": "self.all(d, self.exists_one(e, e == d))"}]
    })
}

#[test]
fn the_old_quadratic_uniqueness_rule_on_a_1000_item_list_is_over_budget() {
    let violations = budget_violations(&serde_json::json!({
        "type": "object",
        "properties": {"dependsOn": depends_on_with_quadratic_rule(1000)}
    }))
    .unwrap_or_default();
    assert_eq!(
        violations[0].0,
        "properties[dependsOn].x-kubernetes-validations[0].rule"
    );
    assert!(
        violations[0]
            .1
            .contains("estimated rule cost exceeds budget by factor of")
    );
}

/// The real v1.28 server refused the old Feature CRD with this figure (issue 8).
#[test]
fn the_old_dependency_rule_inside_200_tasks_is_over_budget_by_the_real_servers_factor() {
    let violations = budget_violations(&serde_json::json!({
        "type": "object",
        "properties": {"tasks": {
            "type": "array",
            "maxItems": 200,
            "items": {"type": "object", "properties": {"dependsOn": depends_on_with_quadratic_rule(32)}}
        }}
    }))
    .unwrap_or_default();
    assert_eq!(
        violations.first().map(|(path, _)| path.as_str()),
        Some("properties[tasks].items.properties[dependsOn].x-kubernetes-validations[0].rule")
    );
    assert!(
        violations[0].1.contains("by factor of 2.2x"),
        "{violations:?}"
    );
}

#[test]
fn an_unbounded_string_makes_an_equality_rule_cost_the_request_size() {
    let costs = schema_rule_costs(&serde_json::json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.a == self.b"}]
        }}}
    }))
    .unwrap_or_default();
    assert!(costs[0].total() > PER_RULE_LIMIT, "{costs:?}");
}

/// Every `description` in a schema, as (JSON pointer, text).
fn descriptions(node: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            for (key, child) in map {
                match child {
                    Value::String(text) if key == "description" => {
                        out.push((path.to_owned(), text.clone()));
                    }
                    _ => descriptions(child, &format!("{path}/{key}"), out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| descriptions(item, path, out)),
        _ => {}
    }
}

#[test]
fn descriptions_name_no_rust_items() {
    let rust_name = regex::Regex::new(r"\[`|`[a-z0-9]+_[a-z0-9_]+`|\w::\w|\(\)").ok();
    for crd in ralph::api::crds() {
        let mut found = Vec::new();
        descriptions(&schema(&crd), "", &mut found);
        for (path, text) in found {
            let quantity_grammar = text.contains("```");
            assert!(
                quantity_grammar || !rust_name.as_ref().is_some_and(|re| re.is_match(&text)),
                "{path}: {text}"
            );
        }
    }
}

#[test]
fn descriptions_break_lines_only_between_paragraphs_and_list_items() {
    for crd in ralph::api::crds() {
        let mut found = Vec::new();
        descriptions(&schema(&crd), "", &mut found);
        for (path, text) in found.into_iter().filter(|(_, t)| !t.contains("```")) {
            let lines: Vec<&str> = text.split('\n').collect();
            for pair in lines.windows(2) {
                let paragraph_break = pair[0].is_empty() || pair[1].is_empty();
                assert!(
                    paragraph_break || pair[1].starts_with("- "),
                    "{path}: line break inside a sentence: {text:?}"
                );
            }
        }
    }
}

#[test]
fn reflow_joins_wrapped_lines_and_keeps_paragraphs_and_lists() {
    assert_eq!(
        ralph::api::reflow("A long\nsentence.\n\nItems:\n- one\n  wrapped\n- two"),
        "A long sentence.\n\nItems:\n- one wrapped\n- two"
    );
}
