//! Checks made before any claim that the API server would refuse the agent Pod for a
//! reason the Feature's spec does not show: today, the Pod's ServiceAccount missing from the
//! namespace (the ServiceAccount admission plugin refuses such Pods with 403). Answers are
//! kept for a short while per namespace, so a check costs one read per namespace and period,
//! not one per reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client};

use super::call::bounded;
use super::decide::Problem;
use crate::api::conditions;

/// How long a ServiceAccount found to exist is not looked up again.
const FOUND_FOR: Duration = Duration::from_secs(60);
/// How long a ServiceAccount found missing is not looked up again.
const MISSING_FOR: Duration = Duration::from_secs(5);

/// Remembered answers of [`Preflight::service_account`], by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct Preflight {
    seen: Arc<Mutex<HashMap<String, (bool, Instant)>>>,
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
        let key = format!("{namespace}/{account}");
        let now = Instant::now();
        let remembered = self
            .lock()
            .get(&key)
            .filter(|(exists, at)| {
                now.duration_since(*at) < if *exists { FOUND_FOR } else { MISSING_FOR }
            })
            .map(|(exists, _)| *exists);
        let exists = match remembered {
            Some(exists) => exists,
            None => {
                let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
                let read = bounded(
                    timeout,
                    format!("get ServiceAccount {key}"),
                    api.get_opt(account),
                )
                .await;
                match read {
                    Ok(found) => {
                        let exists = found.is_some();
                        self.lock().insert(key.clone(), (exists, now));
                        exists
                    }
                    Err(error) => {
                        tracing::debug!(%error, "cannot check the agent ServiceAccount");
                        true
                    }
                }
            }
        };
        (!exists).then(|| missing_service_account(namespace, account))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (bool, Instant)>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The problem of agent Pods whose ServiceAccount is missing.
pub fn missing_service_account(namespace: &str, account: &str) -> Problem {
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
