//! Checks made before any claim that the API server would refuse the agent Pod for a
//! reason the Feature's spec does not show: today, the Pod's ServiceAccount missing from the
//! namespace (the ServiceAccount admission plugin refuses such Pods with 403). Answers are
//! kept for a short while per namespace, so a check costs one read per namespace and period,
//! not one per reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client};

use crate::api::conditions;
use crate::controller::client::call::bounded;
use crate::controller::plan::problem::Problem;

/// How long a check that found no problem is not made again.
const FOUND_FOR: Duration = Duration::from_secs(60);
/// How long a check that found a problem is not made again.
const MISSING_FOR: Duration = Duration::from_secs(5);

/// Each check's answer and when it was made, by what was checked.
type Answers = HashMap<String, (Option<Problem>, Instant)>;

/// Remembered answers of the checks, by what was checked.
#[derive(Clone, Debug, Default)]
pub struct Preflight {
    seen: Arc<Mutex<Answers>>,
}

impl Preflight {
    /// The problem when ServiceAccount `namespace/account` does not exist. A read that fails
    /// for another reason (e.g. no RBAC to read ServiceAccounts) gives no problem: the Pod
    /// create then tells.
    pub async fn service_account(
        &self,
        client: &Client,
        timeout: Duration,
        namespace: &str,
        account: &str,
    ) -> Option<Problem> {
        let key = format!("ServiceAccount {namespace}/{account}");
        self.remembered(key.clone(), async {
            let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
            match bounded(timeout, format!("get {key}"), api.get_opt(account)).await {
                Ok(found) => Some(
                    found
                        .is_none()
                        .then(|| missing_service_account(namespace, account)),
                ),
                Err(error) => {
                    tracing::debug!(%error, "cannot check the agent ServiceAccount");
                    None
                }
            }
        })
        .await
    }

    /// `check`'s answer for `key`, read again only once it is old: an answer without a
    /// problem lasts [`FOUND_FOR`], a problem [`MISSING_FOR`] (so a fix shows soon). `check`
    /// gives `None` when it cannot tell; that is not remembered and is no problem.
    pub async fn remembered(
        &self,
        key: String,
        check: impl std::future::Future<Output = Option<Option<Problem>>>,
    ) -> Option<Problem> {
        let now = Instant::now();
        let fresh = |(problem, at): &(Option<Problem>, Instant)| {
            now.duration_since(*at)
                < if problem.is_none() {
                    FOUND_FOR
                } else {
                    MISSING_FOR
                }
        };
        if let Some((problem, _)) = self.lock().get(&key).filter(|seen| fresh(seen)) {
            return problem.clone();
        }
        let problem = check.await?;
        self.lock().insert(key, (problem.clone(), now));
        problem
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        lock(&self.seen)
    }
}

/// The problem of agent Pods whose ServiceAccount is missing.
pub(crate) fn missing_service_account(namespace: &str, account: &str) -> Problem {
    Problem {
        reason: conditions::REASON_MISSING_SERVICE_ACCOUNT,
        message: format!(
            "ServiceAccount {namespace}/{account}, which agent Pods run as, does not exist: \
             install it with the Helm chart (agentServiceAccount.extraNamespaces) or \
             `kubectl apply -n {namespace} -f config/rbac/agent.yaml`, or name an existing one \
             in spec.podTemplate.serviceAccountName; no attempt starts until it exists"
        ),
    }
}
