//! One term of reconciling (all of a run without leader election, or one term of
//! leadership): fresh caches ([`super::watches`]), the context every reconcile shares, the
//! kube-runtime `Controller` for Features triggered by their Tasks, Pods and Leases, and the
//! background work of the term (readiness, gauges, the retention sweeps).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use super::context::Context;
use super::feature::{error_policy, reconcile};
use super::metrics::Metrics;
use super::run::ControllerConfig;
use super::server::Health;
use super::watches::{self, Caches};
use crate::api::Feature;
use crate::controller::act::events::Events;
use crate::controller::cache::filled::CachesFilled;
use crate::controller::cache::lease_cache;
use crate::controller::cache::retention;
use crate::controller::cache::slots::Slots;
use crate::controller::cache::store::Cache;
use crate::controller::plan::pod::{FEATURE_LABEL, PodSettings, SidecarMode};

/// What one run of the reconciler (one term of leadership) is built from.
pub(super) struct Term<'a> {
    pub(super) client: &'a Client,
    pub(super) config: &'a ControllerConfig,
    pub(super) sidecar: SidecarMode,
    pub(super) metrics: &'a Metrics,
    pub(super) health: &'a Health,
}

impl Term<'_> {
    /// Fills fresh caches and reconciles Features until `stop` completes. `/readyz` is
    /// ready once every cache has synced.
    pub(super) async fn reconcile_until(
        &self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        self.health.set_ready(false);
        let caches = Caches::start(self.client, self.config.namespace.as_deref());
        let ctx = Arc::new(self.context(&caches));
        let readiness = tokio::spawn(report_readiness(self.health.clone(), caches.filled.clone()));
        let gauges = tokio::spawn(count_tasks_periodically(Arc::clone(&ctx)));
        let retention = tokio::spawn(retention::sweep(
            self.client.clone(),
            retention::PodCache {
                pods: caches.pods.clone(),
                writer: Arc::clone(&caches.pod_writer),
                index: caches.indexes.pods.clone(),
                retired: caches.retired_pods.clone(),
                tasks: caches.tasks.clone(),
            },
            self.config.finished_pod_ttl,
            self.config.call_limit(),
        ));
        let lease_sweep = tokio::spawn(lease_cache::sweep(caches.lease_cache.clone()));
        run_controller(
            self.client,
            self.config.namespace.as_deref(),
            caches,
            ctx,
            stop,
        )
        .await;
        readiness.abort();
        retention.abort();
        lease_sweep.abort();
        gauges.abort();
    }

    fn context(&self, caches: &Caches) -> Context {
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: "ralph-controller".to_owned(),
                instance: Some(self.config.instance.clone()),
            },
        );
        Context {
            client: self.client.clone(),
            api_timeout: self.config.call_limit(),
            cache: Cache {
                tasks: caches.tasks.clone(),
                pods: caches.pods.clone(),
                leases: caches.leases.clone(),
                lease_cache: caches.lease_cache.clone(),
                filled: caches.filled.clone(),
                indexes: caches.indexes.clone(),
                task_writes: Default::default(),
                planning_writes: Default::default(),
                slots: Slots::new(self.config.max_concurrent_attempts),
                specs: Default::default(),
                descriptions: caches.descriptions.clone(),
                shapes: Default::default(),
            },
            pod_settings: PodSettings {
                ralph_image: self.config.ralph_image.clone(),
                service_account: self.config.agent_service_account.clone(),
                sidecar: self.sidecar,
                gateway_prices: self.config.gateway_prices.clone(),
            },
            events: Events::new(recorder, self.config.call_limit()),
            metrics: self.metrics.clone(),
            applied: Default::default(),
            rests: Default::default(),
            preflight: Default::default(),
            template_applies: Arc::new(tokio::sync::Semaphore::new(
                super::context::TEMPLATE_APPLIES,
            )),
        }
    }
}

/// How often the tasks-by-phase gauges are set from the Task cache.
const GAUGE_PERIOD: Duration = Duration::from_secs(5);

/// Sets the tasks-by-phase gauges every [`GAUGE_PERIOD`] (a walk over every cached Task,
/// kept out of the reconciles).
async fn count_tasks_periodically(ctx: Arc<Context>) {
    loop {
        super::feature::count_tasks_by_phase(&ctx);
        tokio::time::sleep(GAUGE_PERIOD).await;
    }
}

/// Marks the controller ready once every cache has been filled.
async fn report_readiness(health: Health, filled: CachesFilled) {
    health.set_ready(filled.wait_all().await);
}

/// The Feature reconciler, triggered by Features and by changes of their Tasks, Pods and
/// Leases, until `stop` (in-flight reconciles finish first).
async fn run_controller(
    client: &Client,
    namespace: Option<&str>,
    caches: Caches,
    ctx: Arc<Context>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let by_feature_label = |labels: &BTreeMap<String, String>, namespace: Option<String>| {
        let name = labels.get(FEATURE_LABEL)?;
        Some(ObjectRef::<Feature>::new(name).within(&namespace?))
    };
    let task_triggers = features_of(caches.task_changes, |task| {
        let namespace = task.metadata.namespace.as_deref()?;
        Some(ObjectRef::<Feature>::new(&task.spec.feature_ref).within(namespace))
    });
    let pod_triggers = features_of(caches.pod_changes, move |pod| {
        by_feature_label(pod.labels(), pod.namespace())
    });
    let (features, feature_changes) = watches::features(client, namespace);
    Controller::for_stream(feature_changes, features)
        .reconcile_on(task_triggers)
        .reconcile_on(pod_triggers)
        .watches_stream(caches.lease_changes, move |lease: Lease| {
            by_feature_label(lease.labels(), lease.namespace())
        })
        .graceful_shutdown_on(stop)
        .run(timed_reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        })
        .await;
}

/// The Features the changed cached objects of `changes` trigger (`feature_of` each). A
/// cached Task or Pod is no API object, so its watch triggers reconciles by Feature
/// reference; its watch's errors are logged as the Controller logs the others'.
fn features_of<K: Send + 'static>(
    changes: watches::Touched<K>,
    feature_of: impl Fn(&K) -> Option<ObjectRef<Feature>> + Send + 'static,
) -> impl futures::Stream<Item = ObjectRef<Feature>> + Send + 'static {
    changes.filter_map(move |changed| {
        std::future::ready(match changed {
            Ok(object) => feature_of(&object),
            Err(error) => {
                tracing::debug!(%error, "reconcile did not complete");
                None
            }
        })
    })
}

/// [`reconcile`], its duration recorded in `ralph_reconcile_duration_seconds`.
async fn timed_reconcile(
    feature: Arc<Feature>,
    ctx: Arc<Context>,
) -> Result<kube::runtime::controller::Action, super::feature::ReconcileError> {
    let started = std::time::Instant::now();
    let result = reconcile(feature, Arc::clone(&ctx)).await;
    ctx.metrics
        .reconcile_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}
