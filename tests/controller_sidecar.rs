//! `ralph sidecar`'s loop against the fake API server: it renews the claim while the runner
//! beats, stops when another attempt holds the Lease, stops renewing the moment the attempt
//! is over (a plain sidecar exits, a native one waits to be stopped), and retries an API
//! server it cannot reach, asking the runner to stop before the claim lapses. Also the Lease
//! claim operations (create, double claim, take over, release), and a planning attempt's
//! answer upload (once, owned by the Pod; a problem in its place when there is none).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::fake_apiserver;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use ralph::controller::act::claim::{self, ClaimError, ClaimRequest, Leases};
use ralph::controller::plan::run_view;
use ralph::controller::sidecar::{self, AnswerUpload, SidecarConfig, SidecarExit};

const NS: &str = "team";
const PATIENCE: Duration = Duration::from_secs(30);

fn request(holder: &str, duration_seconds: i32) -> ClaimRequest {
    ClaimRequest {
        lease: "feat-build".to_owned(),
        holder: holder.to_owned(),
        duration_seconds,
        owner: None,
        labels: Default::default(),
    }
}

async fn setup() -> (FakeApiServer, Api<Lease>, Leases) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let api: Api<Lease> = Api::namespaced(server.client_in(NS), NS);
    let leases = Leases::new(api.clone(), Duration::from_secs(5));
    (server, api, leases)
}

/// The second attempt's claim request, for `duration_seconds`.
fn second_attempt(duration_seconds: i32) -> ClaimRequest {
    request("feat-build-a2", duration_seconds)
}

/// The first attempt's claim, created now for `duration_seconds`.
async fn first_claim(leases: &Leases, duration_seconds: i32) -> Lease {
    first_claim_at(leases, duration_seconds, Timestamp::now()).await
}

/// The first attempt's claim, created at `now` for `duration_seconds`.
async fn first_claim_at(leases: &Leases, duration_seconds: i32, now: Timestamp) -> Lease {
    leases
        .create(&request("feat-build-a1", duration_seconds), now)
        .await
        .expect("first claim")
}

/// The Pod's shared run directory as the sidecar sees it (kept while it lives).
struct RunDir {
    dir: tempfile::TempDir,
}

impl RunDir {
    /// A run directory whose runner wrote its heartbeat just now.
    fn beating() -> Self {
        let run = Self::empty();
        run.beat();
        run
    }

    fn empty() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn beat(&self) {
        std::fs::write(self.path("runner.beat"), b"1").expect("heartbeat");
    }

    /// The runner's heartbeat, last written an hour ago (the runner was killed).
    fn silent_for_an_hour(&self) {
        self.beat();
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(self.path("runner.beat"))
            .and_then(|f| f.set_modified(old))
            .expect("age the heartbeat");
    }

    fn runner_ended(&self) {
        std::fs::write(self.path("runner.ended"), b"1").expect("ended file");
    }

    /// The sidecar's configuration for this directory: a plain sidecar exits once the
    /// attempt is over, a native one waits to be stopped.
    fn config(&self, plain: bool) -> SidecarConfig {
        SidecarConfig {
            namespace: NS.to_owned(),
            lease: "feat-build".to_owned(),
            holder: "feat-build-a1".to_owned(),
            heartbeat_file: self.path("runner.beat"),
            step_heartbeat_file: None,
            ended_files: vec![self.path("runner.ended")],
            stop_file: Some(self.path("claim-lost")),
            heartbeat_max_age: Duration::from_secs(15),
            startup_grace: Duration::from_secs(60),
            api_timeout: Duration::from_secs(2),
            lease_duration: Duration::from_secs(3),
            exit_when_done: plain,
            answer: None,
            proposal: None,
        }
    }

    /// The configuration of a planning attempt's claim-keeper: it uploads what `answers`
    /// holds.
    fn planning_config(&self, plain: bool, answers: &AnswerDir) -> SidecarConfig {
        SidecarConfig {
            answer: Some(answers.upload()),
            ..self.config(plain)
        }
    }
}

/// A planning attempt's answer directory in the workspace.
struct AnswerDir {
    dir: tempfile::TempDir,
}

impl AnswerDir {
    fn empty() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).expect("answer file");
    }

    fn upload(&self) -> AnswerUpload {
        AnswerUpload {
            dir: self.dir.path().to_path_buf(),
            config_map: ANSWER.to_owned(),
            feature: "shop".to_owned(),
            pod_name: "feat-build-a1".to_owned(),
            pod_uid: "pod-uid-1".to_owned(),
        }
    }
}

const ANSWER: &str = "feat-build-a1-answer";
const TASKS: &str = "tasks:\n  - name: parse\n    title: Parse\n    acceptance: [parses]\n";

/// How the spawned sidecar `run` ended (it must end within [`PATIENCE`]).
async fn exit_of(run: tokio::task::JoinHandle<SidecarExit>) -> SidecarExit {
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("sidecar stopped")
        .expect("sidecar task")
}

/// Waits until the Lease was renewed after `after_ms`.
async fn renewed_after(api: &Api<Lease>, after_ms: i64) -> Lease {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let lease = api.get("feat-build").await.expect("lease");
        if renew_ms(&lease) > after_ms {
            return lease;
        }
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts that nobody renews the Lease for two renewal intervals of a 3 s Lease.
async fn assert_not_renewed_any_more(api: &Api<Lease>) {
    let before = renew_ms(&api.get("feat-build").await.expect("lease"));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let after = renew_ms(&api.get("feat-build").await.expect("lease"));
    assert_eq!(after, before, "the spent claim was renewed");
}

fn renew_ms(lease: &Lease) -> i64 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map_or(0, |t| t.0.as_millisecond())
}

#[tokio::test]
async fn second_claim_on_a_held_lease_is_refused_naming_the_holder() {
    let (_server, _api, leases) = setup().await;
    first_claim(&leases, 60).await;
    let second = leases.create(&second_attempt(60), Timestamp::now()).await;
    match second {
        Err(ClaimError::Held { holder, .. }) => assert_eq!(holder, "feat-build-a1"),
        other => panic!("expected Held, got {other:?}"),
    }
}

#[tokio::test]
async fn expired_lease_is_taken_over_with_a_higher_fencing_token() {
    let (_server, _api, leases) = setup().await;
    let long_ago = Timestamp::from_second(1_000).expect("time");
    first_claim_at(&leases, 15, long_ago).await;
    let taken = leases
        .acquire(&second_attempt(15), Timestamp::now())
        .await
        .expect("take over");
    assert_eq!(run_view::holder(&taken), Some("feat-build-a2"));
    assert_eq!(claim::lease_transitions(&taken), 1);
}

#[tokio::test]
async fn fresh_lease_of_another_holder_is_not_taken_over() {
    let (_server, _api, leases) = setup().await;
    first_claim(&leases, 60).await;
    let result = leases.acquire(&second_attempt(60), Timestamp::now()).await;
    assert!(matches!(result, Err(ClaimError::Held { .. })), "{result:?}");
}

#[tokio::test]
async fn release_of_a_lease_changed_since_it_was_read_is_a_conflict() {
    let (_server, _api, leases) = setup().await;
    let lease = first_claim(&leases, 60).await;
    leases
        .renew("feat-build", "feat-build-a1", Timestamp::now())
        .await
        .expect("renew");
    let result = leases.release(&lease).await;
    assert!(
        matches!(result, Err(ClaimError::Conflict { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn sidecar_renews_while_the_runner_beats_and_stops_when_fenced() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let created = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.config(false),
        std::future::pending(),
    ));
    renewed_after(&api, renew_ms(&created)).await;

    let takeover = serde_json::json!({"spec": {"holderIdentity": "feat-build-a2"}});
    api.patch(
        "feat-build",
        &PatchParams::default(),
        &Patch::Merge(&takeover),
    )
    .await
    .expect("another attempt takes the lease");
    let exit = exit_of(run).await;
    assert_eq!(
        exit,
        SidecarExit::Fenced {
            holder: "feat-build-a2".to_owned()
        }
    );
}

#[tokio::test]
async fn a_plain_sidecar_exits_once_the_runner_ended_and_renews_no_more() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let created = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.config(true),
        std::future::pending(),
    ));
    renewed_after(&api, renew_ms(&created)).await;
    run_dir.runner_ended();
    assert_eq!(exit_of(run).await, SidecarExit::Done);
    assert_not_renewed_any_more(&api).await;
}

#[tokio::test]
async fn a_native_sidecar_stops_renewing_once_the_runner_ended_and_waits_to_be_stopped() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let created = first_claim(&leases, 3).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.config(false),
        async move {
            let _ = stopped.await;
        },
    ));
    renewed_after(&api, renew_ms(&created)).await;
    run_dir.runner_ended();
    assert_not_renewed_any_more(&api).await;
    assert!(
        !run.is_finished(),
        "a native sidecar left before the kubelet stopped it"
    );
    let _ = stop.send(());
    assert_eq!(exit_of(run).await, SidecarExit::Stopped);
}

#[tokio::test]
async fn a_sidecar_whose_runner_was_killed_exits_without_renewing() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::empty();
    run_dir.silent_for_an_hour();
    let created = first_claim(&leases, 3).await;
    let exit = tokio::time::timeout(
        PATIENCE,
        sidecar::run(
            server.client_in(NS),
            run_dir.config(true),
            std::future::pending(),
        ),
    )
    .await
    .expect("sidecar stopped");
    assert_eq!(exit, SidecarExit::Done);
    let lease = api.get("feat-build").await.expect("lease");
    assert_eq!(renew_ms(&lease), renew_ms(&created));
}

#[tokio::test]
async fn a_sidecar_that_cannot_reach_the_api_server_retries_and_stops_the_runner_before_the_claim_lapses()
 {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    first_claim(&leases, 3).await;
    server.start_outage();
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.config(false),
        std::future::pending(),
    ));
    let stop_file = run_dir.path("claim-lost");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !stop_file.exists() {
        assert!(
            !run.is_finished(),
            "the sidecar gave up instead of retrying"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runner was never asked to stop"
        );
        run_dir.beat();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let why = std::fs::read_to_string(&stop_file).expect("stop file");
    assert!(why.contains("could not be renewed"), "{why}");
    server.end_outage();
    let before = std::time::SystemTime::now();
    let lease = renewed_after(
        &api,
        jiff::Timestamp::try_from(before)
            .expect("time")
            .as_millisecond(),
    )
    .await;
    assert_eq!(
        run_view::holder(&lease),
        Some("feat-build-a1"),
        "the sidecar keeps trying once the API is back"
    );
    run.abort();
}

#[tokio::test]
async fn sidecar_stops_when_the_claim_is_released() {
    let (server, _api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let lease = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.config(false),
        std::future::pending(),
    ));
    // Release with a fresh read: the sidecar may have renewed in between.
    let current = leases
        .get("feat-build")
        .await
        .expect("get")
        .unwrap_or(lease);
    let _ = leases.release(&current).await;
    let current = leases.get("feat-build").await.expect("get");
    if let Some(current) = current {
        leases.release(&current).await.expect("release");
    }
    let exit = exit_of(run).await;
    assert_eq!(exit, SidecarExit::Released);
}

#[tokio::test]
async fn a_released_claim_is_taken_over_with_the_next_fencing_token() {
    let (_server, _api, leases) = setup().await;
    let first = first_claim(&leases, 60).await;
    leases.release(&first).await.expect("release");
    let free = leases
        .get("feat-build")
        .await
        .expect("get")
        .expect("a released Lease is kept");
    assert!(claim::is_expired(&free, Timestamp::now()), "free to claim");
    let second = leases
        .take_over(&free, &second_attempt(60), Timestamp::now())
        .await
        .expect("take over");
    assert_eq!(run_view::holder(&second), Some("feat-build-a2"));
    assert_eq!(claim::lease_transitions(&second), 1);
}

/// The answer ConfigMap, once it exists.
async fn uploaded(server: &FakeApiServer) -> ConfigMap {
    let maps: Api<ConfigMap> = Api::namespaced(server.client_in(NS), NS);
    maps.get_opt(ANSWER)
        .await
        .expect("get ConfigMap")
        .expect("the answer was uploaded")
}

/// Runs a planning attempt's claim-keeper over `answers` until its runner ends; the
/// ConfigMap it uploaded.
async fn uploaded_when_the_runner_ends(answers: &AnswerDir) -> ConfigMap {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let created = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.planning_config(true, answers),
        std::future::pending(),
    ));
    renewed_after(&api, renew_ms(&created)).await;
    run_dir.runner_ended();
    assert_eq!(exit_of(run).await, SidecarExit::Done);
    uploaded(&server).await
}

fn data(map: &ConfigMap, key: &str) -> Option<String> {
    map.data.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_planning_claim_keeper_uploads_the_answer_owned_by_its_pod_before_it_exits() {
    let answers = AnswerDir::empty();
    answers.write("tasks.yaml", TASKS);
    answers.write("plan.md", "# The plan\n");
    let map = uploaded_when_the_runner_ends(&answers).await;
    assert_eq!(data(&map, "tasks.yaml").as_deref(), Some(TASKS));
    assert_eq!(data(&map, "plan.md").as_deref(), Some("# The plan\n"));
    let labels = map.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("ralph.dev/feature").map(String::as_str),
        Some("shop")
    );
    assert_eq!(
        labels.get("ralph.dev/task").map(String::as_str),
        Some("planning")
    );
    let owner = &map.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Pod", "feat-build-a1", "pod-uid-1")
    );
}

#[tokio::test]
async fn a_planner_that_wrote_no_task_list_leaves_a_problem_naming_the_file() {
    let answers = AnswerDir::empty();
    let map = uploaded_when_the_runner_ends(&answers).await;
    let problem = data(&map, "problem").expect("a problem");
    assert!(
        problem.contains("tasks.yaml") && problem.contains("write the file"),
        "{problem}"
    );
    assert_eq!(data(&map, "tasks.yaml"), None);
}

#[tokio::test]
async fn a_native_planning_claim_keeper_stopped_while_the_runner_lives_uploads_before_it_stops() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let answers = AnswerDir::empty();
    answers.write("tasks.yaml", TASKS);
    let created = first_claim(&leases, 3).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.planning_config(false, &answers),
        async move {
            let _ = stopped.await;
        },
    ));
    renewed_after(&api, renew_ms(&created)).await;
    let _ = stop.send(());
    assert_eq!(exit_of(run).await, SidecarExit::Stopped);
    assert_eq!(
        data(&uploaded(&server).await, "tasks.yaml").as_deref(),
        Some(TASKS)
    );
}

#[tokio::test]
async fn an_answer_uploaded_already_is_not_replaced() {
    let (server, api, leases) = setup().await;
    let run_dir = RunDir::beating();
    let answers = AnswerDir::empty();
    answers.write("tasks.yaml", TASKS);
    let first = sidecar::answer_config_map(&answers.upload(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(server.client_in(NS), NS);
    maps.create(&Default::default(), &first)
        .await
        .expect("first upload");
    answers.write("tasks.yaml", "tasks: []\n");
    let created = first_claim(&leases, 3).await;
    let run = tokio::spawn(sidecar::run(
        server.client_in(NS),
        run_dir.planning_config(true, &answers),
        std::future::pending(),
    ));
    renewed_after(&api, renew_ms(&created)).await;
    run_dir.runner_ended();
    assert_eq!(exit_of(run).await, SidecarExit::Done);
    assert_eq!(
        data(&uploaded(&server).await, "tasks.yaml").as_deref(),
        Some(TASKS)
    );
}

#[test]
fn an_answer_too_large_for_an_object_leaves_a_problem_saying_so() {
    let answers = AnswerDir::empty();
    // Text that does not compress: a counter hashed into hex.
    let tasks: String = (0u64..200_000)
        .map(|i| {
            format!(
                "{:016x}\n",
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ i
            )
        })
        .collect();
    answers.write("tasks.yaml", &tasks);
    let map = sidecar::answer_config_map(&answers.upload(), NS);
    let problem = data(&map, "problem").expect("a problem");
    assert!(
        problem.contains("more than an object may hold"),
        "{problem}"
    );
    assert!(map.binary_data.is_none());
}

#[test]
fn a_task_list_that_cannot_be_read_leaves_a_problem_naming_it() {
    let answers = AnswerDir::empty();
    std::fs::create_dir(answers.dir.path().join("tasks.yaml")).expect("a directory");
    let map = sidecar::answer_config_map(&answers.upload(), NS);
    let problem = data(&map, "problem").expect("a problem");
    assert!(
        problem.contains("tasks.yaml") && problem.contains("cannot be read"),
        "{problem}"
    );
}
