//! Why a task's actions could not be carried out.

use super::claim::ClaimError;
use crate::controller::cache::texts::TextError;
use crate::controller::client::call::CallError;
use crate::controller::plan::pod::PodError;

/// Why a task's actions could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// An API call failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// A claim operation failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The agent Pod cannot be built from the Feature.
    #[error(transparent)]
    Pod(#[from] PodError),
    /// The API server refused the agent Pod (403: e.g. its ServiceAccount is missing; 422:
    /// the Pod spec is invalid): the user must fix the configuration.
    #[error("the API server refused agent Pod {pod}: {source}")]
    PodRejected {
        /// The Pod.
        pod: String,
        /// The refusal.
        #[source]
        source: CallError,
    },
    /// The attempt's prompt is larger than a ConfigMap holds (one too large for the Pod's
    /// annotations travels in one).
    #[error("the prompt of attempt {pod} is {bytes} bytes, too large to travel with its Pod")]
    PromptTooLarge {
        /// The Pod.
        pod: String,
        /// The prompt's bytes.
        bytes: usize,
    },
    /// The Task object lacks what the controller needs (name, namespace, uid).
    #[error("Task {task}: {problem}")]
    Malformed {
        /// The Task.
        task: String,
        /// What is missing.
        problem: &'static str,
    },
    /// The feature's spec or plan text could not be read.
    #[error("Feature {feature}: cannot read {what}: {problem}")]
    Context {
        /// The feature.
        feature: String,
        /// `spec.context.spec` or `spec.context.plan`.
        what: &'static str,
        /// Why.
        problem: String,
    },
}

impl From<TextError> for TaskError {
    fn from(error: TextError) -> Self {
        match error {
            TextError::Call(error) => TaskError::Call(error),
            TextError::Unreadable {
                feature,
                what,
                problem,
            } => TaskError::Context {
                feature,
                what,
                problem,
            },
        }
    }
}

impl TaskError {
    /// The Task `task` lacks what the controller needs (`problem`).
    pub(crate) fn malformed(task: &str, problem: &'static str) -> TaskError {
        TaskError::Malformed {
            task: task.to_owned(),
            problem,
        }
    }
}
