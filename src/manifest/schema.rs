//! Checks a document against the CRD's OpenAPI schema, as the API server would: unknown
//! fields (a typo such as `dependOn`), types, required fields, enums, patterns, lengths
//! and ranges. Works on the flattened schema, so `#[serde(flatten)]` fields are covered.

use regex::Regex;
use serde_json::{Map, Value};

use super::path::FieldPath;
use crate::api::names::{DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN};

/// One schema violation: the field (e.g. `spec.tasks[write-test].dependOn`) and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Violation {
    /// The field.
    pub path: FieldPath,
    /// What is wrong.
    pub problem: String,
    /// Where to point in the document: the field, or its parent for a missing field.
    pub anchor: FieldPath,
}

/// Checks a whole object `value` against its `schema` (an OpenAPI v3 schema as JSON).
pub(super) fn check(value: &Value, schema: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    check_node(value, schema, &FieldPath::default(), &mut out);
    out
}

fn violation(path: &FieldPath, problem: impl Into<String>) -> Violation {
    Violation {
        path: path.clone(),
        problem: problem.into(),
        anchor: path.clone(),
    }
}

fn check_node(value: &Value, schema: &Value, path: &FieldPath, out: &mut Vec<Violation>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if value.is_null() {
        if !flag(schema, "nullable") && schema.contains_key("type") {
            out.push(violation(path, "must not be null"));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(value.is_string() || is_integer(value)) {
            out.push(violation(
                path,
                format!("expected an integer or a string, found {}", describe(value)),
            ));
        }
        return;
    }
    let expected = schema.get("type").and_then(Value::as_str);
    if let Some(expected) = expected
        && !has_type(value, expected)
    {
        let hint = match value {
            Value::Number(number) if expected == "string" => {
                format!(" (quote it: \"{number}\")")
            }
            _ => String::new(),
        };
        out.push(violation(
            path,
            format!(
                "expected {}, found {}{hint}",
                article(expected),
                describe(value)
            ),
        ));
        return;
    }
    check_enum(value, schema, path, out);
    match value {
        Value::String(text) => check_string(text, schema, path, out),
        Value::Number(_) => check_number(value, schema, path, out),
        Value::Array(items) => check_array(items, schema, path, out),
        Value::Object(map) => check_object(map, schema, path, out),
        Value::Bool(_) | Value::Null => {}
    }
}

fn flag(schema: &Map<String, Value>, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

fn article(type_name: &str) -> String {
    match type_name {
        "integer" | "object" | "array" => format!("an {type_name}"),
        _ => format!("a {type_name}"),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(flag) => format!("a boolean ({flag})"),
        Value::Number(number) => format!("a number ({number})"),
        Value::String(text) => format!("a string ({text:?})"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn check_enum(
    value: &Value,
    schema: &Map<String, Value>,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let choices: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push(violation(
            path,
            format!("{value} is not one of {}", choices.join(", ")),
        ));
    }
}

fn check_string(
    text: &str,
    schema: &Map<String, Value>,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    let length = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        out.push(violation(
            path,
            format!("is {length} characters long, the limit is {max}"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        out.push(violation(
            path,
            format!("must be at least {min} characters long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && let Ok(regex) = Regex::new(pattern)
        && !regex.is_match(text)
    {
        out.push(violation(path, pattern_problem(text, pattern)));
    }
}

/// Says what a pattern means when it is one of the API's name patterns.
fn pattern_problem(text: &str, pattern: &str) -> String {
    if pattern == DNS_LABEL_PATTERN {
        format!(
            "{text:?} is not a valid name: use lower-case letters, digits and '-', starting and ending with a letter or digit"
        )
    } else if pattern == DNS_SUBDOMAIN_PATTERN {
        format!(
            "{text:?} is not a valid object name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
        )
    } else {
        format!("{text:?} does not match the pattern {pattern}")
    }
}

fn check_number(
    value: &Value,
    schema: &Map<String, Value>,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    let Some(number) = value.as_f64() else {
        return;
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && number < min
    {
        out.push(violation(
            path,
            format!("{value} is below the minimum {min}"),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && number > max
    {
        out.push(violation(
            path,
            format!("{value} is above the maximum {max}"),
        ));
    }
}

fn check_array(
    items: &[Value],
    schema: &Map<String, Value>,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    let count = items.len() as u64;
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count > max
    {
        out.push(violation(
            path,
            format!("has {count} entries, the limit is {max}"),
        ));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && count < min
    {
        out.push(violation(path, format!("must have at least {min} entries")));
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            let name = item.get("name").and_then(Value::as_str);
            check_node(item, item_schema, &path.item(index, name), out);
        }
    }
}

fn check_object(
    map: &Map<String, Value>,
    schema: &Map<String, Value>,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                out.push(Violation {
                    path: path.key(key),
                    problem: "is required".into(),
                    anchor: path.clone(),
                });
            }
        }
    }
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    for (key, value) in map {
        let child_path = path.key(key);
        if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
            check_node(value, child_schema, &child_path, out);
        } else if let Some(child_schema @ Value::Object(_)) = additional {
            check_node(value, child_schema, &child_path, out);
        } else if !preserve && additional != Some(&Value::Bool(true)) {
            let known: Vec<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            out.push(violation(&child_path, unknown_field_problem(key, &known)));
        }
    }
}

fn unknown_field_problem(key: &str, known: &[&str]) -> String {
    let closest = known
        .iter()
        .map(|candidate| (edit_distance(key, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min();
    match closest {
        Some((_, candidate)) => format!("unknown field {key:?} (did you mean {candidate:?}?)"),
        None if known.is_empty() => format!("unknown field {key:?}"),
        None => format!("unknown field {key:?} (known fields: {})", known.join(", ")),
    }
}

/// Levenshtein distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "dependsOn": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "priority": {"type": "integer", "minimum": -10.0, "maximum": 10.0},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "phase": {"type": "string", "enum": ["A", "B"], "nullable": true},
                "port": {"x-kubernetes-int-or-string": true},
                "tasks": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}
                }}}
            }
        })
    }

    fn problems(value: Value) -> Vec<(String, String)> {
        let value = json!({ "spec": value });
        let schema = json!({"type": "object", "properties": {"spec": schema()}});
        check(&value, &schema)
            .into_iter()
            .map(|v| (v.path.to_string(), v.problem))
            .collect()
    }

    #[test]
    fn a_valid_value_has_no_violation() {
        let value = json!({"name": "abc", "dependsOn": ["x"], "priority": 3,
                           "labels": {"a": "b"}, "phase": null, "port": "http"});
        assert_eq!(problems(value), []);
    }

    #[test]
    fn an_unknown_field_is_reported_with_the_closest_known_name() {
        let found = problems(json!({"name": "abc", "dependOn": ["x"]}));
        assert_eq!(
            found,
            [(
                "spec.dependOn".to_owned(),
                "unknown field \"dependOn\" (did you mean \"dependsOn\"?)".to_owned()
            )]
        );
    }

    #[test]
    fn an_unknown_field_far_from_any_name_lists_the_known_fields() {
        let found = problems(json!({"name": "abc", "zzzzzz": 1}));
        assert!(
            found[0]
                .1
                .starts_with("unknown field \"zzzzzz\" (known fields: "),
            "{found:?}"
        );
    }

    #[test]
    fn map_values_are_checked_against_additional_properties() {
        let found = problems(json!({"name": "abc", "labels": {"a": 1}}));
        assert_eq!(found[0].0, "spec.labels.a");
    }

    #[test]
    fn a_wrong_type_names_expected_and_found() {
        let found = problems(json!({"name": "abc", "priority": "high"}));
        assert_eq!(found[0].1, "expected an integer, found a string (\"high\")");
    }

    #[test]
    fn a_missing_required_field_is_reported() {
        assert_eq!(
            problems(json!({}))[0],
            ("spec.name".to_owned(), "is required".to_owned())
        );
    }

    #[test]
    fn ranges_lengths_patterns_and_enums_are_enforced() {
        let found = problems(json!({"name": "ABCDEF", "priority": 11, "phase": "C",
                                    "dependsOn": ["a", "b", "c"]}));
        let mut paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "spec.dependsOn",
                "spec.name",
                "spec.name",
                "spec.phase",
                "spec.priority"
            ]
        );
    }

    #[test]
    fn list_entries_are_named_by_their_name_field() {
        let found =
            problems(json!({"name": "abc", "tasks": [{"name": "write", "x": 1}, {"y": 2}]}));
        let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(paths, ["spec.tasks[write].x", "spec.tasks[1].y"]);
    }

    #[test]
    fn int_or_string_rejects_other_types() {
        let found = problems(json!({"name": "abc", "port": true}));
        assert_eq!(found[0].0, "spec.port");
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("dependOn", "dependsOn"), 1);
        assert_eq!(edit_distance("prority", "priority"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn a_number_where_a_string_belongs_says_to_quote_it() {
        let schema = json!({"type": "object", "properties": {"cost": {"type": "string"}}});
        let found = check(&json!({"cost": 0.5}), &schema);
        assert_eq!(
            found[0].problem,
            "expected a string, found a number (0.5) (quote it: \"0.5\")"
        );
    }
}
