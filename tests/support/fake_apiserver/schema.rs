//! What a real API server checks against a CRD's schema:
//! - on CRD create/update, the estimated cost of its validation rules (422 Forbidden
//!   when over budget, in the real server's words);
//! - on every write of a custom object, status writes included, the whole object against
//!   the structural schema (types, required, enum, bounds, patterns, list-type set/map
//!   uniqueness) and its CEL rules (those the test evaluator can run; transition rules
//!   with `oldSelf` are not evaluated). Unknown fields pass (a real server prunes them).

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use serde_json::{Value, json};

use super::cel::cost::budget_violations;
use super::cel::eval::{EvalError, eval_rule};
use super::cel::parse::{Expr, parse};
use super::errors::ApiError;
use super::objects::meta_str;
use super::resources::ResourceType;

/// One field error, as in a Status' `details.causes`.
struct Cause {
    reason: &'static str,
    field: String,
    message: String,
}

/// The `openAPIV3Schema` of each version of a CRD object.
fn version_schemas(crd: &Value) -> Vec<(usize, &Value)> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    versions
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, v)| Some((index, v.pointer("/schema/openAPIV3Schema")?)))
        .collect()
}

/// The `openAPIV3Schema` of the storage version of a CRD object.
pub fn crd_schema(crd: &Value) -> Option<Value> {
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| versions.first())?;
    version.pointer("/schema/openAPIV3Schema").cloned()
}

/// The schemas of ralph's own CRDs, for the types the fake serves without a CRD object.
pub fn ralph_schema(plural: &str) -> Option<Value> {
    let crds = serde_json::to_value(ralph::api::crds()).ok()?;
    crds.as_array()?
        .iter()
        .find(|crd| crd.pointer("/spec/names/plural").and_then(Value::as_str) == Some(plural))
        .and_then(crd_schema)
}

fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    let listed: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let what = if listed.len() == 1 {
        listed[0].clone()
    } else {
        format!("[{}]", listed.join(", "))
    };
    let group_kind = if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    };
    let mut error = ApiError::invalid(
        &rt.group_resource(),
        name,
        format!("{group_kind} \"{name}\" is invalid: {what}"),
    );
    let causes: Vec<Value> = causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect();
    error.details = Some(Box::new(
        json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}),
    ));
    error
}

/// Checks a CRD object (its rules' cost) or a custom object (its schema), by type.
pub fn validate(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    let name = meta_str(object, "name").unwrap_or_default();
    let mut causes = Vec::new();
    if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
        for (index, schema) in version_schemas(object) {
            let base = format!("spec.versions[{index}].schema.openAPIV3Schema");
            let violations = budget_violations(schema).map_err(|error| {
                ApiError::invalid(
                    &rt.group_resource(),
                    name,
                    format!("cannot compile rule: {error}"),
                )
            })?;
            for (path, message) in violations {
                let field = if path.is_empty() {
                    base.clone()
                } else {
                    format!("{base}.{path}")
                };
                causes.push(Cause {
                    reason: "FieldValueForbidden",
                    field,
                    message,
                });
            }
        }
    } else if let Some(schema) = &rt.schema {
        let mut body = object.clone();
        if let Some(map) = body.as_object_mut() {
            for server_checked in ["metadata", "apiVersion", "kind"] {
                map.remove(server_checked);
            }
        }
        check(schema, &body, "", &mut causes);
        check_rules(schema, object, "", &mut causes);
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(rt, name, causes))
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    let mut push = |reason, message: String| {
        causes.push(Cause {
            reason,
            field: path.to_owned(),
            message,
        });
    };
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let expected = schema.get("type").and_then(Value::as_str);
    let actual = type_name(value);
    let fits = match expected {
        None => true,
        _ if int_or_string => matches!(actual, "integer" | "string"),
        Some("number") => matches!(actual, "number" | "integer"),
        Some(t) => t == actual,
    };
    if !fits {
        push(
            "FieldValueTypeInvalid",
            format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {}: \"{actual}\"",
                expected.unwrap_or_default()
            ),
        );
        return;
    }
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        push(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        );
    }
    match value {
        Value::String(text) => {
            let length = text.chars().count() as f64;
            if bound("maxLength").is_some_and(|max| length > max) {
                push(
                    "FieldValueTooLong",
                    format!(
                        "Too long: may not be longer than {}",
                        bound("maxLength").unwrap_or_default()
                    ),
                );
            }
            if bound("minLength").is_some_and(|min| length < min) {
                push(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {value}: {path} in body should be at least {} chars long",
                        bound("minLength").unwrap_or_default()
                    ),
                );
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && !matches_pattern(pattern, text)
            {
                push(
                    "FieldValueInvalid",
                    format!("Invalid value: {value}: {path} in body should match '{pattern}'"),
                );
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or_default();
            if let Some(min) = bound("minimum").filter(|min| n < *min) {
                push(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {value}: {path} in body should be greater than or equal to {min}"
                    ),
                );
            }
            if let Some(max) = bound("maximum").filter(|max| n > *max) {
                push(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {value}: {path} in body should be less than or equal to {max}"
                    ),
                );
            }
        }
        Value::Array(items) => {
            if let Some(max) = bound("maxItems").filter(|max| items.len() as f64 > *max) {
                push(
                    "FieldValueTooMany",
                    format!("Too many: {}: must have at most {max} items", items.len()),
                );
            }
            if let Some(min) = bound("minItems").filter(|min| (items.len() as f64) < *min) {
                push(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                );
            }
            check_list_type(schema, items, path, causes);
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{index}]"), causes);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(field) = required.as_str()
                    && map.get(field).is_none_or(Value::is_null)
                {
                    causes.push(Cause {
                        reason: "FieldValueRequired",
                        field: child(path, field),
                        message: "Required value".into(),
                    });
                }
            }
            if let Some(max) = bound("maxProperties").filter(|max| map.len() as f64 > *max) {
                causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_owned(),
                    message: format!("Too many: {}: must have at most {max} items", map.len()),
                });
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, field_value) in map {
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(field_schema), _) => {
                        check(field_schema, field_value, &child(path, key), causes)
                    }
                    (None, Some(value_schema)) => {
                        check(value_schema, field_value, &format!("{path}[{key}]"), causes)
                    }
                    (None, None) => {}
                }
            }
        }
        _ => {}
    }
}

fn check_list_type(schema: &Value, items: &[Value], path: &str, causes: &mut Vec<Cause>) {
    let keys: Vec<&str> = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Vec::new(),
        Some("map") => schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default(),
        _ => return,
    };
    let mut seen = HashSet::new();
    for (index, item) in items.iter().enumerate() {
        let identity = if keys.is_empty() {
            item.clone()
        } else {
            Value::Object(
                keys.iter()
                    .map(|k| {
                        (
                            (*k).to_owned(),
                            item.get(*k).cloned().unwrap_or(Value::Null),
                        )
                    })
                    .collect(),
            )
        };
        if !seen.insert(identity.to_string()) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{path}[{index}]"),
                message: format!("Duplicate value: {identity}"),
            });
        }
    }
}

/// Runs the `x-kubernetes-validations` rules of every schema node present in `value`.
fn check_rules(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
        if text.contains("oldSelf") {
            continue;
        }
        let Some(expr) = parsed(text) else { continue };
        let message = rule
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("failed rule: {text}"), str::to_owned);
        let failed = match eval_rule(&expr, value) {
            Ok(true) | Err(EvalError::Unsupported(_)) => None,
            Ok(false) => Some(message),
            Err(EvalError::Runtime(error)) => Some(error),
        };
        if let Some(message) = failed {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: if path.is_empty() {
                    "<nil>".into()
                } else {
                    path.to_owned()
                },
                message: format!("Invalid value: \"{}\": {message}", type_name(value)),
            });
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, field_value) in map {
                if let Some(field_schema) = properties.and_then(|p| p.get(key)) {
                    check_rules(field_schema, field_value, &child(path, key), causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check_rules(item_schema, item, &format!("{path}[{index}]"), causes);
                }
            }
        }
        _ => {}
    }
}

/// Whether `text` matches the schema `pattern` (compiled once per pattern).
fn matches_pattern(pattern: &str, text: &str) -> bool {
    static COMPILED: LazyLock<Mutex<HashMap<String, Option<regex::Regex>>>> =
        LazyLock::new(Mutex::default);
    let mut compiled = COMPILED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    compiled
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .as_ref()
        .is_none_or(|re| re.is_match(text))
}

/// A rule's parsed expression (parsed once per rule text); `None` when it does not parse.
fn parsed(rule: &str) -> Option<Expr> {
    static PARSED: LazyLock<Mutex<HashMap<String, Option<Expr>>>> = LazyLock::new(Mutex::default);
    let mut parsed = PARSED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    parsed
        .entry(rule.to_owned())
        .or_insert_with(|| parse(rule).ok())
        .clone()
}
