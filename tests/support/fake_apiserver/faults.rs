//! The request log and fault injection (failing or delaying chosen requests).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::errors::ApiError;

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object (or its subresource).
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// Discovery and `/version`.
    Discovery,
}

impl Verb {
    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Patch | Self::Delete | Self::DeleteCollection
        )
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Kubernetes verb.
    pub verb: Verb,
    /// API group ("" for core); empty for non-resource paths.
    pub group: String,
    /// Plural resource name; empty for non-resource paths.
    pub resource: String,
    /// Namespace, if the URL names one.
    pub namespace: Option<String>,
    /// Object name, if the URL names one.
    pub name: Option<String>,
    /// Subresource, if any.
    pub subresource: Option<String>,
    /// `fieldManager` query parameter.
    pub field_manager: Option<String>,
    /// Request `Content-Type`.
    pub content_type: Option<String>,
    /// Request `User-Agent`.
    pub user_agent: Option<String>,
    /// The user the request acts as: the one its `Impersonate-User` header names, else the
    /// one its bearer token names; `None` for neither (the test's own requests).
    pub user: Option<String>,
    /// The user its bearer token names when it impersonates another.
    pub impersonator: Option<String>,
    /// HTTP status of the response (0 while the request is being handled).
    pub status: u16,
}

/// Decides which requests a fault applies to.
pub type Matcher = Arc<dyn Fn(&RequestRecord) -> bool + Send + Sync>;

/// Fails the next `remaining` matching requests with `error`.
#[derive(Clone)]
pub struct FailRule {
    /// Which requests.
    pub matcher: Matcher,
    /// How many more to fail.
    pub remaining: usize,
    /// The error returned instead.
    pub error: ApiError,
}

/// Delays every matching request by `delay`.
#[derive(Clone)]
pub struct LatencyRule {
    /// Which requests.
    pub matcher: Matcher,
    /// Added delay.
    pub delay: Duration,
}

/// Faults in force.
#[derive(Clone, Default)]
pub struct Faults {
    /// Failure rules, first match wins.
    pub fail: Vec<FailRule>,
    /// Latency rules, all matches add up.
    pub latency: Vec<LatencyRule>,
    /// While set, the server is down: every request gets this error (an API server whose
    /// etcd is gone, or a load balancer with no healthy backend, answers 503).
    pub outage: Option<ApiError>,
    /// Delay before a watch delivers a change, by plural resource name (a watch cache
    /// that lags behind etcd).
    pub watch_lag: HashMap<String, Duration>,
}

impl Faults {
    /// The delay and the injected failure (if any) for a request; consumes one failure.
    pub fn decide(&mut self, request: &RequestRecord) -> (Duration, Option<ApiError>) {
        let delay = self
            .latency
            .iter()
            .filter(|rule| (rule.matcher)(request))
            .map(|rule| rule.delay)
            .sum();
        let failure = self
            .fail
            .iter_mut()
            .find(|rule| rule.remaining > 0 && (rule.matcher)(request))
            .map(|rule| {
                rule.remaining -= 1;
                rule.error.clone()
            });
        self.fail.retain(|rule| rule.remaining > 0);
        (delay, self.outage.clone().or(failure))
    }
}
