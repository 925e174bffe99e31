//! API errors, rendered as Kubernetes `Status` objects so `kube::Error::Api` carries them.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// A failed request: HTTP code, machine-readable reason and a message naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Kubernetes `StatusReason` (`NotFound`, `AlreadyExists`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (name, group, kind), when known.
    pub details: Option<Box<Value>>,
}

impl ApiError {
    /// An error with the given code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for `resource "name"`.
    pub fn not_found(group_resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{group_resource} \"{name}\" not found"),
        )
        .with_details(group_resource, name)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group_resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{group_resource} \"{name}\" already exists"),
        )
        .with_details(group_resource, name)
    }

    /// 409 Conflict, the optimistic-concurrency failure.
    pub fn conflict(group_resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {group_resource} \"{name}\": {why}"),
        )
        .with_details(group_resource, name)
    }

    /// 409 Conflict for a stale `resourceVersion`.
    pub fn stale(group_resource: &str, name: &str) -> Self {
        Self::conflict(
            group_resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid.
    pub fn invalid(group_resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message).with_details(group_resource, name)
    }

    /// 410 Gone (too old resource version).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    fn with_details(mut self, group_resource: &str, name: &str) -> Self {
        let (kind, group) = group_resource
            .split_once('.')
            .unwrap_or((group_resource, ""));
        self.details = Some(Box::new(
            json!({ "name": name, "group": group, "kind": kind }),
        ));
        self
    }

    /// The `Status` object of this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.as_ref().clone();
        }
        status
    }

    /// HTTP status code of this error.
    pub fn http_status(&self) -> StatusCode {
        StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}
