//! Figures for the git layer, against a real git server on 127.0.0.1 (see
//! tests/support/git_server.rs). Prints:
//! - clone time of a repository of 10,000 files and ~50 MB, shallow vs full, over HTTP with
//!   Basic auth, and the time of `RemoteRepo::prepare` (shallow clone + work branch);
//! - integration latency per task (commit + fetch + rebase + push), sequential tasks;
//! - throughput when 50 tasks finish at once and their pushes race.
//!
//! Run with `cargo bench --bench git`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/git_server.rs"]
mod git_server;

use std::path::Path;
use std::time::{Duration, Instant};

use git_server::{GitServer, HTTP_TOKEN, HTTP_USER, git};
use ralph::workspace::{
    AttemptWorkspace, CommitOutcome, Credentials, GitOptions, IntegrationOutcome, RemoteRepo,
    RepoSettings,
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
    runtime.block_on(parallel_throughput(&server));
    runtime.block_on(integration_latency(&server));
    clone_figures(&server, &runtime);
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
            .block_on(repo.prepare(&target.path().join("ws"), "t-1", attempt))
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
    repo.prepare(&root.join(format!("t{task}")), &format!("t{task}"), 1)
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
