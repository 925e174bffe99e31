//! A simplified server-side apply.
//!
//! Each field manager owns the set of leaf fields it applied last (lists are atomic leaves),
//! recorded in `metadata.managedFields` in FieldsV1 form. An apply deep-merges the applied
//! object into the live one, removes fields the same manager applied before and now omits
//! (unless another applier owns them), and reports a conflict when it would change a value
//! another applier owns (unless forced, which takes the field over). Fields written by
//! updates (PUT, merge patch) are not tracked.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path: the object keys from the root to a leaf.
pub type FieldPath = Vec<String>;

/// Identity and server-managed fields that no manager owns.
const UNOWNED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The part of an applied object an apply to `subresource` may change.
pub fn applicable_part(
    applied: &Value,
    status_subresource: bool,
    subresource: Option<&str>,
) -> Value {
    let mut part = Map::new();
    if let Value::Object(map) = applied {
        for (key, value) in map {
            let keep = match (subresource, key.as_str()) {
                (_, "apiVersion" | "kind") => false,
                (Some(_), "status") => true,
                (Some(_), _) => false,
                (None, "status") => !status_subresource,
                (None, _) => true,
            };
            if keep {
                part.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(Value::Object(meta)) = part.get_mut("metadata") {
        meta.retain(|k, _| !UNOWNED_METADATA.contains(&k.as_str()));
        if meta.is_empty() {
            part.remove("metadata");
        }
    }
    Value::Object(part)
}

/// The leaf paths of an applied object.
pub fn leaf_paths(value: &Value) -> BTreeSet<FieldPath> {
    let mut paths = BTreeSet::new();
    collect_leaves(value, &mut Vec::new(), &mut paths);
    paths
}

fn collect_leaves(value: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                prefix.push(key.clone());
                collect_leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ if !prefix.is_empty() => {
            out.insert(prefix.clone());
        }
        _ => {}
    }
}

/// FieldsV1 JSON (`{"f:spec":{"f:a":{}}}`) of a set of leaf paths.
pub fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for key in path {
            let entry = node
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else {
                break;
            };
            node = next;
        }
    }
    Value::Object(root)
}

/// The leaf paths recorded in FieldsV1 JSON.
pub fn from_fields_v1(fields: &Value) -> BTreeSet<FieldPath> {
    fn walk(node: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let children: Vec<_> = node
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| k.strip_prefix("f:").map(|k| (k, v)))
            .collect();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (key, child) in children {
            prefix.push(key.to_owned());
            walk(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

/// One `managedFields` entry of an applier.
#[derive(Debug, Clone)]
struct Ownership {
    manager: String,
    subresource: Option<String>,
    paths: BTreeSet<FieldPath>,
}

fn read_ownerships(object: &Value) -> (Vec<Ownership>, Vec<Value>) {
    let mut appliers = Vec::new();
    let mut others = Vec::new();
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for entry in entries {
        if entry.get("operation").and_then(Value::as_str) == Some("Apply") {
            appliers.push(Ownership {
                manager: entry["manager"].as_str().unwrap_or_default().to_owned(),
                subresource: entry
                    .get("subresource")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                paths: from_fields_v1(entry.get("fieldsV1").unwrap_or(&Value::Null)),
            });
        } else {
            others.push(entry);
        }
    }
    (appliers, others)
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldConflict {
    /// The owning manager.
    pub manager: String,
    /// Dotted field path.
    pub field: String,
}

/// What one apply request asks for.
pub struct ApplyRequest<'a> {
    /// The applicable part of the applied object (see [`applicable_part`]).
    pub applied: &'a Value,
    /// `fieldManager`.
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// Subresource the apply targets.
    pub subresource: Option<&'a str>,
    /// apiVersion recorded in the managedFields entry.
    pub api_version: &'a str,
    /// Timestamp recorded in the managedFields entry.
    pub time: &'a str,
}

/// Applies to `live` in place; on conflict leaves `live` untouched and returns them all.
pub fn apply(live: &mut Value, request: &ApplyRequest<'_>) -> Result<(), Vec<FieldConflict>> {
    let new_paths = leaf_paths(request.applied);
    let (mut appliers, others) = read_ownerships(live);
    let same_scope = |o: &Ownership| o.subresource.as_deref() == request.subresource;

    let mut conflicts = Vec::new();
    for owner in appliers
        .iter_mut()
        .filter(|o| o.manager != request.manager && same_scope(o))
    {
        let contested: Vec<FieldPath> = owner
            .paths
            .intersection(&new_paths)
            .filter(|p| value_at(live, p) != value_at(request.applied, p))
            .cloned()
            .collect();
        for path in contested {
            if request.force {
                owner.paths.remove(&path);
            } else {
                conflicts.push(FieldConflict {
                    manager: owner.manager.clone(),
                    field: path.join("."),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }

    let owned_by_others: BTreeSet<FieldPath> = appliers
        .iter()
        .filter(|o| o.manager != request.manager)
        .flat_map(|o| o.paths.iter().cloned())
        .collect();
    let previous = appliers
        .iter()
        .find(|o| o.manager == request.manager && same_scope(o))
        .map(|o| o.paths.clone())
        .unwrap_or_default();
    let still_owned: BTreeSet<FieldPath> = new_paths.union(&owned_by_others).cloned().collect();
    for path in previous.difference(&still_owned) {
        remove_path(live, path, &still_owned);
    }
    deep_merge(live, request.applied);

    appliers.retain(|o| !(o.manager == request.manager && same_scope(o)));
    appliers.push(Ownership {
        manager: request.manager.to_owned(),
        subresource: request.subresource.map(str::to_owned),
        paths: new_paths,
    });
    write_ownerships(live, &appliers, others, request);
    Ok(())
}

fn write_ownerships(
    live: &mut Value,
    appliers: &[Ownership],
    others: Vec<Value>,
    request: &ApplyRequest<'_>,
) {
    let mut entries = others;
    for owner in appliers.iter().filter(|o| !o.paths.is_empty()) {
        let mut entry = json!({
            "manager": owner.manager,
            "operation": "Apply",
            "apiVersion": request.api_version,
            "time": request.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&owner.paths),
        });
        if let Some(sub) = &owner.subresource {
            entry["subresource"] = Value::String(sub.clone());
        }
        entries.push(entry);
    }
    if let Some(meta) = live.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

fn value_at<'a>(value: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// Removes a leaf and then every ancestor left empty that no remaining path goes through.
fn remove_path(live: &mut Value, path: &FieldPath, still_owned: &BTreeSet<FieldPath>) {
    for depth in (1..=path.len()).rev() {
        let prefix = &path[..depth];
        let (parent_path, key) = prefix.split_at(depth - 1);
        let Some(parent) = parent_path
            .iter()
            .try_fold(&mut *live, |v, k| v.get_mut(k))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        let is_leaf = depth == path.len();
        let empty_and_unowned = parent.get(&key[0]).is_some_and(|v| {
            v.as_object().is_some_and(Map::is_empty)
                && !still_owned.iter().any(|p| p.starts_with(prefix))
        });
        if is_leaf || empty_and_unowned {
            parent.remove(&key[0]);
        } else {
            return;
        }
    }
}

/// Merges `applied` into `live`: objects key by key, anything else replaced.
pub fn deep_merge(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(live_map), Value::Object(applied_map)) => {
            for (key, value) in applied_map {
                match live_map.get_mut(key) {
                    Some(existing) => deep_merge(existing, value),
                    None => {
                        live_map.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (live, applied) => *live = applied.clone(),
    }
}
