//! Authorization as a real API server with RBAC does it: a request authenticated as a user
//! the server knows rules for (a bearer token naming the user) is answered 403 Forbidden
//! unless one of the user's rules allows its verb on its resource. The rules are read from
//! the Helm chart, so a call the controller makes without a grant in the chart fails here
//! as it would on a cluster. Requests without a token are the test's own (cluster-admin).
//! A request with an `Impersonate-User` header acts as that user, as on a real server; only
//! a user held to no rules (cluster-admin) may impersonate.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::errors::ApiError;
use super::faults::{RequestRecord, Verb};

/// The user the controller's client authenticates as (its bearer token).
pub const CONTROLLER_USER: &str = "ralph-controller";

/// The user the agent Pods' sidecars authenticate as (their bearer token).
pub const AGENT_USER: &str = "ralph-agent";

/// One RBAC `PolicyRule` over resources.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// API groups (`""` for core, `*` for every group).
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource` for a subresource, `*` for every one.
    pub resources: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...; `*`).
    pub verbs: Vec<String>,
}

/// The controller's rules in the chart: its (Cluster)Role and its leader-election Role.
pub fn controller_rules() -> Vec<Rule> {
    chart_rules("rbac.yaml")
}

/// The agent Pods' rules in the chart (their sidecar renews the claim Lease).
pub fn agent_rules() -> Vec<Rule> {
    chart_rules("agent-rbac.yaml")
}

/// Every `rules:` list of a chart template, concatenated.
fn chart_rules(template: &str) -> Vec<Rule> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("charts/ralph-operator/templates")
        .join(template);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    rules_in(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `rules:` lists of a template: each is the indented block after a `rules:` line,
/// plain YAML (no template directives inside).
pub fn rules_in(template: &str) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    let mut lines = template.lines();
    while lines.by_ref().any(|line| line == "rules:") {
        let block: Vec<&str> = lines
            .clone()
            .take_while(|line| line.starts_with(' ') || line.is_empty())
            .collect();
        let parsed: Vec<Rule> = serde_yaml_ng::from_str(&block.join("\n"))
            .map_err(|e| format!("a rules: list that is not RBAC rules: {e}"))?;
        rules.extend(parsed);
    }
    if rules.is_empty() {
        return Err("no rules: list".to_owned());
    }
    Ok(rules)
}

/// Whether `rules` allow the request (requests to non-resource paths, discovery and
/// `/version`, are allowed to every authenticated user, as `system:discovery` does).
pub fn allows(rules: &[Rule], request: &RequestRecord) -> bool {
    let Some(verb) = verb_name(request.verb) else {
        return true;
    };
    let resource = resource_of(request);
    rules.iter().any(|rule| {
        matches(&rule.api_groups, &request.group)
            && matches(&rule.resources, &resource)
            && matches(&rule.verbs, verb)
    })
}

/// 403 Forbidden worded as the API server words it.
pub fn forbidden(user: &str, request: &RequestRecord) -> ApiError {
    let verb = verb_name(request.verb).unwrap_or("get");
    let resource = resource_of(request);
    let scope = match &request.namespace {
        Some(namespace) => format!(" in the namespace \"{namespace}\""),
        None => " at the cluster scope".to_owned(),
    };
    let name = request
        .name
        .as_ref()
        .map(|n| format!(" \"{n}\""))
        .unwrap_or_default();
    ApiError::new(
        403,
        "Forbidden",
        format!(
            "{resource}{name} is forbidden: User \"{user}\" cannot {verb} resource \
             \"{resource}\" in API group \"{group}\"{scope}",
            group = request.group
        ),
    )
}

/// 403 for a user held to rules that impersonates another, worded as the API server does.
pub fn cannot_impersonate(impersonator: &str, user: &str) -> ApiError {
    ApiError::new(
        403,
        "Forbidden",
        format!(
            "users \"{user}\" is forbidden: User \"{impersonator}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        ),
    )
}

/// The user name a ServiceAccount authenticates (or is impersonated) as.
#[allow(dead_code)] // the e2e suite's
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The resource as RBAC names it: `resource`, or `resource/subresource`.
fn resource_of(request: &RequestRecord) -> String {
    match &request.subresource {
        Some(sub) => format!("{}/{sub}", request.resource),
        None => request.resource.clone(),
    }
}

fn matches(allowed: &[String], value: &str) -> bool {
    allowed.iter().any(|a| a == "*" || a == value)
}

fn verb_name(verb: Verb) -> Option<&'static str> {
    Some(match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
        Verb::Discovery => return None,
    })
}
