//! `ralph run` throughput: a 1,000-task feature (standalone Task objects, each task
//! depending on the one 16 before it) with an instant scripted agent, `--parallel 16`.
//! Prints tasks per second and the peak resident memory (VmHWM) of the `ralph run`
//! process, sampled from /proc while it runs. Run: `cargo bench --bench local`.
// Test code: a fixture that cannot be built should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TASKS: usize = 1_000;
const PARALLEL: usize = 16;

fn manifest() -> String {
    let mut yaml = String::from(
        "apiVersion: ralph.dev/v1alpha1\nkind: Feature\nmetadata:\n  name: bench\nspec:\n  \
         agent:\n    command: [\"unused\"]\n  tasks: []\n",
    );
    for i in 0..TASKS {
        let _ = write!(
            yaml,
            "---\napiVersion: ralph.dev/v1alpha1\nkind: Task\nmetadata:\n  name: t{i:04}\nspec:\n  \
             featureRef: bench\n  title: Task {i}\n  description: Instant task {i}.\n"
        );
        if i >= PARALLEL {
            let _ = writeln!(yaml, "  dependsOn: [t{:04}]", i - PARALLEL);
        }
    }
    yaml
}

/// Peak resident set (VmHWM) of a live process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    // `cargo bench` passes harness flags such as `--bench`; this binary takes none.
    let dir = tempfile::tempdir().expect("temporary directory");
    let feature = dir.path().join("bench.yaml");
    let script = dir.path().join("instant.yaml");
    std::fs::write(&feature, manifest()).expect("write manifest");
    std::fs::write(
        &script,
        "default:\n  - text: \"<task-done>{task}</task-done>\"\n",
    )
    .expect("write script");
    let agent = format!("ralph agent script {}", script.display());
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("run")
        .arg(&feature)
        .args([
            "--agent",
            &agent,
            "--parallel",
            &PARALLEL.to_string(),
            "--json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ralph run starts");
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(child.id()) {
            peak = peak.max(kib);
        }
        match child.try_wait().expect("wait") {
            Some(status) => break status,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let elapsed = started.elapsed();
    assert_eq!(status.code(), Some(0), "ralph run failed");
    println!(
        "local run: {TASKS} tasks, --parallel {PARALLEL}: {:.2} s, {:.1} tasks/s, \
         peak memory of `ralph run` {:.1} MiB (VmHWM)",
        elapsed.as_secs_f64(),
        TASKS as f64 / elapsed.as_secs_f64(),
        peak as f64 / 1024.0
    );
}
