//! HTTP dispatch: turns a request into a verb on the store and the result into a response.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::discovery;
use super::errors::ApiError;
use super::faults::{Faults, RequestRecord, Verb};
use super::objects::meta_str;
use super::ops::{self, Address, DeleteOptions, Deleted, PatchKind};
use super::rbac;
use super::resources::ResourceType;
use super::route::{self, Target};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::Store;
use super::watch::{self, WatchRequest};

/// State shared by all requests.
pub struct Shared {
    /// Objects and history.
    pub store: Mutex<Store>,
    /// Every request, in arrival order.
    pub log: Mutex<Vec<RequestRecord>>,
    /// Faults in force.
    pub faults: Mutex<Faults>,
    /// RBAC rules by user: a user listed here may do only what they allow.
    pub rbac: Mutex<HashMap<String, Vec<rbac::Rule>>>,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// `(major, minor)` reported by `/version`.
    pub server_version: (u32, u32),
    /// Cancelled when the server shuts down (ends open watches).
    pub shutdown: CancellationToken,
    /// Bumped to end every open watch (an injected disconnect or outage).
    pub disconnect: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    /// The injected faults a new watch of `plural` runs under.
    pub fn watch_faults(&self, plural: &str) -> watch::WatchFaults {
        watch::WatchFaults {
            disconnect: self.disconnect.subscribe(),
            lag: lock(&self.faults)
                .watch_lag
                .get(plural)
                .copied()
                .unwrap_or_default(),
        }
    }

    /// Ends every open watch; clients must re-establish them.
    pub fn disconnect_watches(&self) {
        self.disconnect.send_modify(|epoch| *epoch += 1);
    }
}

/// Locks a mutex, recovering the data if a panicking holder poisoned it (a failed test
/// must not cascade into every later request).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

type Params = HashMap<String, String>;

/// The one handler behind every path.
pub async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params: Params = Query::try_from_uri(&uri)
        .map(|Query(p)| p)
        .unwrap_or_default();
    let target = {
        let store = lock(&shared.store);
        route::parse(uri.path(), |g, p| store.is_namespaced_plural(g, p))
    };
    let mut record = describe(&method, &uri, &headers, &params, target.as_ref());
    let (delay, failure) = lock(&shared.faults).decide(&record);
    let failure = failure.or_else(|| unauthorized(&shared, &record));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = match failure {
        Some(error) => error_response(&error),
        None => match target {
            Some(target) => dispatch(&shared, &method, &headers, &params, &target, &body)
                .unwrap_or_else(|error| error_response(&error)),
            None => discovery::serve(&shared, uri.path()),
        },
    };
    record.status = response.status().as_u16();
    lock(&shared.log).push(record);
    response
}

/// 403 when the request's user has rules and none allows it, or when a user held to
/// rules impersonates another (no chart grants `impersonate`).
fn unauthorized(shared: &Shared, record: &RequestRecord) -> Option<ApiError> {
    let user = record.user.as_deref()?;
    let rules = lock(&shared.rbac);
    if let Some(impersonator) = record.impersonator.as_deref()
        && rules.contains_key(impersonator)
    {
        return Some(rbac::cannot_impersonate(impersonator, user));
    }
    let allowed = rules
        .get(user)
        .is_none_or(|rules| rbac::allows(rules, record));
    (!allowed).then(|| rbac::forbidden(user, record))
}

fn describe(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    params: &Params,
    target: Option<&Target>,
) -> RequestRecord {
    let named = target.is_some_and(|t| t.name.is_some());
    let verb = match (target, method.as_str()) {
        (None, _) => Verb::Discovery,
        (Some(_), "GET") if named => Verb::Get,
        (Some(_), "GET") if is_true(params.get("watch")) => Verb::Watch,
        (Some(_), "GET") => Verb::List,
        (Some(_), "POST") => Verb::Create,
        (Some(_), "PUT") => Verb::Update,
        (Some(_), "PATCH") => Verb::Patch,
        (Some(_), "DELETE") if named => Verb::Delete,
        (Some(_), _) => Verb::DeleteCollection,
    };
    let token_user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let impersonated = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    RequestRecord {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        verb,
        group: target.map(|t| t.group.clone()).unwrap_or_default(),
        resource: target.map(|t| t.plural.clone()).unwrap_or_default(),
        namespace: target.and_then(|t| t.namespace.clone()),
        name: target.and_then(|t| t.name.clone()),
        subresource: target.and_then(|t| t.subresource.clone()),
        field_manager: params.get("fieldManager").cloned(),
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        user: impersonated.clone().or_else(|| token_user.clone()),
        impersonator: impersonated.and(token_user),
        status: 0,
    }
}

fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true" || v == "1")
}

/// A JSON response.
pub fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A `Status` error response.
pub fn error_response(error: &ApiError) -> Response {
    json_response(error.http_status(), &error.to_status())
}

fn dispatch(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    params: &Params,
    target: &Target,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let rt = lock(&shared.store)
        .resource(&target.group, &target.version, &target.plural)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({}/{} {})",
                    target.group, target.version, target.plural
                ),
            )
        })?;
    if !rt.namespaced && target.namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "{} is cluster-scoped: the URL must not name a namespace",
                rt.group_resource()
            ),
        ));
    }
    if params.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the fake API server",
        ));
    }
    ops::check_subresource(&rt, target.subresource.as_deref())?;
    if target.subresource.as_deref() == Some("binding") && *method != Method::POST {
        return Err(ApiError::method_not_allowed(
            "pods/binding only supports create (POST)",
        ));
    }
    let namespace = target.namespace.clone().unwrap_or_default();
    let needs_namespace = || {
        if rt.namespaced && target.namespace.is_none() {
            Err(ApiError::method_not_allowed(format!(
                "{} is namespaced: {method} needs a namespace in the URL",
                rt.group_resource()
            )))
        } else {
            Ok(())
        }
    };
    let Some(name) = target.name.as_deref() else {
        return match *method {
            Method::GET if is_true(params.get("watch")) => {
                let request = watch_request(&rt, target, params)?;
                let body = watch::start(
                    &shared.store,
                    request,
                    shared.bookmark_interval,
                    shared.shutdown.clone(),
                    shared.watch_faults(&rt.plural),
                )?;
                Ok((
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    body,
                )
                    .into_response())
            }
            Method::GET => list(shared, &rt, target, params),
            Method::POST => {
                needs_namespace()?;
                let addr = address(&rt, &namespace, "", None);
                let object = ops::create(&mut lock(&shared.store), &addr, parse_json(body)?)?;
                Ok(json_response(StatusCode::CREATED, &object))
            }
            Method::DELETE => delete_collection(shared, &rt, target, params, body),
            _ => Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on a collection"
            ))),
        };
    };
    needs_namespace()?;
    let addr = address(&rt, &namespace, name, target.subresource.as_deref());
    let mut store = lock(&shared.store);
    match *method {
        Method::POST if target.subresource.as_deref() == Some("binding") => {
            let status = ops::bind(&mut store, &addr, &parse_json(body)?)?;
            Ok(json_response(StatusCode::CREATED, &status))
        }
        Method::GET => {
            let object = store
                .get(&rt, &(namespace.clone(), name.to_owned()))
                .ok_or_else(|| ApiError::not_found(&rt.group_resource(), name))?;
            Ok(json_response(StatusCode::OK, &object))
        }
        Method::PUT => {
            let existed = store
                .get(&rt, &(namespace.clone(), name.to_owned()))
                .is_some();
            let object = ops::update(&mut store, &addr, parse_json(body)?)?;
            let status = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(json_response(status, &object))
        }
        Method::PATCH => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = PatchKind::from_content_type(content_type)?;
            let existed = store
                .get(&rt, &(namespace.clone(), name.to_owned()))
                .is_some();
            let object = ops::patch(
                &mut store,
                &addr,
                kind,
                body,
                params.get("fieldManager").map(String::as_str),
                is_true(params.get("force")),
            )?;
            let status = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(json_response(status, &object))
        }
        Method::DELETE => {
            let options = delete_options(body, params)?;
            match ops::delete(&mut store, &addr, &options)? {
                Deleted::Pending(object) => Ok(json_response(StatusCode::OK, &object)),
                Deleted::Gone(object) => {
                    Ok(json_response(StatusCode::OK, &deleted_status(&rt, &object)))
                }
            }
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on an object"
        ))),
    }
}

fn address<'a>(
    rt: &'a ResourceType,
    namespace: &'a str,
    name: &'a str,
    sub: Option<&'a str>,
) -> Address<'a> {
    Address {
        rt,
        namespace,
        name,
        subresource: sub,
    }
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn delete_options(body: &Bytes, params: &Params) -> Result<DeleteOptions, ApiError> {
    let mut options = DeleteOptions::from_body(body)?;
    if let Some(grace) = params.get("gracePeriodSeconds") {
        options.grace_period_seconds = Some(grace.parse().map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds {grace:?} is not a number"))
        })?);
    }
    if let Some(policy) = params.get("propagationPolicy") {
        options.propagation_policy = Some(policy.clone());
    }
    Ok(options)
}

fn deleted_status(rt: &ResourceType, object: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta_str(object, "name"),
            "group": rt.group,
            "kind": rt.plural,
            "uid": meta_str(object, "uid"),
        },
    })
}

/// The query parameter `name` as a number, if given; a bad request when it is not one.
fn number<T: std::str::FromStr>(params: &Params, name: &str) -> Result<Option<T>, ApiError> {
    params
        .get(name)
        .map(|value| {
            value
                .parse::<T>()
                .map_err(|_| ApiError::bad_request(format!("{name} {value:?} is not a number")))
        })
        .transpose()
}

fn selectors(params: &Params) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(params.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(params.get("fieldSelector").map_or("", String::as_str))?;
    Ok((labels, fields))
}

fn watch_request(
    rt: &ResourceType,
    target: &Target,
    params: &Params,
) -> Result<WatchRequest, ApiError> {
    let (labels, fields) = selectors(params)?;
    let timeout = number::<u64>(params, "timeoutSeconds")?.unwrap_or(1800);
    Ok(WatchRequest {
        rt: rt.clone(),
        namespace: target.namespace.clone(),
        labels,
        fields,
        resource_version: params.get("resourceVersion").cloned(),
        bookmarks: is_true(params.get("allowWatchBookmarks")),
        send_initial_events: is_true(params.get("sendInitialEvents")),
        timeout: Duration::from_secs(timeout),
    })
}

/// LIST with selectors and `limit`/`continue` paging (the continue token holds the list's
/// resourceVersion and the last key returned).
fn list(
    shared: &Shared,
    rt: &ResourceType,
    target: &Target,
    params: &Params,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(params)?;
    let limit = number::<usize>(params, "limit")?.filter(|l| *l > 0);
    let after = match params.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => Some(parse_continue(token)?),
        None => None,
    };
    let store = lock(&shared.store);
    let list_rv = after.as_ref().map_or(store.current_rv(), |(rv, _)| *rv);
    let mut items = Vec::new();
    let mut last_key = None;
    let mut more = false;
    for (key, object) in store.iter(rt, target.namespace.as_deref()) {
        if after.as_ref().is_some_and(|(_, last)| key <= last) {
            continue;
        }
        if !(labels.matches(object) && fields.matches(object)) {
            continue;
        }
        if limit.is_some_and(|l| items.len() == l) {
            more = true;
            break;
        }
        items.push(object.as_ref().clone());
        last_key = Some(key);
    }
    let mut metadata = json!({ "resourceVersion": list_rv.to_string() });
    if more && let Some((ns, name)) = last_key {
        metadata["continue"] = format!("{list_rv}|{ns}|{name}").into();
    }
    let list = json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": metadata,
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list))
}

fn parse_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let mut parts = token.splitn(3, '|');
    let rv = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().ok_or_else(bad)?.to_owned();
    let name = parts.next().ok_or_else(bad)?.to_owned();
    Ok((rv, (ns, name)))
}

fn delete_collection(
    shared: &Shared,
    rt: &ResourceType,
    target: &Target,
    params: &Params,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(params)?;
    let options = delete_options(body, params)?;
    let mut store = lock(&shared.store);
    let keys: Vec<_> = store
        .iter(rt, target.namespace.as_deref())
        .filter(|(_, o)| labels.matches(o) && fields.matches(o))
        .map(|(k, _)| k.clone())
        .collect();
    let mut items = Vec::new();
    for (ns, name) in keys {
        let addr = address(rt, &ns, &name, None);
        match ops::delete(&mut store, &addr, &options) {
            Ok(Deleted::Gone(object) | Deleted::Pending(object)) => {
                items.push(object.as_ref().clone())
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = json!({
        "kind": format!("{}List", rt.kind),
        "apiVersion": rt.api_version(),
        "metadata": { "resourceVersion": store.current_rv().to_string() },
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list))
}
