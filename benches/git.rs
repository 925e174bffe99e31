//! Figures for the git layer, against a real git server on 127.0.0.1 (see
//! tests/support/git_server.rs). Prints:
//! - clone time of a repository of 10,000 files and ~50 MB, shallow vs full, over HTTP with
//!   Basic auth, and the time of `RemoteRepo::prepare` (shallow clone + work branch);
//! - integration latency per task (commit + fetch + rebase + push), sequential tasks;
//! - throughput when 50 tasks finish at once and their pushes race;
//! - the same through the agent Pod's git steps as processes (`ralph git prepare`,
//!   `ralph git finish`, over HTTP with Basic auth): per task, and 50 finishing steps at once.
//!
//! Run with `cargo bench --bench git`; `cargo bench --bench git -- pod-steps` runs only the
//! last section.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // shared test support: this crate uses part of it
#[path = "../tests/support/git_server.rs"]
mod git_server;

use std::path::Path;
use std::time::{Duration, Instant};

use git_server::{GitServer, HTTP_TOKEN, HTTP_USER, git};
use ralph::workspace::{
    AttemptWorkspace, CloneFrom, CommitOutcome, Credentials, GitOptions, IntegrationOutcome,
    RemoteRepo, RepoSettings,
};
use rand::RngCore;

const FILES: usize = 10_000;
const FILE_BYTES: usize = 4 * 1024;
const HISTORY_COMMITS: usize = 10;
const FILES_PER_HISTORY_COMMIT: usize = 250;
const SEQUENTIAL_TASKS: u32 = 20;
const PARALLEL_TASKS: u32 = 50;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = GitServer::start();
    if std::env::args().any(|a| a == "pod-steps") {
        pod_steps(&server);
        return;
    }
    runtime.block_on(parallel_throughput(&server));
    runtime.block_on(integration_latency(&server));
    pod_steps(&server);
    clone_figures(&server, &runtime);
}

/// One attempt's volumes for the git step processes.
struct PodVolumes {
    root: tempfile::TempDir,
}

impl PodVolumes {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("volumes");
        let credentials = root.path().join("credentials");
        std::fs::create_dir_all(&credentials).expect("credentials");
        std::fs::write(credentials.join("username"), HTTP_USER).expect("username");
        std::fs::write(credentials.join("token"), HTTP_TOKEN).expect("token");
        Self { root }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.root.path().join(name)
    }

    fn step(&self, url: &str, task: &str, step: &str, extra: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"));
        command
            .args([
                "git",
                step,
                "--url",
                url,
                "--base-ref",
                "main",
                "--feature",
                "pods",
            ])
            .args([
                "--task",
                task,
                "--attempt",
                "1",
                "--credentials-secret",
                "bench",
            ])
            .arg("--workspace")
            .arg(self.path("workspace"))
            .arg("--state-file")
            .arg(self.path("prepared.json"))
            .arg("--credentials-dir")
            .arg(self.path("credentials"))
            .arg("--report-file")
            .arg(self.path(&format!("{step}.json")))
            .args(extra)
            .stdout(std::process::Stdio::null());
        command
    }

    fn finish(&self, url: &str, task: &str) -> std::process::Command {
        let result = self.path("result.json");
        self.step(
            url,
            task,
            "finish",
            &["--result-file", &result.to_string_lossy()],
        )
    }

    fn prepare_and_work(&self, url: &str, task: &str) -> Duration {
        let started = Instant::now();
        let status = self
            .step(url, task, "prepare", &[])
            .status()
            .expect("prepare");
        let elapsed = started.elapsed();
        assert!(status.success(), "prepare failed");
        std::fs::write(self.path("workspace").join(format!("{task}.txt")), "done\n")
            .expect("agent writes");
        let done = ralph::engine::testing::done(task);
        std::fs::write(
            self.path("result.json"),
            serde_json::to_string(&done).expect("json"),
        )
        .expect("result");
        elapsed
    }

    fn report(&self) -> ralph::engine::workspace::WorkspaceReport {
        let text = std::fs::read_to_string(self.path("finish.json")).expect("report");
        serde_json::from_str(&text).expect("report json")
    }
}

/// The agent Pod's git steps as processes, over HTTP with Basic auth.
fn pod_steps(server: &GitServer) {
    use ralph::engine::workspace::WorkspaceOutcome;
    server.create_repo("pods-seq");
    let url = server.http_url("pods-seq");
    let mut prepare_times = Vec::new();
    let mut finish_times = Vec::new();
    for task in 0..SEQUENTIAL_TASKS {
        let task = format!("t{task}");
        let volumes = PodVolumes::new();
        prepare_times.push(volumes.prepare_and_work(&url, &task));
        let started = Instant::now();
        let status = volumes.finish(&url, &task).status().expect("finish");
        finish_times.push(started.elapsed());
        assert!(status.success());
        assert_eq!(volumes.report().outcome, WorkspaceOutcome::Integrated);
    }
    println!(
        "Pod git steps over HTTP, {SEQUENTIAL_TASKS} sequential tasks: `ralph git prepare` {}; `ralph git finish` (commit + integrate) {}",
        summary(&mut prepare_times),
        summary(&mut finish_times)
    );

    server.create_repo("pods-par");
    let url = server.http_url("pods-par");
    let volumes: Vec<(String, PodVolumes)> = (0..PARALLEL_TASKS)
        .map(|task| {
            let task = format!("t{task}");
            let v = PodVolumes::new();
            v.prepare_and_work(&url, &task);
            (task, v)
        })
        .collect();
    let started = Instant::now();
    let children: Vec<std::process::Child> = volumes
        .iter()
        .map(|(task, v)| v.finish(&url, task).spawn().expect("spawn finish"))
        .collect();
    for mut child in children {
        child.wait().expect("wait");
    }
    let elapsed = started.elapsed();
    let reports: Vec<_> = volumes.iter().map(|(_, v)| v.report()).collect();
    let integrated = reports
        .iter()
        .filter(|r| r.outcome == WorkspaceOutcome::Integrated)
        .count();
    let pushes: Vec<u32> = reports.iter().filter_map(|r| r.push_attempts).collect();
    let total: u32 = pushes.iter().sum();
    println!(
        "{PARALLEL_TASKS} `ralph git finish` processes at once over HTTP: {integrated} integrated in {elapsed:.2?} = {:.1} integrations/s; push attempts: total {total}, mean {:.1}, max {}",
        integrated as f64 / elapsed.as_secs_f64(),
        f64::from(total) / pushes.len().max(1) as f64,
        pushes.iter().max().copied().unwrap_or_default()
    );
}

fn random_file(path: &Path, rng: &mut impl RngCore) {
    let mut bytes = vec![0u8; FILE_BYTES];
    rng.fill_bytes(&mut bytes);
    std::fs::write(path, bytes).expect("write file");
}

fn clone_figures(server: &GitServer, runtime: &tokio::runtime::Runtime) {
    let started = Instant::now();
    let mut rng = rand::rng();
    let bare = server.create_repo_with("big", |dir| {
        for i in 0..FILES {
            let sub = dir.join(format!("d{:02}", i % 100));
            std::fs::create_dir_all(&sub).expect("dir");
            random_file(&sub.join(format!("f{i:05}.bin")), &mut rng);
        }
    });
    let seed = tempfile::tempdir().expect("seed");
    git(seed.path(), &["clone", "-q", &bare.to_string_lossy(), "."]);
    for commit in 0..HISTORY_COMMITS {
        for j in 0..FILES_PER_HISTORY_COMMIT {
            let i = (commit * FILES_PER_HISTORY_COMMIT + j) % FILES;
            random_file(
                &seed.path().join(format!("d{:02}/f{i:05}.bin", i % 100)),
                &mut rng,
            );
        }
        git(
            seed.path(),
            &["commit", "-qam", &format!("history {commit}")],
        );
    }
    git(seed.path(), &["push", "-q", "origin", "main"]);
    git(&bare, &["repack", "-adq"]);
    let pack_bytes: u64 = std::fs::read_dir(bare.join("objects/pack"))
        .expect("packs")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "repository: {FILES} files of {FILE_BYTES} B, {} commits, {:.1} MB packed on the server (built in {:.1?})",
        HISTORY_COMMITS + 1,
        pack_bytes as f64 / 1e6,
        started.elapsed()
    );

    let url = server.http_url("big");
    let helper = format!(
        "credential.helper=!f() {{ echo username={HTTP_USER}; echo password={HTTP_TOKEN}; }}; f"
    );
    for (label, extra) in [
        (
            "shallow (--depth 1 --single-branch)",
            &["--depth", "1", "--single-branch"][..],
        ),
        ("full", &[][..]),
    ] {
        let mut times = Vec::new();
        for _ in 0..2 {
            let target = tempfile::tempdir().expect("target");
            let started = Instant::now();
            let mut args = vec!["-c", &helper, "clone", "-q"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&[&url, "repo"]);
            git(target.path(), &args);
            times.push(started.elapsed());
        }
        println!("clone over HTTP, {label}: {}", summary(&mut times));
    }

    let mut settings = RepoSettings::new(&url, "main");
    settings.credentials = Some(Credentials::Https {
        username: HTTP_USER.to_owned(),
        token: HTTP_TOKEN.to_owned(),
    });
    let repo = RemoteRepo::new(settings, "big", GitOptions::default()).expect("settings");
    let mut times = Vec::new();
    for attempt in 1..=2 {
        let target = tempfile::tempdir().expect("target");
        let started = Instant::now();
        runtime
            .block_on(repo.prepare(
                &target.path().join("ws"),
                "t-1",
                attempt,
                CloneFrom::FeatureBranch,
            ))
            .expect("prepare");
        times.push(started.elapsed());
    }
    println!(
        "RemoteRepo::prepare over HTTP (shallow clone + work branch): {}",
        summary(&mut times)
    );
}

/// A new repository `name` on `server`, over git://, for the feature `name`.
fn daemon_repo(server: &GitServer, name: &str, options: GitOptions) -> RemoteRepo {
    server.create_repo(name);
    RemoteRepo::new(
        RepoSettings::new(server.daemon_url(name), "main"),
        name,
        options,
    )
    .expect("settings")
}

/// Prepares task `t{task}`'s first attempt under `root`.
async fn prepare_task(repo: &RemoteRepo, root: &Path, task: u32) -> AttemptWorkspace {
    repo.prepare(
        &root.join(format!("t{task}")),
        &format!("t{task}"),
        1,
        CloneFrom::FeatureBranch,
    )
    .await
    .expect("prepare")
}

/// Writes task `t{task}`'s file `t{task}.txt` in `ws`.
fn write_task_file(ws: &AttemptWorkspace, task: u32) {
    std::fs::write(ws.dir.join(format!("t{task}.txt")), "done\n").expect("write");
}

async fn integration_latency(server: &GitServer) {
    let repo = daemon_repo(server, "seq", GitOptions::default());
    let root = tempfile::tempdir().expect("root");
    let mut prepare_times = Vec::new();
    let mut integrate_times = Vec::new();
    for task in 0..SEQUENTIAL_TASKS {
        let started = Instant::now();
        let ws = prepare_task(&repo, root.path(), task).await;
        prepare_times.push(started.elapsed());
        write_task_file(&ws, task);
        let started = Instant::now();
        let committed = repo.commit(&ws).await.expect("commit");
        assert!(matches!(committed, CommitOutcome::Committed { .. }));
        let outcome = repo.integrate(&ws).await.expect("integrate");
        assert!(matches!(outcome, IntegrationOutcome::Integrated { .. }));
        integrate_times.push(started.elapsed());
    }
    println!(
        "per task over git://, {SEQUENTIAL_TASKS} sequential tasks: prepare {}; commit + integrate {}",
        summary(&mut prepare_times),
        summary(&mut integrate_times)
    );
}

async fn parallel_throughput(server: &GitServer) {
    let repo = daemon_repo(
        server,
        "par",
        GitOptions {
            max_push_attempts: 200,
            ..GitOptions::default()
        },
    );
    let root = tempfile::tempdir().expect("root");
    let mut workspaces = Vec::new();
    for task in 0..PARALLEL_TASKS {
        let ws = prepare_task(&repo, root.path(), task).await;
        write_task_file(&ws, task);
        repo.commit(&ws).await.expect("commit");
        workspaces.push(ws);
    }
    let started = Instant::now();
    let outcomes = futures::future::join_all(workspaces.iter().map(|ws| repo.integrate(ws))).await;
    let elapsed = started.elapsed();
    let pushes: Vec<u32> = outcomes
        .into_iter()
        .map(|outcome| match outcome.expect("integrate") {
            IntegrationOutcome::Integrated { push_attempts, .. } => push_attempts,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let total: u32 = pushes.iter().sum();
    println!(
        "{PARALLEL_TASKS} tasks integrating at once over git://: all done in {elapsed:.2?} = {:.1} integrations/s; push attempts: total {total}, mean {:.1}, max {}",
        f64::from(PARALLEL_TASKS) / elapsed.as_secs_f64(),
        f64::from(total) / f64::from(PARALLEL_TASKS),
        pushes.iter().max().copied().unwrap_or_default()
    );
}

fn summary(times: &mut [Duration]) -> String {
    times.sort();
    let median = times[times.len() / 2];
    let p90 = times[(times.len() * 9 / 10).min(times.len() - 1)];
    format!(
        "median {median:.2?}, p90 {p90:.2?}, min {:.2?}, max {:.2?} (n={})",
        times[0],
        times[times.len() - 1],
        times.len()
    )
}
