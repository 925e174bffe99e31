//! The non-apply patch formats: JSON merge patch, strategic merge patch and JSON patch.

use serde_json::{Map, Value};

/// Applies an RFC 7386 JSON merge patch: objects merge, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some((target_map, patch_map)) = object_maps(target, patch) else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A JSON object's fields.
type Fields = Map<String, Value>;

/// The maps a merge of `patch` into `target` works on (a `target` that is not an object
/// becomes an empty one); `None` when `patch` is not an object, after it replaced `target`.
fn object_maps<'t, 'p>(
    target: &'t mut Value,
    patch: &'p Value,
) -> Option<(&'t mut Fields, &'p Fields)> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return None;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return None;
    };
    Some((target_map, patch_map))
}

/// The merge key of well-known lists of objects in built-in types (strategic merge patch).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "volumeMounts"
        | "containerStatuses"
        | "initContainerStatuses"
        | "imagePullSecrets" => Some("name"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Applies a strategic merge patch: like a merge patch, except that the known keyed lists
/// of built-in types merge element-wise by their merge key, and `$patch: delete` on such an
/// element removes it.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Some((target_map, patch_map)) = object_maps(target, patch) else {
        return;
    };
    for (key, value) in patch_map {
        if key.starts_with("$") {
            continue;
        }
        match (value, merge_key(key)) {
            (Value::Null, _) => {
                target_map.remove(key);
            }
            (Value::Array(items), Some(merge_key)) => {
                let slot = target_map
                    .entry(key.clone())
                    .or_insert(Value::Array(Vec::new()));
                merge_keyed_list(slot, items, merge_key);
            }
            (value, _) => {
                strategic_merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

fn merge_keyed_list(target: &mut Value, items: &[Value], merge_key: &str) {
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(existing) = target else {
        return;
    };
    for item in items {
        let key = item.get(merge_key);
        let position = existing
            .iter()
            .position(|e| key.is_some() && e.get(merge_key) == key);
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (Some(i), false) => strategic_merge_patch(&mut existing[i], item),
            (None, true) => {}
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                strategic_merge_patch(&mut fresh, item);
                existing.push(fresh);
            }
        }
    }
}

/// Applies an RFC 6902 JSON patch (add, remove, replace, move, copy, test); the error names
/// the failing operation.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let operations = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    let mut working = target.clone();
    for (index, operation) in operations.iter().enumerate() {
        apply_operation(&mut working, operation)
            .map_err(|e| format!("JSON patch operation {index}: {e}"))?;
    }
    *target = working;
    Ok(())
}

fn apply_operation(doc: &mut Value, operation: &Value) -> Result<(), String> {
    let field = |name: &str| {
        operation
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("missing string field {name:?}"))
    };
    let op = field("op")?;
    let path = field("path")?;
    let value = || {
        operation
            .get("value")
            .cloned()
            .ok_or_else(|| format!("{op} needs a \"value\""))
    };
    match op {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            remove(doc, path)?;
            add(doc, path, value()?)
        }
        "move" => {
            let moved = remove(doc, field("from")?)?;
            add(doc, path, moved)
        }
        "copy" => {
            let copied = doc
                .pointer(field("from")?)
                .cloned()
                .ok_or_else(|| format!("\"from\" path {:?} does not exist", field("from")))?;
            add(doc, path, copied)
        }
        "test" => match doc.pointer(path) {
            Some(actual) if *actual == value()? => Ok(()),
            _ => Err(format!("test failed at {path:?}")),
        },
        other => Err(format!("unknown op {other:?}")),
    }
}

fn split_pointer(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("path {path:?} is not a JSON pointer"))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) if last == "-" => {
            items.push(value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let index: usize = last
                .parse()
                .map_err(|_| format!("bad array index in {path:?}"))?;
            if index > items.len() {
                return Err(format!("array index out of range in {path:?}"));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("parent of {path:?} does not exist")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    let missing = || format!("path {path:?} does not exist");
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&last).ok_or_else(missing),
        Some(Value::Array(items)) => {
            let index: usize = last.parse().map_err(|_| missing())?;
            (index < items.len())
                .then(|| items.remove(index))
                .ok_or_else(missing)
        }
        _ => Err(missing()),
    }
}
