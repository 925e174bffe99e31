//! `/version` and the discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`).

use std::collections::BTreeSet;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::handlers::{Shared, error_response, json_response, lock};
use super::resources::ResourceType;

/// Serves a non-resource path.
pub fn serve(shared: &Shared, path: &str) -> Response {
    let resources = lock(&shared.store).resources().to_vec();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let body = match segments.as_slice() {
        ["version"] => Some(version(shared.server_version)),
        ["api"] => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [],
        })),
        ["apis"] => Some(group_list(&resources)),
        ["api", "v1"] => resource_list(&resources, "", "v1"),
        ["apis", group, version] => resource_list(&resources, group, version),
        _ => None,
    };
    match body {
        Some(body) => json_response(StatusCode::OK, &body),
        None => error_response(&ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )),
    }
}

fn version((major, minor): (u32, u32)) -> Value {
    json!({
        "major": major.to_string(),
        "minor": minor.to_string(),
        "gitVersion": format!("v{major}.{minor}.0-fake"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "",
        "platform": "linux/amd64",
    })
}

fn group_list(resources: &[ResourceType]) -> Value {
    let groups: BTreeSet<(&str, &str)> = resources
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group.as_str(), r.version.as_str()))
        .collect();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({ "groupVersion": format!("{group}/{version}"), "version": version });
            json!({ "name": group, "versions": [gv.clone()], "preferredVersion": gv })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

fn resource_list(resources: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&ResourceType> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    let mut entries = Vec::new();
    for r in served {
        entries.push(json!({
            "name": r.plural,
            "singularName": r.kind.to_lowercase(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
        }));
        if r.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}
