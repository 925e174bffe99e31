//! The write verbs with the API server's semantics: create, update, patch (merge,
//! strategic, JSON, apply), delete with preconditions, graceful Pod deletion, finalizers
//! and ownerReference garbage collection.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::{ApplyRequest, applicable_part, apply};
use super::errors::ApiError;
use super::objects::{
    has_finalizers, is_owned_by, meta_str, metadata_mut, new_uid, now_rfc3339, random_suffix,
    resource_version_of, rfc3339_in, spec_part, validate,
};
use super::patch::{json_patch, merge_patch, strategic_merge_patch};
use super::resources::ResourceType;
use super::store::{ObjectKey, Store};

/// Server-managed metadata a client cannot change with an update or patch.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
];

/// The patch formats, by request content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/json-patch+json`
    Json,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
}

impl PatchKind {
    /// The patch kind of a `Content-Type`.
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/json-patch+json" => Ok(Self::Json),
            "application/apply-patch+yaml" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
            ))),
        }
    }
}

/// Where a write goes.
#[derive(Debug, Clone)]
pub struct Address<'a> {
    /// The object's type.
    pub rt: &'a ResourceType,
    /// Namespace; empty for cluster-scoped types.
    pub namespace: &'a str,
    /// Object name (empty for a create).
    pub name: &'a str,
    /// `status`, or `None` for the main resource.
    pub subresource: Option<&'a str>,
}

impl Address<'_> {
    fn key(&self) -> ObjectKey {
        (self.namespace.to_owned(), self.name.to_owned())
    }

    fn group_resource(&self) -> String {
        self.rt.group_resource()
    }

    fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.group_resource(), self.name)
    }
}

/// Checks that the type has the addressed subresource.
pub fn check_subresource(rt: &ResourceType, subresource: Option<&str>) -> Result<(), ApiError> {
    match subresource {
        None => Ok(()),
        Some("status") if rt.status_subresource => Ok(()),
        Some("binding") if is_pods(rt) => Ok(()),
        Some(other) => Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({}/{other})",
                rt.group_resource()
            ),
        )),
    }
}

/// POST: creates an object (name from `metadata.name` or `generateName`).
pub fn create(store: &mut Store, addr: &Address<'_>, body: Value) -> Result<Arc<Value>, ApiError> {
    if addr.subresource.is_some() {
        return Err(ApiError::method_not_allowed(format!(
            "create is not supported on {}/{}",
            addr.group_resource(),
            addr.subresource.unwrap_or_default()
        )));
    }
    let mut object = check_body(addr, body)?;
    if resource_version_of(&object).is_some() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let meta = metadata_mut(&mut object);
    meta.remove("managedFields");
    if meta_name(meta).is_empty() {
        let prefix = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &addr.group_resource(),
                "",
                format!(
                    "{} is invalid: metadata.name: Required value: name or generateName is required",
                    addr.rt.kind
                ),
            ));
        }
        let name = format!("{prefix}{}", random_suffix());
        meta.insert("name".into(), name.into());
    }
    insert_new(store, addr.rt, addr.namespace, object)
}

fn meta_name(meta: &serde_json::Map<String, Value>) -> &str {
    meta.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// Stores a new object: fills the server-managed metadata and the initial status.
fn insert_new(
    store: &mut Store,
    rt: &ResourceType,
    namespace: &str,
    mut object: Value,
) -> Result<Arc<Value>, ApiError> {
    let name = meta_str(&object, "name").unwrap_or_default().to_owned();
    let key = (namespace.to_owned(), name.clone());
    if store.get(rt, &key).is_some() {
        return Err(ApiError::already_exists(&rt.group_resource(), &name));
    }
    object["apiVersion"] = rt.api_version().into();
    object["kind"] = rt.kind.clone().into();
    let meta = metadata_mut(&mut object);
    if rt.namespaced {
        meta.insert("namespace".into(), namespace.into());
    }
    meta.insert("uid".into(), new_uid().into());
    meta.insert("creationTimestamp".into(), now_rfc3339().into());
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    if rt.tracks_generation {
        meta.insert("generation".into(), 1.into());
    } else {
        meta.remove("generation");
    }
    initial_status(rt, &mut object);
    validate(rt, &object)?;
    if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
        let declared = ResourceType::from_crd(&object).ok_or_else(|| {
            ApiError::invalid(
                &rt.group_resource(),
                &name,
                "spec needs group, names.plural, names.kind and at least one version",
            )
        })?;
        store.register(declared);
    }
    Ok(store.put(rt, key, object))
}

fn initial_status(rt: &ResourceType, object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            map.insert("status".into(), json!({ "phase": "Pending" }));
        }
        ("", "namespaces") => {
            map.insert("status".into(), json!({ "phase": "Active" }));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let names = map.get("spec").and_then(|s| s.get("names")).cloned();
            let condition = |kind: &str| json!({ "type": kind, "status": "True", "reason": kind, "lastTransitionTime": now_rfc3339() });
            map.insert(
                "status".into(),
                json!({
                    "acceptedNames": names,
                    "conditions": [condition("NamesAccepted"), condition("Established")],
                }),
            );
        }
        _ if rt.custom && rt.status_subresource => {
            map.remove("status");
        }
        _ => {}
    }
}

/// Checks a request body against the address: a JSON object of the right kind, whose
/// namespace (if given) is the URL's.
fn check_body(addr: &Address<'_>, mut body: Value) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != addr.rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the body is a {kind}, but the URL addresses {}",
            addr.group_resource()
        )));
    }
    if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
        && api_version != addr.rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "apiVersion {api_version:?} does not match the URL's {:?}",
            addr.rt.api_version()
        )));
    }
    let meta = metadata_mut(&mut body);
    let body_namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if addr.rt.namespaced {
        if !body_namespace.is_empty() && body_namespace != addr.namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta.insert("namespace".into(), addr.namespace.into());
    } else {
        meta.remove("namespace");
    }
    let body_name = meta_name(meta);
    if !addr.name.is_empty() && !body_name.is_empty() && body_name != addr.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            addr.name
        )));
    }
    if !addr.name.is_empty() {
        meta.insert("name".into(), addr.name.into());
    }
    Ok(body)
}

/// PUT: replaces an object (or its status), with `metadata.resourceVersion` as precondition.
/// A missing object is a 404, or created where the resource allows it ([`create_on_update`]).
pub fn update(store: &mut Store, addr: &Address<'_>, body: Value) -> Result<Arc<Value>, ApiError> {
    let Some(current) = store.get(addr.rt, &addr.key()) else {
        return create_on_update(store, addr, body);
    };
    let body = check_body(addr, body)?;
    check_resource_version(addr, &current, &body)?;
    let next = settle(addr, &current, body, false);
    commit(store, addr, &current, next)
}

/// A PUT to a name that does not exist, as upstream's `Store.Update` answers it: 404 unless
/// the resource creates on update (Leases); then the object is created, whatever
/// `resourceVersion` the body carries, but a body naming a `uid` is refused with 409 (the uid
/// is a precondition no missing object meets).
fn create_on_update(
    store: &mut Store,
    addr: &Address<'_>,
    body: Value,
) -> Result<Arc<Value>, ApiError> {
    if !addr.rt.creates_on_update || addr.subresource.is_some() {
        return Err(addr.not_found());
    }
    let mut body = check_body(addr, body)?;
    if let Some(uid) = meta_str(&body, "uid").filter(|uid| !uid.is_empty()) {
        return Err(ApiError::conflict(
            &addr.group_resource(),
            addr.name,
            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: "),
        ));
    }
    metadata_mut(&mut body).remove("resourceVersion");
    create(store, addr, body)
}

/// PATCH: applies a patch of the given kind. Server-side apply creates a missing object.
pub fn patch(
    store: &mut Store,
    addr: &Address<'_>,
    kind: PatchKind,
    body: &[u8],
    field_manager: Option<&str>,
    force: bool,
) -> Result<Arc<Value>, ApiError> {
    if kind == PatchKind::Apply {
        return server_side_apply(store, addr, body, field_manager, force);
    }
    if kind == PatchKind::Strategic && addr.rt.custom {
        return Err(ApiError::unsupported_media_type(format!(
            "strategic merge patch is not supported for custom resource {}; use a merge or apply patch",
            addr.group_resource()
        )));
    }
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
    let current = store
        .get(addr.rt, &addr.key())
        .ok_or_else(|| addr.not_found())?;
    let mut patched = (*current).clone();
    match kind {
        PatchKind::Merge => merge_patch(&mut patched, &patch),
        PatchKind::Strategic => strategic_merge_patch(&mut patched, &patch),
        PatchKind::Json => json_patch(&mut patched, &patch).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("{} \"{}\": {e}", addr.group_resource(), addr.name),
            )
        })?,
        PatchKind::Apply => {}
    }
    let patched = check_body(addr, patched)?;
    check_resource_version(addr, &current, &patched)?;
    if meta_str(&patched, "uid") != meta_str(&current, "uid") {
        return Err(ApiError::conflict(
            &addr.group_resource(),
            addr.name,
            "Precondition failed: the uid in the patch does not match the object's",
        ));
    }
    let next = settle(addr, &current, patched, false);
    commit(store, addr, &current, next)
}

fn server_side_apply(
    store: &mut Store,
    addr: &Address<'_>,
    body: &[u8],
    field_manager: Option<&str>,
    force: bool,
) -> Result<Arc<Value>, ApiError> {
    let manager = field_manager.filter(|m| !m.is_empty()).ok_or_else(|| {
        ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
    })?;
    let applied: Value = serde_yaml_ng::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the apply patch is not valid YAML/JSON: {e}"))
    })?;
    for field in ["apiVersion", "kind"] {
        if applied
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(format!(
                "an apply patch needs {field} (applying {} \"{}\")",
                addr.group_resource(),
                addr.name
            )));
        }
    }
    let applied = check_body(addr, applied)?;
    let time = now_rfc3339();
    let api_version = addr.rt.api_version();
    let part = applicable_part(&applied, addr.rt.status_subresource, addr.subresource);
    let request = ApplyRequest {
        applied: &part,
        manager,
        force,
        subresource: addr.subresource,
        api_version: &api_version,
        time: &time,
    };
    let conflict = |conflicts: Vec<super::apply::FieldConflict>| {
        let list: Vec<String> = conflicts
            .iter()
            .map(|c| format!("conflict with {:?}: .{}", c.manager, c.field))
            .collect();
        ApiError::conflict(
            &addr.group_resource(),
            addr.name,
            &format!(
                "Apply failed with {} conflict(s): {}",
                list.len(),
                list.join(", ")
            ),
        )
    };
    let Some(current) = store.get(addr.rt, &addr.key()) else {
        if addr.subresource.is_some() {
            return Err(addr.not_found());
        }
        if resource_version_of(&applied).is_some() {
            return Err(addr.not_found());
        }
        let mut object = json!({ "metadata": { "name": addr.name } });
        apply(&mut object, &request).map_err(conflict)?;
        return insert_new(store, addr.rt, addr.namespace, object);
    };
    check_resource_version(addr, &current, &applied)?;
    let mut live = (*current).clone();
    apply(&mut live, &request).map_err(conflict)?;
    let next = settle(addr, &current, live, true);
    commit(store, addr, &current, next)
}

fn check_resource_version(
    addr: &Address<'_>,
    current: &Value,
    body: &Value,
) -> Result<(), ApiError> {
    match resource_version_of(body) {
        Some(rv) if Some(rv) != resource_version_of(current) => {
            Err(ApiError::stale(&addr.group_resource(), addr.name))
        }
        _ => Ok(()),
    }
}

/// Combines the current object and a client's new version the way the addressed endpoint
/// allows: a status write changes only `.status`; a main write keeps `.status` (when the
/// type has a status subresource) and the server-managed metadata, and bumps
/// `metadata.generation` when anything outside metadata and status changed.
fn settle(
    addr: &Address<'_>,
    current: &Value,
    mut next: Value,
    managed_fields_from_next: bool,
) -> Value {
    let managed = if managed_fields_from_next {
        next.pointer("/metadata/managedFields").cloned()
    } else {
        current.pointer("/metadata/managedFields").cloned()
    };
    let mut result = if addr.subresource.is_some() {
        let mut result = current.clone();
        match next.get("status") {
            Some(status) => result["status"] = status.clone(),
            None => {
                if let Some(map) = result.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        result
    } else {
        let meta = metadata_mut(&mut next);
        for field in SERVER_METADATA {
            match current.get("metadata").and_then(|m| m.get(*field)) {
                Some(value) => meta.insert((*field).into(), value.clone()),
                None => meta.remove(*field),
            };
        }
        if addr.rt.status_subresource
            && let Some(map) = next.as_object_mut()
        {
            match current.get("status") {
                Some(status) => map.insert("status".into(), status.clone()),
                None => map.remove("status"),
            };
        }
        if addr.rt.tracks_generation && spec_part(&next) != spec_part(current) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(&mut next).insert("generation".into(), (generation + 1).into());
        }
        next
    };
    let meta = metadata_mut(&mut result);
    match managed {
        Some(managed) => meta.insert("managedFields".into(), managed),
        None => meta.remove("managedFields"),
    };
    result
}

/// Stores a settled write: nothing happens for a no-op, a deleting object whose last
/// finalizer went away is removed.
fn commit(
    store: &mut Store,
    addr: &Address<'_>,
    current: &Arc<Value>,
    mut next: Value,
) -> Result<Arc<Value>, ApiError> {
    validate(addr.rt, &next)?;
    metadata_mut(&mut next).insert(
        "resourceVersion".into(),
        resource_version_of(current).unwrap_or_default().into(),
    );
    if without_timestamps(&next) == without_timestamps(current) {
        return Ok(current.clone());
    }
    let deleting = next.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && !has_finalizers(&next) && !awaits_kubelet(addr.rt, &next) {
        let last = store.remove(addr.rt, &addr.key())?;
        collect_garbage(store, &last, false);
        return Ok(last);
    }
    Ok(store.put(addr.rt, addr.key(), next))
}

fn without_timestamps(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(entries) = copy
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            entry.remove("time");
        }
    }
    copy
}

fn is_pods(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

/// POST pods/{name}/binding: assigns the Pod to a node (what the scheduler does).
pub fn bind(store: &mut Store, addr: &Address<'_>, binding: &Value) -> Result<Value, ApiError> {
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("a Binding needs target.name (the node)"))?;
    let current = store
        .get(addr.rt, &addr.key())
        .ok_or_else(|| addr.not_found())?;
    if let Some(assigned) = current.pointer("/spec/nodeName").and_then(Value::as_str)
        && !assigned.is_empty()
    {
        return Err(ApiError::conflict(
            &addr.group_resource(),
            addr.name,
            &format!("pod {} is already assigned to node {assigned:?}", addr.name),
        ));
    }
    let mut bound = (*current).clone();
    bound["spec"]["nodeName"] = node.into();
    let scheduled =
        json!({ "type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339() });
    strategic_merge_patch(
        &mut bound,
        &json!({ "status": { "conditions": [scheduled] } }),
    );
    store.put(addr.rt, addr.key(), bound);
    Ok(
        json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 }),
    )
}

/// A bound Pod being deleted gracefully stays until its kubelet confirms (grace 0 delete).
fn awaits_kubelet(rt: &ResourceType, object: &Value) -> bool {
    is_pods(rt)
        && object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|g| g > 0)
}

/// The parts of `DeleteOptions` the fake honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`: `Orphan`, `Background` or `Foreground` (handled as Background).
    pub propagation_policy: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (empty body = defaults) plus query overrides.
    pub fn from_body(body: &[u8]) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("DeleteOptions is not valid JSON: {e}")))?;
        let text = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Ok(Self {
            grace_period_seconds: value.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation_policy: text("/propagationPolicy"),
            precondition_resource_version: text("/preconditions/resourceVersion"),
            precondition_uid: text("/preconditions/uid"),
        })
    }
}

/// The result of a DELETE.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// Removed; the object's last state.
    Gone(Arc<Value>),
    /// Marked for deletion (finalizers pending, or a bound Pod terminating gracefully).
    Pending(Arc<Value>),
}

/// DELETE of one object.
pub fn delete(
    store: &mut Store,
    addr: &Address<'_>,
    options: &DeleteOptions,
) -> Result<Deleted, ApiError> {
    if addr.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not supported on a subresource",
        ));
    }
    let current = store
        .get(addr.rt, &addr.key())
        .ok_or_else(|| addr.not_found())?;
    let precondition_failed = |what: &str, wanted: &str, actual: Option<&str>| {
        ApiError::conflict(
            &addr.group_resource(),
            addr.name,
            &format!(
                "Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {}",
                actual.unwrap_or_default()
            ),
        )
    };
    if let Some(rv) = &options.precondition_resource_version
        && Some(rv.as_str()) != resource_version_of(&current)
    {
        return Err(precondition_failed(
            "ResourceVersion",
            rv,
            resource_version_of(&current),
        ));
    }
    if let Some(uid) = &options.precondition_uid
        && Some(uid.as_str()) != meta_str(&current, "uid")
    {
        return Err(precondition_failed("UID", uid, meta_str(&current, "uid")));
    }
    let grace = graceful_pod_deletion(addr.rt, &current, options.grace_period_seconds);
    if has_finalizers(&current) || grace.is_some() {
        let already = current.pointer("/metadata/deletionTimestamp").is_some();
        if already && grace != Some(0) {
            return Ok(Deleted::Pending(current));
        }
        let mut marked = (*current).clone();
        let meta = metadata_mut(&mut marked);
        let grace = grace.unwrap_or(0);
        if !already {
            meta.insert("deletionTimestamp".into(), rfc3339_in(grace).into());
            if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
                meta.insert("generation".into(), (generation + 1).into());
            }
        }
        meta.insert("deletionGracePeriodSeconds".into(), grace.into());
        let stored = commit(store, addr, &current, marked)?;
        return Ok(if store.get(addr.rt, &addr.key()).is_some() {
            Deleted::Pending(stored)
        } else {
            Deleted::Gone(stored)
        });
    }
    let last = store.remove(addr.rt, &addr.key())?;
    let orphan = options.propagation_policy.as_deref() == Some("Orphan");
    collect_garbage(store, &last, orphan);
    Ok(Deleted::Gone(last))
}

/// The grace period of a Pod deletion that must wait for the kubelet: the Pod is bound to
/// a node (`spec.nodeName`) and the grace period is not zero. `Some(0)` for a bound Pod
/// deleted with grace 0, `None` for anything deleted immediately.
fn graceful_pod_deletion(rt: &ResourceType, pod: &Value, requested: Option<i64>) -> Option<i64> {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if !(is_pods(rt) && bound) {
        return None;
    }
    let default = pod
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(30);
    Some(requested.unwrap_or(default).max(0))
}

/// After `owner` is gone: deletes its dependents (background propagation), or strips the
/// owner reference from them (`orphan`); deleting a Namespace deletes everything in it.
fn collect_garbage(store: &mut Store, owner: &Value, orphan: bool) {
    let uid = meta_str(owner, "uid").unwrap_or_default().to_owned();
    let deleted_namespace = (owner.get("kind").and_then(Value::as_str) == Some("Namespace"))
        .then(|| meta_str(owner, "name").unwrap_or_default().to_owned());
    let dependents = store.find_all(|(ns, _), object| {
        is_owned_by(object, &uid)
            || deleted_namespace
                .as_deref()
                .is_some_and(|d| d == ns && !ns.is_empty())
    });
    for (rt, key) in dependents {
        let Some(current) = store.get(&rt, &key) else {
            continue;
        };
        let addr = Address {
            rt: &rt,
            namespace: &key.0,
            name: &key.1,
            subresource: None,
        };
        if orphan && deleted_namespace.is_none() {
            let mut stripped = (*current).clone();
            if let Some(refs) = stripped
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
            }
            // The dependent exists and the write only drops a reference: it cannot fail
            // validation that the stored object passed.
            let _ = commit(store, &addr, &current, stripped);
        } else {
            // A dependent with finalizers stays pending; one gone meanwhile is fine.
            let _ = delete(store, &addr, &DeleteOptions::default());
        }
    }
}
