//! The git credentials Secret of a Feature, read live (once per generation and period) for
//! the checks of [`crate::controller::plan::git`].

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use crate::api::Feature;
use crate::api::conditions;
use crate::controller::client::call::bounded;
use crate::controller::plan::git::{secret_problem, settings_problem};
use crate::controller::plan::problem::Problem;
use crate::controller::runtime::context::Context;

/// What is wrong with `spec.workspace.git` beyond its schema: the URL and branch names,
/// then the credentials Secret (read live) and its keys. `None` when it is fine or unset.
pub(crate) async fn configuration_problem(feature: &Feature, ctx: &Context) -> Option<Problem> {
    let git = feature.spec.git()?;
    let namespace = feature.namespace().unwrap_or_default();
    if let Some(problem) = settings_problem(feature, git) {
        return Some(problem);
    }
    let secret_ref = git.credentials_secret_ref.as_ref()?;
    // Read once per generation and period, not on every reconcile (see Preflight).
    let key = format!(
        "git Secret {namespace}/{} of Feature {}@{}",
        secret_ref.name,
        feature.name_any(),
        feature.metadata.generation.unwrap_or_default()
    );
    ctx.preflight
        .remembered(key, async {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            let op = format!("get Secret {namespace}/{}", secret_ref.name);
            match bounded(ctx.api_timeout, op, secrets.get_opt(&secret_ref.name)).await {
                Ok(secret) => Some(secret_problem(feature, git, secret.as_ref())),
                Err(error) if error.status_code() == Some(403) => Some(Some(Problem {
                    reason: conditions::REASON_GIT_CREDENTIALS_MISSING,
                    message: format!(
                        "the controller may not read the git credentials Secret {namespace}/{}: \
                         {error}; grant its ServiceAccount `get` on secrets (the Helm chart \
                         does); no attempt starts until it can",
                        secret_ref.name
                    ),
                })),
                Err(error) => {
                    tracing::warn!(%error, secret = %secret_ref.name, "cannot read the git credentials Secret");
                    None
                }
            }
        })
        .await
}
