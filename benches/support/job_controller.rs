//! A model of Kubernetes' Job controller running one non-indexed Job of `completions` Pods
//! at `parallelism`, for the side-by-side throughput figures. It models what bounds the real
//! controller and nothing else, each part read from its source (kubernetes
//! `pkg/controller/job/job_controller.go`, read at commit 6ae037f; the parts below are
//! older than v1.28, where the issue measured it; `SlowStartInitialBatchSize` is in
//! `pkg/controller/controller_utils.go`):
//!
//! - **Batched syncs** (`enqueueSyncJobBatched`, `syncJobBatchPeriod` = 1 s): every Pod
//!   event (`addPod`, `updatePod`, `deletePod`) and every Job status update (`updateJob`
//!   with an unchanged generation) queues a sync of the Job one second later
//!   (`queue.AddAfter`); a delaying queue keeps the earliest time of a key already waiting,
//!   and one key is never synced twice at once (a key added while it is being synced runs
//!   again after). Only the Job's creation syncs at once (`addJob` →
//!   `enqueueSyncJobImmediately`).
//! - **Expectations** (`syncJob`: `expectations.SatisfiedExpectations` before
//!   `manageJob`): after creating N Pods, no Pods are created until the informer has seen
//!   all N (`addPod` → `CreationObserved`); finished Pods whose finalizer removal was sent
//!   are skipped until the informer shows it gone (`finalizerExpectations`,
//!   `updatePod` → `finalizerRemovalObserved`).
//! - **Slow-start creation** (`manageJob`): `min(completions − succeeded, parallelism) −
//!   active` Pods are created in batches of 1, 2, 4, … (`SlowStartInitialBatchSize` = 1),
//!   each batch in parallel and waited for before the next.
//! - **Finished Pods tracked with finalizers** (`trackJobStatusAndRemoveFinalizers`,
//!   `flushUncountedAndRemoveFinalizers`): newly finished Pods go into
//!   `status.uncountedTerminatedPods` in one status update, then each Pod's
//!   `batch.kubernetes.io/job-tracking` finalizer is removed with one patch (in parallel),
//!   then a second status update moves them into the counts (and marks the Job complete
//!   once `succeeded` reaches `completions` with no Pod active). `manageJob` runs before the
//!   tracking, in the same sync.
//! - One client with the controller's QPS and burst (kube-controller-manager's
//!   `--kube-api-qps`, `--kube-api-burst`); reads come from informers (a list and a watch
//!   each), so the requests are the creates, the finalizer patches and the status updates.
//!
//! The Job is a ConfigMap here (the fake API server serves no `batch/v1`): its status
//! update is one PUT under the cached resourceVersion, like `UpdateStatus`; a conflict
//! requeues the sync after the workqueue's first backoff (`DefaultJobApiBackOff`, 1 s).
//! Events (`SuccessfulCreate` on the Job) are left out: the event recorder's spam filter
//! lets at most a burst of 25 per object through and then one per five minutes, so they add
//! nothing per Pod.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The label on the model's Pods (its Job's selector).
pub const JOB_LABEL: &str = "job-name";
/// The Job tracking finalizer.
const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// `syncJobBatchPeriod`.
const SYNC_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// `DefaultJobApiBackOff`: the first requeue delay after a failed sync.
const API_BACKOFF: Duration = Duration::from_secs(1);
/// The Job's name (its ConfigMap and its Pods' label value).
const JOB: &str = "model";

/// What the Job controller's informers hold and its expectations say.
#[derive(Default)]
struct Informed {
    pods: BTreeMap<String, Pod>,
    job: Option<ConfigMap>,
    /// Creations sent and not yet seen (`ControllerExpectations`).
    creations_pending: usize,
    /// Pods whose finalizer removal was sent and not yet seen.
    removals_pending: BTreeSet<String>,
    /// When the Job's next sync is due (the delaying queue's entry for its key).
    sync_due: Option<Instant>,
}

impl Informed {
    /// `queue.AddAfter(key, delay)`: the earliest time wins.
    fn enqueue_after(&mut self, delay: Duration) {
        let at = Instant::now() + delay;
        self.sync_due = Some(self.sync_due.map_or(at, |due| due.min(at)));
    }
}

type Shared = Arc<(Mutex<Informed>, Notify)>;

/// The Job's status as its ConfigMap holds it.
#[derive(Clone, Debug, Default)]
struct JobStatus {
    active: usize,
    succeeded: usize,
    uncounted: BTreeSet<String>,
    complete: bool,
}

impl JobStatus {
    fn of(job: &ConfigMap) -> Self {
        let data = job.data.clone().unwrap_or_default();
        let number = |key: &str| data.get(key).and_then(|v| v.parse().ok()).unwrap_or(0);
        Self {
            active: number("active"),
            succeeded: number("succeeded"),
            uncounted: data
                .get("uncountedSucceeded")
                .map(|v| {
                    v.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            complete: data.get("complete").is_some_and(|v| v == "true"),
        }
    }

    fn write_into(&self, job: &mut ConfigMap) {
        let uncounted: Vec<&str> = self.uncounted.iter().map(String::as_str).collect();
        job.data = Some(BTreeMap::from([
            ("active".to_owned(), self.active.to_string()),
            ("succeeded".to_owned(), self.succeeded.to_string()),
            ("uncountedSucceeded".to_owned(), uncounted.join(",")),
            ("complete".to_owned(), self.complete.to_string()),
        ]));
    }
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

/// The Job controller's informers: the Pod watch updates the store and the expectations
/// and queues a batched sync; so does the Job watch (status updates).
fn start_informers(client: &Client, namespace: &str, shared: Shared) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod_shared = Arc::clone(&shared);
    tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default().labels(JOB_LABEL)).boxed();
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                continue;
            };
            let (state, wake) = &*pod_shared;
            let mut state = state.lock().expect("informer state");
            let name = pod.name_any();
            if !state.pods.contains_key(&name) {
                state.creations_pending = state.creations_pending.saturating_sub(1);
            }
            if !has_finalizer(&pod) {
                state.removals_pending.remove(&name);
            }
            state.pods.insert(name, pod);
            state.enqueue_after(SYNC_BATCH_PERIOD);
            wake.notify_one();
        }
    });
    let jobs: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={JOB}"));
        let mut stream = watcher(jobs, config).boxed();
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) = event else {
                continue;
            };
            let (state, wake) = &*shared;
            let mut state = state.lock().expect("informer state");
            let first = state.job.is_none();
            state.job = Some(job);
            // addJob syncs at once; a status update (same generation) is batched.
            state.enqueue_after(if first {
                Duration::ZERO
            } else {
                SYNC_BATCH_PERIOD
            });
            wake.notify_one();
        }
    });
}

/// The model's Pod number `index`: like a Job's, with the tracking finalizer.
fn job_pod(index: usize, namespace: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{JOB}-{index}"),
            "namespace": namespace,
            "labels": {JOB_LABEL: JOB},
            "finalizers": [TRACKING_FINALIZER]
        },
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "agent", "image": "agent:bench",
            "command": ["agent", "--task", format!("p{index}")]
        }]}
    }))
    .expect("job pod")
}

/// The Job controller syncing one Job.
struct Controller {
    pods: Api<Pod>,
    jobs: Api<ConfigMap>,
    namespace: String,
    shared: Shared,
    completions: usize,
    parallelism: usize,
    created: usize,
}

impl Controller {
    /// `syncJob`; returns whether the Job is complete.
    async fn sync(&mut self) -> Result<bool, kube::Error> {
        let (satisfied, pods, removals_pending, job) = {
            let state = self.shared.0.lock().expect("informer state");
            (
                state.creations_pending == 0,
                state.pods.values().cloned().collect::<Vec<_>>(),
                state.removals_pending.clone(),
                state.job.clone(),
            )
        };
        let Some(mut job) = job else {
            return Ok(false);
        };
        let before = JobStatus::of(&job);
        let mut status = before.clone();
        if status.complete {
            return Ok(true);
        }
        let mut active = pods.iter().filter(|p| !finished(p)).count();
        let newly_finished: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                finished(p)
                    && has_finalizer(p)
                    && !removals_pending.contains(&p.name_any())
                    && !status.uncounted.contains(&p.name_any())
            })
            .collect();
        let succeeded = status.succeeded + status.uncounted.len() + newly_finished.len();
        if satisfied {
            active = self.manage(active, succeeded).await;
        }
        // trackJobStatusAndRemoveFinalizers
        let mut needs_flush = active != status.active;
        status.active = active;
        let to_remove: Vec<String> = pods
            .iter()
            .filter(|p| {
                finished(p) && has_finalizer(p) && !removals_pending.contains(&p.name_any())
            })
            .map(ResourceExt::name_any)
            .collect();
        for pod in &newly_finished {
            status.uncounted.insert(pod.name_any());
            needs_flush = true;
        }
        if needs_flush {
            job = self.update_status(job, &status).await?;
            needs_flush = false;
        }
        if !to_remove.is_empty() {
            {
                let mut state = self.shared.0.lock().expect("informer state");
                state.removals_pending.extend(to_remove.iter().cloned());
            }
            let removals = to_remove.iter().map(|name| {
                let pods = self.pods.clone();
                async move {
                    let patch = serde_json::json!({"metadata": {"finalizers": null}});
                    let removed = pods
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                    (name.clone(), removed.is_ok())
                }
            });
            for (name, removed) in futures::future::join_all(removals).await {
                if removed && status.uncounted.remove(&name) {
                    status.succeeded += 1;
                    needs_flush = true;
                } else if !removed {
                    self.shared
                        .0
                        .lock()
                        .expect("informer state")
                        .removals_pending
                        .remove(&name);
                }
            }
        }
        if status.succeeded >= self.completions && status.uncounted.is_empty() && active == 0 {
            status.complete = true;
            needs_flush = true;
        }
        if needs_flush {
            self.update_status(job, &status).await?;
        }
        Ok(status.complete)
    }

    /// `manageJob`: creates the missing Pods in slow-start batches; returns the active count.
    async fn manage(&mut self, active: usize, succeeded: usize) -> usize {
        let wanted = self
            .completions
            .saturating_sub(succeeded)
            .min(self.parallelism);
        let mut missing = wanted.saturating_sub(active);
        if missing == 0 {
            return active;
        }
        self.shared
            .0
            .lock()
            .expect("informer state")
            .creations_pending = missing;
        let mut active = active + missing;
        let mut batch = missing.min(1);
        while missing > 0 {
            let creates = (0..batch).map(|i| {
                let (pods, pod) = (
                    self.pods.clone(),
                    job_pod(self.created + i, &self.namespace),
                );
                async move { pods.create(&PostParams::default(), &pod).await.is_ok() }
            });
            let failed = futures::future::join_all(creates)
                .await
                .into_iter()
                .filter(|created| !created)
                .count();
            self.created += batch;
            missing -= batch;
            if failed > 0 {
                let mut state = self.shared.0.lock().expect("informer state");
                state.creations_pending = state.creations_pending.saturating_sub(failed + missing);
                active -= failed + missing;
                break;
            }
            batch = (2 * batch).min(missing);
        }
        active
    }

    /// `UpdateStatus`: one PUT under the resourceVersion held.
    async fn update_status(
        &self,
        mut job: ConfigMap,
        status: &JobStatus,
    ) -> Result<ConfigMap, kube::Error> {
        status.write_into(&mut job);
        self.jobs.replace(JOB, &PostParams::default(), &job).await
    }
}

/// Runs one Job of `completions` Pods at `parallelism` with `client` (which carries the
/// rate limit) until its status says complete; returns Pods per second from the Job's
/// creation.
pub async fn run_job(
    client: Client,
    namespace: &str,
    completions: usize,
    parallelism: usize,
) -> f64 {
    let shared: Shared = Arc::new((Mutex::new(Informed::default()), Notify::new()));
    start_informers(&client, namespace, Arc::clone(&shared));
    let jobs: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut controller = Controller {
        pods: Api::namespaced(client, namespace),
        jobs: jobs.clone(),
        namespace: namespace.to_owned(),
        shared: Arc::clone(&shared),
        completions,
        parallelism,
        created: 0,
    };
    let mut job = ConfigMap::default();
    job.metadata.name = Some(JOB.to_owned());
    JobStatus::default().write_into(&mut job);
    let started = Instant::now();
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the Job");
    loop {
        let due = loop {
            let notified = shared.1.notified();
            let due = shared.0.lock().expect("informer state").sync_due;
            match due {
                Some(due) => break due,
                None => notified.await,
            }
        };
        tokio::time::sleep_until(due).await;
        shared.0.lock().expect("informer state").sync_due = None;
        match controller.sync().await {
            Ok(true) => break,
            Ok(false) => {}
            Err(_) => shared
                .0
                .lock()
                .expect("informer state")
                .enqueue_after(API_BACKOFF),
        }
    }
    completions as f64 / started.elapsed().as_secs_f64()
}
