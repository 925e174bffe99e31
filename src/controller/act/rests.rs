//! Where exhausted agents rest in a cluster: one ConfigMap per namespace,
//! `ralph-agent-rests`, with one key per agent identity (`AgentSpec::identity`: the same
//! program and credentials) holding until when it rests and what it said.
//!
//! Why a ConfigMap: the rest must outlive the controller process and be shared by every
//! Feature of the namespace that uses the same agent, so it cannot live in one Feature's or
//! Task's status; one small object per namespace (one key per distinct agent, expired keys
//! removed on the next write) stays readable (`kubectl get configmap ralph-agent-rests -o
//! yaml`), and a user clears a rest by deleting its key. A Lease per agent would misuse the
//! holder/renew semantics for a plain "until" time. The elected controller is the only
//! writer; it keeps the namespace's rests in memory, reads the ConfigMap once per namespace
//! after it starts (a restart or a new leader), and again on every reconcile while some
//! agent rests (so a key deleted by a user takes effect).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};

use crate::controller::client::call::{CallError, bounded};
use crate::engine::conclusion::AgentRest;
use crate::engine::selection::{Rests, format_ms};

/// Name of the ConfigMap holding a namespace's agent rests.
pub(crate) const REST_CONFIG_MAP: &str = "ralph-agent-rests";

/// One rest as the ConfigMap stores it (JSON under the agent's identity).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredRest {
    /// Until when, RFC 3339 (for people).
    pub until: String,
    /// Until when, Unix ms.
    pub until_ms: i64,
    /// What the agent said.
    pub message: String,
    /// Which pool agent of which Feature and task reported it (`feature/agent`, task).
    pub reported_by: String,
}

/// An agent that reported exhaustion: who, until when, and which attempt said so.
#[derive(Clone, Debug)]
pub struct RestReport<'a> {
    /// The agent's identity (`AgentSpec::identity`).
    pub identity: &'a str,
    /// Until when it rests.
    pub rest: &'a AgentRest,
    /// Which pool agent of which Feature and task reported it.
    pub reported_by: String,
}

/// The rests of every namespace this controller has read, shared by all reconciles.
#[derive(Clone, Debug, Default)]
pub struct AgentRests {
    by_namespace: Arc<Mutex<HashMap<String, Rests>>>,
}

impl AgentRests {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Rests>> {
        lock(&self.by_namespace)
    }

    /// The rests in `namespace` still running at `now_ms`.
    pub async fn current(
        &self,
        client: &Client,
        timeout: Duration,
        namespace: &str,
        now_ms: i64,
    ) -> Result<Rests, CallError> {
        let known = self.lock().get(namespace).cloned();
        let reload = known
            .as_ref()
            .is_none_or(|rests| rests.values().any(|r| r.until_ms > now_ms));
        let rests = match (known, reload) {
            (Some(rests), false) => rests,
            _ => {
                let read = read(client, timeout, namespace).await?;
                self.lock().insert(namespace.to_owned(), read.clone());
                read
            }
        };
        Ok(rests
            .into_iter()
            .filter(|(_, rest)| rest.until_ms > now_ms)
            .collect())
    }

    /// Records that the agent `identity` rests until `rest.until_ms`, in memory and in the
    /// namespace's ConfigMap (expired keys are removed by the same write).
    pub async fn rest(
        &self,
        client: &Client,
        timeout: Duration,
        namespace: &str,
        report: &RestReport<'_>,
        now_ms: i64,
    ) -> Result<(), CallError> {
        let RestReport {
            identity,
            rest,
            reported_by,
        } = report;
        let identity = *identity;
        let expired: Vec<String> = {
            let mut all = self.lock();
            let rests = all.entry(namespace.to_owned()).or_default();
            let expired = rests
                .iter()
                .filter(|(key, r)| r.until_ms <= now_ms && key.as_str() != identity)
                .map(|(key, _)| key.clone())
                .collect::<Vec<_>>();
            for key in &expired {
                rests.remove(key);
            }
            let longest = rests
                .get(identity)
                .map_or(rest.until_ms, |r| r.until_ms.max(rest.until_ms));
            rests.insert(
                identity.to_owned(),
                AgentRest {
                    until_ms: longest,
                    message: rest.message.clone(),
                },
            );
            expired
        };
        let stored = StoredRest {
            until: format_ms(rest.until_ms),
            until_ms: rest.until_ms,
            message: rest.message.clone(),
            reported_by: reported_by.clone(),
        };
        let mut data = serde_json::Map::new();
        data.insert(
            identity.to_owned(),
            serde_json::Value::String(serde_json::to_string(&stored).unwrap_or_default()),
        );
        for key in expired {
            data.insert(key, serde_json::Value::Null);
        }
        write(client, timeout, namespace, data).await
    }
}

async fn read(client: &Client, timeout: Duration, namespace: &str) -> Result<Rests, CallError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config_map = bounded(
        timeout,
        format!("get ConfigMap {namespace}/{REST_CONFIG_MAP}"),
        api.get_opt(REST_CONFIG_MAP),
    )
    .await?;
    Ok(parse(config_map.and_then(|c| c.data).unwrap_or_default()))
}

/// The rests a ConfigMap's data holds; entries that do not parse are skipped (a person may
/// have edited them).
pub(crate) fn parse(data: BTreeMap<String, String>) -> Rests {
    data.into_iter()
        .filter_map(|(identity, json)| {
            let stored: StoredRest = serde_json::from_str(&json).ok()?;
            Some((
                identity,
                AgentRest {
                    until_ms: stored.until_ms,
                    message: stored.message,
                },
            ))
        })
        .collect()
}

/// Merges `data` into the ConfigMap (a JSON merge patch: other keys stay; `null` removes),
/// creating it when missing.
async fn write(
    client: &Client,
    timeout: Duration,
    namespace: &str,
    data: serde_json::Map<String, serde_json::Value>,
) -> Result<(), CallError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let op = format!("update ConfigMap {namespace}/{REST_CONFIG_MAP}");
    let patch = serde_json::json!({ "data": data });
    let patched = bounded(
        timeout,
        op.clone(),
        api.patch(
            REST_CONFIG_MAP,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ),
    )
    .await;
    match patched {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => {
            let data: BTreeMap<String, String> = data
                .into_iter()
                .filter_map(|(k, v)| Some((k, v.as_str()?.to_owned())))
                .collect();
            let config_map = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(REST_CONFIG_MAP.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    labels: Some(BTreeMap::from([(
                        crate::api::labels::MANAGED_BY_LABEL.to_owned(),
                        crate::api::labels::MANAGED_BY.to_owned(),
                    )])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            let created = bounded(
                timeout,
                format!("create ConfigMap {namespace}/{REST_CONFIG_MAP}"),
                api.create(&PostParams::default(), &config_map),
            )
            .await;
            match created {
                // Created meanwhile by another write: merge into it.
                Err(error) if error.is_conflict() => bounded(
                    timeout,
                    op,
                    api.patch(
                        REST_CONFIG_MAP,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    ),
                )
                .await
                .map(|_| ()),
                other => other.map(|_| ()),
            }
        }
        Err(error) => Err(error),
    }
}
