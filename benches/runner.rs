//! Runner figures with the scripted agent over a real stdio pipe (prints; asserts only
//! that Landlock was enforced): runner start to the agent's answer to `initialize` (the first ACP request),
//! with and without Landlock confinement, the cost of restricting a thread, and session
//! updates relayed per second.
//!
//! `cargo bench --bench runner` (release build of the `ralph` binary as the agent).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ralph::engine::attempt::LandlockState;
use ralph::runner::config::Confinement;
use ralph::runner::{EventLog, RunnerConfig, run_attempt};
use tokio_util::sync::CancellationToken;

const STARTS: usize = 30;
const RELAY_UPDATES: usize = 20_000;
const RELAY_RUNS: usize = 5;

fn main() {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("scratch directory");
    let script = dir.path().join("script.yaml");
    let chunk_text = "x".repeat(RELAY_UPDATES);
    std::fs::write(
        &script,
        format!("tasks:\n  start:\n    - text: hi\n  relay:\n    - split: \"{chunk_text}\"\n"),
    )
    .expect("script");

    let config = |task: &str| {
        let mut config = RunnerConfig::new(
            task,
            "benchmark",
            dir.path(),
            vec![
                env!("CARGO_BIN_EXE_ralph").to_string(),
                "agent".into(),
                "script".into(),
                script.display().to_string(),
            ],
        );
        config.events = EventLog::to_writer(std::io::sink());
        config
    };

    for confinement in [Confinement::Disabled, Confinement::BestEffort] {
        let mut initialize: Vec<u64> = (0..STARTS)
            .filter_map(|_| {
                let mut config = config("start");
                config.confinement = confinement;
                let result = runtime
                    .block_on(run_attempt(config, CancellationToken::new()))
                    .expect("attempt");
                result.timings.initialize_ms
            })
            .collect();
        initialize.sort_unstable();
        println!(
            "runner start -> initialize answered, confinement {confinement:?} ({} runs): median {} ms, p90 {} ms, max {} ms",
            initialize.len(),
            percentile(&initialize, 50),
            percentile(&initialize, 90),
            initialize.last().copied().unwrap_or(0)
        );
    }
    let mut restricting: Vec<u64> = (0..STARTS * 10)
        .map(|_| {
            let started = Instant::now();
            let report = ralph::runner::confine::probe();
            assert_eq!(report.landlock, LandlockState::Enforced, "{report:?}");
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
        })
        .collect();
    restricting.sort_unstable();
    println!(
        "a thread restricting itself with Landlock ({} runs): median {} µs, p90 {} µs",
        restricting.len(),
        percentile(&restricting, 50),
        percentile(&restricting, 90)
    );

    let mut rates: Vec<f64> = (0..RELAY_RUNS)
        .map(|_| {
            let started = Instant::now();
            let result = runtime
                .block_on(run_attempt(config("relay"), CancellationToken::new()))
                .expect("attempt");
            let setup = Duration::from_millis(result.timings.initialize_ms.unwrap_or(0));
            let turn = started.elapsed().saturating_sub(setup);
            RELAY_UPDATES as f64 / turn.as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "session updates relayed ({RELAY_UPDATES} one-character chunks, logged as JSON lines, {RELAY_RUNS} runs): median {:.0}/s, best {:.0}/s",
        rates[rates.len() / 2],
        rates.last().copied().unwrap_or(0.0)
    );
}

fn percentile(sorted: &[u64], percent: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * percent / 100]
}
