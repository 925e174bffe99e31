//! A `ralph controller` process against the in-process fake API server, for benches that
//! measure the controller's own CPU time and memory (`/proc/PID/...`).

use super::fake_apiserver::FakeApiServer;

/// A `ralph controller` process (no leader election), killed on drop.
pub struct ControllerProcess {
    child: tokio::process::Child,
    metrics_addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl ControllerProcess {
    /// Starts the controller watching `namespace` of `server` with the extra `args` (e.g. a
    /// rate limit) and `env` (e.g. `MALLOC_ARENA_MAX`). The log level is `RALPH_BENCH_LOG`
    /// (default `warn`); `RALPH_BENCH_BIN` runs another `ralph` binary (e.g. an older
    /// build, to compare).
    pub fn start(
        server: &FakeApiServer,
        namespace: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(namespace)).expect("kubeconfig");
        // A port free now, so that `/metrics` can be read (the controller binds it again).
        let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let binary = std::env::var("RALPH_BENCH_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_ralph").to_owned());
        // Native sidecars unless the caller chose.
        let sidecar_default = if args.iter().any(|a| a == "--native-sidecars") {
            Vec::new()
        } else {
            vec!["--native-sidecars", "true"]
        };
        let child = tokio::process::Command::new(binary)
            .args([
                "controller",
                "--namespace",
                namespace,
                "--ralph-image",
                "ralph:bench",
                "--no-leader-election",
                "--metrics-addr",
                &metrics_addr.to_string(),
                "--max-concurrent-attempts",
                "10000",
                "--log",
                &std::env::var("RALPH_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
            ])
            .args(sidecar_default)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("KUBECONFIG", &kubeconfig)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn ralph controller");
        Self {
            child,
            metrics_addr,
            _dir: dir,
        }
    }

    /// The process id (0 once it has exited).
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let after_name = stat.rsplit(')').next().unwrap_or_default();
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Fields 14 and 15 of /proc/PID/stat (utime, stime), counted after the name.
        (ticks(11) + ticks(12)) / 100.0
    }

    /// A `/proc/PID/status` figure in kB, as MiB (e.g. `VmRSS`, `VmHWM`, `RssAnon`).
    pub fn status_mib(&self, field: &str) -> f64 {
        let prefix = format!("{field}:");
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(&prefix))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
            / 1024.0
    }

    /// Resident memory now, MiB.
    pub fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS")
    }

    /// The allocator's `ralph_heap_bytes` figure of `kind` (allocated, active, resident) as
    /// MiB, read from `/metrics`; 0 when it cannot be read.
    pub fn heap_mib(&self, kind: &str) -> f64 {
        use std::io::{Read, Write};
        let mut text = String::new();
        let read = std::net::TcpStream::connect(self.metrics_addr).and_then(|mut stream| {
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            stream.read_to_string(&mut text)
        });
        let prefix = format!("ralph_heap_bytes{{kind=\"{kind}\"}} ");
        read.ok()
            .and_then(|_| text.lines().find_map(|line| line.strip_prefix(&prefix)))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / (1024.0 * 1024.0)
    }

    /// Stops the process and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The task count of a Feature's judged status: one the controller wrote from every Task
/// the Feature has (its observed generation the Feature's), not the first status it shows
/// while the Tasks are being created.
pub fn judged_total(feature: &ralph::api::Feature) -> Option<u32> {
    let status = feature.status.as_ref()?;
    let generation = feature.metadata.generation;
    (generation.is_some() && status.observed_generation == generation)
        .then_some(status.counts.total)
}

/// The parts a bench binary was asked to run (`cargo bench --bench NAME -- PART...`, flags
/// left out); none named: every part.
pub struct BenchParts(Vec<String>);

impl BenchParts {
    /// The parts named on the command line.
    pub fn from_args() -> Self {
        Self(
            std::env::args()
                .skip(1)
                .filter(|a| !a.starts_with('-'))
                .collect(),
        )
    }

    /// True when `part` runs: it was named, or nothing was.
    pub fn runs(&self, part: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|p| p == part)
    }

    /// True when any of `parts` was named.
    pub fn names_any(&self, parts: &[&str]) -> bool {
        self.0.iter().any(|p| parts.contains(&p.as_str()))
    }
}

/// Runs a bench's `parts` on a multi-threaded runtime.
pub fn run_bench<F: std::future::Future<Output = ()>>(parts: impl FnOnce(BenchParts) -> F) {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(parts(BenchParts::from_args()));
}
