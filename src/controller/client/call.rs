//! Every Kubernetes API call goes through [`bounded`]: a timeout and an error naming the call.

use std::future::Future;
use std::time::Duration;

use crate::controller::client::AnswerTimeout;

/// A failed Kubernetes API call.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API server did not answer in time.
    #[error("{op}: no answer within {timeout:?}")]
    Timeout {
        /// What was being done, e.g. `create Lease ns/build`.
        op: String,
        /// The time limit.
        timeout: Duration,
    },
    /// The API server (or the connection to it) returned an error.
    #[error("{op}: {source}")]
    Kube {
        /// What was being done.
        op: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

impl CallError {
    /// The HTTP status code the API server answered with, when it did.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            CallError::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// True for 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    /// True for 409 (AlreadyExists or a resourceVersion conflict).
    pub fn is_conflict(&self) -> bool {
        self.status_code() == Some(409)
    }
}

/// Runs one API call under `timeout`; `op` names it in errors. A throttled client's own
/// answer limit ([`AnswerTimeout`]) is reported like this one.
pub async fn bounded<T, F>(
    timeout: Duration,
    op: impl Into<String>,
    call: F,
) -> Result<T, CallError>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(match answer_limit(&source) {
            Some(timeout) => CallError::Timeout {
                op: op.into(),
                timeout,
            },
            None => CallError::Kube {
                op: op.into(),
                source,
            },
        }),
        Err(_) => Err(CallError::Timeout {
            op: op.into(),
            timeout,
        }),
    }
}

/// The limit a throttled client's request went unanswered past ([`AnswerTimeout`]).
fn answer_limit(error: &kube::Error) -> Option<Duration> {
    match error {
        kube::Error::Service(error) => error.downcast_ref::<AnswerTimeout>().map(|a| a.0),
        _ => None,
    }
}
