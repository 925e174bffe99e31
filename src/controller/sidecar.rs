//! The agent Pod's claim keeper (`ralph sidecar`): renews the attempt's Lease every third
//! of its duration while the attempt lives, and stops the moment it no longer does.
//!
//! What it watches, in the Pod's shared run directory: the runner's heartbeat (written every
//! couple of seconds while the runner process lives), the git steps' heartbeat, and the
//! files each step writes when it ends. The claim is spent once every step has ended, or
//! once the runner has started and no heartbeat is fresh (it was killed): then renewals stop
//! and a plain sidecar container exits, so its Pod completes at once. A native sidecar waits
//! for the kubelet's SIGTERM (it would be restarted otherwise). Before the runner starts (a
//! clone, an image pull) it renews within its start-up grace; the controller keeps the claim
//! of a Pod whose agent has not started too. Renewals that fail (the API server is
//! unreachable) are retried; when they keep failing and the claim would lapse within one renewal, it writes the stop file: the
//! runner stops the agent before anyone else may take the task over.
//!
//! In a planning attempt's Pod it also uploads the planner's answer, once: when the attempt
//! is over, or on SIGTERM at the latest ([`AnswerUpload`]); in a worker attempt's Pod of a
//! planning Feature, the tasks the worker proposed, when it proposed any
//! ([`ProposalUpload`]).

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::api::labels::{FEATURE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, TASK_LABEL};
use crate::controller::act::claim::{ClaimError, Leases};
use crate::controller::client::call::bounded;
use crate::controller::plan::plan_map::{PROBLEM_KEY, PlanFiles, plan_map};
use crate::engine::planning::{DOCUMENT_FILE, PLANNING_TASK, TASKS_FILE, not_written};

/// Shortest pause between two renewals.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How often the run directory is looked at.
const POLL: Duration = Duration::from_millis(500);

/// What the sidecar needs to know.
#[derive(Clone, Debug)]
pub struct SidecarConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease: String,
    /// The attempt id that must hold the Lease.
    pub holder: String,
    /// File the runner writes while its process lives.
    pub heartbeat_file: PathBuf,
    /// File the git steps write while they work (clone, commit, push), when the Pod has them.
    pub step_heartbeat_file: Option<PathBuf>,
    /// Files the steps write when they end: once all exist, the claim is spent.
    pub ended_files: Vec<PathBuf>,
    /// File written when the claim cannot be kept: the runner stops the agent.
    pub stop_file: Option<PathBuf>,
    /// A heartbeat older than this is stale.
    pub heartbeat_max_age: Duration,
    /// Before the runner's heartbeat first appears, renew for at most this long (image pulls,
    /// the clone, runner start-up).
    pub startup_grace: Duration,
    /// Limit of each API call.
    pub api_timeout: Duration,
    /// How long one renewal is valid (the Lease's `leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// Exit once the claim is spent (a plain sidecar container must end for its Pod to
    /// complete; a native sidecar is stopped by the kubelet instead).
    pub exit_when_done: bool,
    /// In a planning attempt's Pod: where the planner's answer is and where it goes.
    pub answer: Option<AnswerUpload>,
    /// In a worker attempt's Pod of a planning Feature: where proposed tasks are and where
    /// they go.
    pub proposal: Option<ProposalUpload>,
}

/// A planning attempt's answer upload: the files the planner wrote in the workspace (read
/// through a read-only mount), put into a ConfigMap owned by the Pod, with
/// [`plan_map`]'s layout. Without a readable answer the ConfigMap holds only
/// [`PROBLEM_KEY`], saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerUpload {
    /// The answer directory (`<workspace>/.ralph-planning`).
    pub dir: PathBuf,
    /// The ConfigMap's name (`<attempt>-answer`).
    pub config_map: String,
    /// The feature (a label of the ConfigMap).
    pub feature: String,
    /// The Pod's name (its owner).
    pub pod_name: String,
    /// The Pod's uid.
    pub pod_uid: String,
}

/// The tasks a worker attempt proposed (`<ralph:propose-tasks>`), as its runner wrote them
/// to the proposal file in the run directory, put into a ConfigMap owned by the Pod with
/// [`plan_map`]'s layout (the task list only). No file: nothing is uploaded (the attempt
/// proposed nothing); a file that cannot be uploaded leaves [`PROBLEM_KEY`], saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProposalUpload {
    /// The runner's proposal file (`<run dir>/proposal.yaml`).
    pub file: PathBuf,
    /// The ConfigMap's name (`<attempt>-proposal`).
    pub config_map: String,
    /// The feature (a label of the ConfigMap).
    pub feature: String,
    /// The proposing task's id (a label of the ConfigMap).
    pub task: String,
    /// The Pod's name (its owner).
    pub pod_name: String,
    /// The Pod's uid.
    pub pod_uid: String,
}

/// The metadata of an upload's ConfigMap: labelled with its feature and task, owned by
/// the Pod.
fn upload_meta(
    name: &str,
    namespace: &str,
    (feature, task): (&str, &str),
    (pod_name, pod_uid): (&str, &str),
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(
            [
                (FEATURE_LABEL, feature),
                (TASK_LABEL, task),
                (MANAGED_BY_LABEL, MANAGED_BY),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        owner_references: Some(vec![crate::controller::plan::pod::owned_by_pod(
            pod_name, pod_uid,
        )]),
        ..ObjectMeta::default()
    }
}

/// A ConfigMap of `meta` that holds only why nothing could be uploaded.
fn problem_map(meta: &ObjectMeta, message: String) -> ConfigMap {
    ConfigMap {
        metadata: meta.clone(),
        data: Some([(PROBLEM_KEY.to_owned(), message)].into()),
        ..ConfigMap::default()
    }
}

/// The proposal ConfigMap in `namespace` for what `upload.file` holds now; `None` when
/// there is no file (nothing was proposed).
pub fn proposal_config_map(upload: &ProposalUpload, namespace: &str) -> Option<ConfigMap> {
    let meta = upload_meta(
        &upload.config_map,
        namespace,
        (&upload.feature, &upload.task),
        (&upload.pod_name, &upload.pod_uid),
    );
    let tasks = match std::fs::read_to_string(&upload.file) {
        Ok(tasks) => tasks,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            return Some(problem_map(
                &meta,
                format!(
                    "the proposed tasks in {} cannot be read: {error}",
                    upload.file.display()
                ),
            ));
        }
    };
    let files = PlanFiles {
        tasks: Some(tasks),
        document: None,
    };
    Some(
        plan_map(meta.clone(), &files, Default::default()).unwrap_or_else(|error| {
            problem_map(
                &meta,
                format!("the proposed tasks cannot be uploaded: {error}"),
            )
        }),
    )
}

/// The answer ConfigMap in `namespace` for what `upload.dir` holds now.
pub fn answer_config_map(upload: &AnswerUpload, namespace: &str) -> ConfigMap {
    let meta = upload_meta(
        &upload.config_map,
        namespace,
        (&upload.feature, PLANNING_TASK),
        (&upload.pod_name, &upload.pod_uid),
    );
    let problem = |message: String| problem_map(&meta, message);
    let tasks_file = upload.dir.join(TASKS_FILE);
    let tasks = match std::fs::read_to_string(&tasks_file) {
        Ok(tasks) => tasks,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return problem(not_written(&tasks_file.display().to_string()));
        }
        Err(error) => {
            return problem(format!(
                "no answer: the task list {} cannot be read ({error}): write it as a UTF-8 \
                 text file the Pod's user may read",
                tasks_file.display()
            ));
        }
    };
    let document = std::fs::read_to_string(upload.dir.join(DOCUMENT_FILE))
        .ok()
        .filter(|text| !text.trim().is_empty());
    let files = PlanFiles {
        tasks: Some(tasks),
        document,
    };
    plan_map(meta.clone(), &files, Default::default()).unwrap_or_else(|error| {
        problem(format!(
            "no answer: the answer in {} cannot be uploaded: {error}",
            upload.dir.display()
        ))
    })
}

/// How often an upload is tried before the claim-keeper gives up (the controller then
/// counts the attempt as one that ended without an answer).
const UPLOAD_TRIES: u32 = 5;

/// What the claim-keeper uploads once the attempt is over.
enum Upload {
    /// A planning attempt's answer.
    Answer(AnswerUpload),
    /// A worker attempt's proposed tasks.
    Proposal(ProposalUpload),
}

impl Upload {
    /// What is uploaded, for the log.
    fn what(&self) -> &'static str {
        match self {
            Upload::Answer(_) => "the planner's answer",
            Upload::Proposal(_) => "the proposed tasks",
        }
    }

    /// The ConfigMap to create, if any.
    fn config_map(&self, namespace: &str) -> Option<ConfigMap> {
        match self {
            Upload::Answer(upload) => Some(answer_config_map(upload, namespace)),
            Upload::Proposal(upload) => proposal_config_map(upload, namespace),
        }
    }
}

/// Uploads once; later calls do nothing.
struct Uploader {
    api: Api<ConfigMap>,
    upload: Upload,
    namespace: String,
    timeout: Duration,
    done: bool,
}

impl Uploader {
    async fn upload_once(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let Some(map) = self.upload.config_map(&self.namespace) else {
            return;
        };
        let name = map.metadata.name.clone().unwrap_or_default();
        let what = self.upload.what();
        for attempt in 1..=UPLOAD_TRIES {
            let created = bounded(
                self.timeout,
                format!("create ConfigMap {}/{name}", self.namespace),
                self.api.create(&PostParams::default(), &map),
            )
            .await;
            match created {
                Ok(_) => {
                    tracing::info!(config_map = %name, "uploaded {what}");
                    return;
                }
                Err(error) if error.is_conflict() => return,
                Err(error) if attempt < UPLOAD_TRIES => {
                    tracing::warn!(%error, "cannot upload {what}; retrying");
                    tokio::time::sleep(MIN_INTERVAL).await;
                }
                Err(error) => {
                    tracing::error!(%error, "cannot upload {what}; giving up");
                }
            }
        }
    }
}

/// What the sidecar saw in the run directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// When the runner last wrote its heartbeat (`None`: not started yet).
    pub runner_beat: Option<SystemTime>,
    /// When a git step last wrote its heartbeat.
    pub step_beat: Option<SystemTime>,
    /// Every step has written its end file.
    pub all_ended: bool,
}

/// What the sidecar does with the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The attempt lives (or is starting): keep the claim.
    Renew,
    /// Nothing runs yet and the start-up grace is over: do not renew, but wait (the
    /// controller keeps the claim of an agent that has not started).
    Hold,
    /// The attempt is over: the claim is spent.
    Over,
}

/// Judges the attempt from what the run directory shows at `now` (the sidecar started at
/// `started`).
pub fn judge(
    seen: Seen,
    now: SystemTime,
    started: SystemTime,
    config: &SidecarConfig,
) -> Judgement {
    if seen.all_ended {
        return Judgement::Over;
    }
    let fresh =
        |t: SystemTime| now.duration_since(t).unwrap_or(Duration::ZERO) <= config.heartbeat_max_age;
    let newest = seen.runner_beat.max(seen.step_beat);
    match (seen.runner_beat, newest) {
        (Some(_), Some(beat)) if fresh(beat) => Judgement::Renew,
        (Some(_), _) => Judgement::Over,
        (None, Some(beat)) if fresh(beat) => Judgement::Renew,
        (None, _)
            if now.duration_since(started).unwrap_or(Duration::ZERO) <= config.startup_grace =>
        {
            Judgement::Renew
        }
        (None, _) => Judgement::Hold,
    }
}

/// The pause between renewals: a third of the Lease duration.
pub fn renew_interval(lease_duration: Duration) -> Duration {
    (lease_duration / 3).max(MIN_INTERVAL)
}

/// Why the sidecar stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SidecarExit {
    /// Asked to stop (SIGTERM): the Pod is going away.
    Stopped,
    /// The attempt is over and `exit_when_done` is set.
    Done,
    /// Another holder owns the Lease now: this attempt was fenced off.
    Fenced {
        /// The new holder (empty when none).
        holder: String,
    },
    /// The Lease was deleted or released (the controller gave the claim back).
    Released,
}

/// Renews the Lease until fenced, released, the attempt is over (if `exit_when_done`) or
/// `shutdown` completes.
pub async fn run(
    client: Client,
    config: SidecarConfig,
    shutdown: impl Future<Output = ()>,
) -> SidecarExit {
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let leases = Leases::new(api, config.api_timeout);
    let upload = match (config.answer.clone(), config.proposal.clone()) {
        (Some(answer), _) => Some(Upload::Answer(answer)),
        (None, Some(proposal)) => Some(Upload::Proposal(proposal)),
        (None, None) => None,
    };
    let mut uploader = upload.map(|upload| Uploader {
        api: Api::namespaced(client, &config.namespace),
        upload,
        namespace: config.namespace.clone(),
        timeout: config.api_timeout,
        done: false,
    });
    let mut keeper = Keeper::new(config);
    tokio::pin!(shutdown);
    loop {
        let exit = keeper.tick(&leases).await;
        if keeper.done
            && let Some(uploader) = uploader.as_mut()
        {
            uploader.upload_once().await;
        }
        if let Some(exit) = exit {
            return exit;
        }
        tokio::select! {
            () = &mut shutdown => {
                if let Some(uploader) = uploader.as_mut() {
                    uploader.upload_once().await;
                }
                return SidecarExit::Stopped;
            }
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// The claim keeper's state between ticks.
struct Keeper {
    config: SidecarConfig,
    started: SystemTime,
    interval: Duration,
    /// When the claim was last known renewed (at start: the sidecar's start).
    renewed: Instant,
    /// When to call the API next.
    next_call: Instant,
    /// Renewals stopped for good: the attempt is over.
    done: bool,
    stop_written: bool,
}

impl Keeper {
    fn new(config: SidecarConfig) -> Self {
        let now = Instant::now();
        Self {
            interval: renew_interval(config.lease_duration),
            config,
            started: SystemTime::now(),
            renewed: now,
            next_call: now,
            done: false,
            stop_written: false,
        }
    }

    /// One round: look at the run directory, renew when due; `Some` when the sidecar must stop.
    async fn tick(&mut self, leases: &Leases) -> Option<SidecarExit> {
        if self.done {
            return None;
        }
        match judge(self.seen(), SystemTime::now(), self.started, &self.config) {
            Judgement::Over => {
                tracing::info!(lease = %self.config.lease, "the attempt is over; the claim is spent");
                self.done = true;
                return self.config.exit_when_done.then_some(SidecarExit::Done);
            }
            Judgement::Hold => return None,
            Judgement::Renew => {}
        }
        if Instant::now() < self.next_call {
            return None;
        }
        let exit = self.renew(leases).await;
        if exit.is_none() {
            self.stop_if_lapsing();
        }
        exit
    }

    fn seen(&self) -> Seen {
        let modified =
            |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        Seen {
            runner_beat: modified(&self.config.heartbeat_file),
            step_beat: self
                .config
                .step_heartbeat_file
                .as_deref()
                .and_then(modified),
            all_ended: self.config.ended_files.iter().all(|f| f.exists()),
        }
    }

    async fn renew(&mut self, leases: &Leases) -> Option<SidecarExit> {
        let outcome = leases
            .renew(&self.config.lease, &self.config.holder, Timestamp::now())
            .await;
        match outcome {
            Ok(_) => {
                tracing::debug!(lease = %self.config.lease, "renewed");
                self.renewed = Instant::now();
                self.next_call = self.renewed + self.interval;
                None
            }
            // Released: the Lease is kept with no holder (or, from older controllers, deleted).
            Err(ClaimError::NotHolder { holder, .. }) if holder.is_empty() => {
                Some(SidecarExit::Released)
            }
            Err(ClaimError::NotHolder { holder, .. }) => Some(SidecarExit::Fenced { holder }),
            Err(ClaimError::Gone { .. }) => Some(SidecarExit::Released),
            Err(error) => {
                tracing::warn!(lease = %self.config.lease, %error, "renewal failed; retrying");
                self.next_call = Instant::now() + MIN_INTERVAL.max(self.interval / 10);
                None
            }
        }
    }

    /// Writes the stop file once the claim would lapse within one renewal interval without a
    /// renewal: better the runner stops the agent than two attempts work on the task.
    fn stop_if_lapsing(&mut self) {
        let Some(stop_file) = &self.config.stop_file else {
            return;
        };
        let duration = self.config.lease_duration;
        let lapsing = self.renewed.elapsed() + self.interval >= duration;
        if !lapsing || self.stop_written {
            return;
        }
        self.stop_written = true;
        let text = format!(
            "the claim Lease {}/{} could not be renewed for {} s (its duration is {} s)\n",
            self.config.namespace,
            self.config.lease,
            self.renewed.elapsed().as_secs(),
            duration.as_secs()
        );
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(stop_file)
            .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
        match written {
            Ok(()) => {
                tracing::warn!(lease = %self.config.lease, "the claim cannot be kept: asked the runner to stop the agent")
            }
            Err(error) => {
                tracing::warn!(path = %stop_file.display(), %error, "cannot write the stop file")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SidecarConfig {
        SidecarConfig {
            namespace: "ns".to_owned(),
            lease: "feat-build".to_owned(),
            holder: "feat-build-a1".to_owned(),
            heartbeat_file: PathBuf::from("/ralph/run/runner.beat"),
            step_heartbeat_file: None,
            ended_files: vec![PathBuf::from("/ralph/run/runner.ended")],
            stop_file: None,
            heartbeat_max_age: Duration::from_secs(15),
            startup_grace: Duration::from_secs(300),
            api_timeout: Duration::from_secs(10),
            lease_duration: Duration::from_secs(60),
            exit_when_done: true,
            answer: None,
            proposal: None,
        }
    }

    fn secs(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    /// Judges `seen` at `now` (seconds; the sidecar started at 0).
    fn judged(seen: Seen, now: u64) -> Judgement {
        judge(seen, secs(now), secs(0), &config())
    }

    fn runner_beat(at: u64) -> Seen {
        Seen {
            runner_beat: Some(secs(at)),
            ..Seen::default()
        }
    }

    #[test]
    fn a_runner_that_beats_keeps_its_claim() {
        assert_eq!(judged(runner_beat(1_000), 1_015), Judgement::Renew);
    }

    #[test]
    fn a_runner_silent_for_longer_than_the_max_age_is_over() {
        assert_eq!(judged(runner_beat(1_000), 1_016), Judgement::Over);
    }

    #[test]
    fn every_step_ended_is_over_whatever_the_heartbeat() {
        let seen = Seen {
            all_ended: true,
            ..runner_beat(1_000)
        };
        assert_eq!(judged(seen, 1_000), Judgement::Over);
    }

    #[test]
    fn a_git_step_working_after_the_runner_ended_keeps_the_claim() {
        let seen = Seen {
            step_beat: Some(secs(1_100)),
            ..runner_beat(1_000)
        };
        assert_eq!(judged(seen, 1_110), Judgement::Renew);
    }

    #[test]
    fn before_the_runner_starts_the_claim_is_kept_within_the_startup_grace() {
        assert_eq!(judged(Seen::default(), 300), Judgement::Renew);
    }

    #[test]
    fn a_runner_that_never_started_past_the_grace_is_held_not_over() {
        assert_eq!(judged(Seen::default(), 301), Judgement::Hold);
    }

    #[test]
    fn a_clone_that_beats_past_the_grace_keeps_the_claim() {
        let seen = Seen {
            step_beat: Some(secs(395)),
            ..Seen::default()
        };
        assert_eq!(judged(seen, 400), Judgement::Renew);
    }

    #[test]
    fn a_heartbeat_from_the_future_counts_as_fresh() {
        assert_eq!(judged(runner_beat(2_000), 1_000), Judgement::Renew);
    }

    #[test]
    fn renewals_happen_every_third_of_the_lease_duration() {
        assert_eq!(
            renew_interval(Duration::from_secs(60)),
            Duration::from_secs(20)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
    }

    fn proposal_upload(file: PathBuf) -> ProposalUpload {
        ProposalUpload {
            file,
            config_map: "shop-api-a1-proposal".to_owned(),
            feature: "shop".to_owned(),
            task: "api".to_owned(),
            pod_name: "shop-api-a1".to_owned(),
            pod_uid: "pod-uid".to_owned(),
        }
    }

    #[test]
    fn proposed_tasks_are_uploaded_with_the_plan_layout_owned_by_the_pod() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("proposal.yaml");
        std::fs::write(&file, "tasks:\n  - {name: docs, acceptance: [written]}\n")
            .expect("written");
        let map = proposal_config_map(&proposal_upload(file), "team").expect("a ConfigMap");
        let files = crate::controller::plan::plan_map::read_plan_map(&map).expect("readable");
        assert_eq!(
            files.tasks.as_deref(),
            Some("tasks:\n  - {name: docs, acceptance: [written]}\n")
        );
        let labels = map.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(TASK_LABEL).map(String::as_str), Some("api"));
        assert_eq!(labels.get(FEATURE_LABEL).map(String::as_str), Some("shop"));
        let owner = &map.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Pod", "pod-uid")
        );
    }

    #[test]
    fn without_a_proposal_file_nothing_is_uploaded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let upload = proposal_upload(dir.path().join("proposal.yaml"));
        assert_eq!(proposal_config_map(&upload, "team"), None);
    }

    #[test]
    fn renew_interval_never_drops_below_one_second() {
        assert_eq!(renew_interval(Duration::ZERO), MIN_INTERVAL);
    }
}
