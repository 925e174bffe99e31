//! Task DAG figures: full build (validation + derivation) with the ready set, and one
//! transition, on features of 1,000 / 10,000 / 100,000 tasks with ~2 dependencies each
//! (random edges to earlier tasks). Goals: 100,000 tasks built in under 50 ms; one
//! transition in under 1 ms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Bencher, BenchmarkId, Criterion, criterion_group, criterion_main};
use ralph::engine::dag::{Dag, TaskNode, TaskPhase, validate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// `n` Pending tasks; each after the first depends on two random earlier tasks.
fn feature(n: usize) -> Vec<TaskNode> {
    let mut rng = StdRng::seed_from_u64(n as u64);
    (0..n)
        .map(|i| TaskNode {
            name: format!("task-{i}"),
            depends_on: if i == 0 {
                Vec::new()
            } else {
                (0..2)
                    .map(|_| format!("task-{}", rng.random_range(0..i)))
                    .collect()
            },
            parent: None,
            priority: rng.random_range(0..4),
            order: i as u64,
            phase: TaskPhase::Pending,
        })
        .collect()
}

/// A DAG of `n` tasks halfway through its run (the first ready task marked Done each step).
fn half_done(n: usize) -> Dag {
    let Ok(mut dag) = Dag::new(feature(n)) else {
        panic!("the benchmark feature is acyclic by construction");
    };
    while dag.counts().done < n / 2 {
        let Some(next) = dag.ready().next().map(str::to_owned) else {
            break;
        };
        let _ = dag.set_phase(&next, TaskPhase::Done);
    }
    dag
}

/// Benches `routine` on the features of every size, in the group `name` (10 samples each).
fn on_every_size(
    c: &mut Criterion,
    name: &str,
    routine: impl Fn(&mut Bencher<'_>, &Vec<TaskNode>),
) {
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    for n in SIZES {
        group.bench_with_input(BenchmarkId::from_parameter(n), &feature(n), &routine);
    }
    group.finish();
}

fn build_and_ready(c: &mut Criterion) {
    on_every_size(c, "build_and_ready", |b, nodes| {
        b.iter_batched(
            || nodes.clone(),
            |nodes| {
                let dag = Dag::new(nodes).ok();
                let ready = dag
                    .as_ref()
                    .map(|dag| dag.ready().map(str::len).sum::<usize>());
                (dag, ready)
            },
            BatchSize::LargeInput,
        );
    });
}

fn validate_only(c: &mut Criterion) {
    on_every_size(c, "validate", |b, nodes| {
        b.iter(|| validate(black_box(nodes)).is_ok());
    });
}

/// Marks the first ready task Done and reads the next one, on a DAG halfway through its run;
/// only that is timed (finding the task and rebuilding a finished DAG are not).
fn one_transition(c: &mut Criterion) {
    let mut group = c.benchmark_group("transition");
    for n in SIZES {
        let mut dag = half_done(n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if dag.ready_count() == 0 {
                        dag = half_done(n);
                    }
                    let next = dag.ready().next().map(str::to_owned).unwrap_or_default();
                    let started = Instant::now();
                    let transitions = dag.set_phase(&next, TaskPhase::Done);
                    let following = dag.ready().next().map(str::len);
                    total += started.elapsed();
                    let _ = black_box((transitions, following));
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, build_and_ready, validate_only, one_transition);
criterion_main!(benches);
