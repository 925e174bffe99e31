//! Sigil-scanner throughput over agent-sized messages, whole and in 1 KiB chunks.
//! Criterion prints the figures (MiB/s); the goal is well above 200 MB/s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use ralph::engine::sigils::{self, SigilScanner};

const CHUNK: usize = 1024;

/// Agent-like prose (Markdown, code with `<` and `>`), with notes spread through it and the
/// final sigil block at the end.
fn message(len: usize) -> String {
    const PARAGRAPH: &str = "I read `src/api/mod.rs` and changed `fn parse(input: &str) -> Result<Vec<u8>, Error>` \
        so that `a < b && c > d` holds; the tests in tests/api.rs now pass.\n\
        Next I looked at the controller: it requeues after `Duration::from_secs(10)`.\n\n";
    let mut text = String::with_capacity(len + 256);
    let mut tags = [
        "<journal>Parser rewritten; all tests pass.</journal>\n",
        "<knowledge tags=\"rust,parsing\" title=\"Chunked input\">Keep only the unfinished tail.</knowledge>\n",
        "```rust\nlet done = \"<task-done>build-api</task-done>\";\n```\n",
    ]
    .into_iter();
    let mut next_tag_at = len / 4;
    while text.len() < len {
        text.push_str(PARAGRAPH);
        if text.len() >= next_tag_at {
            if let Some(tag) = tags.next() {
                text.push_str(tag);
            }
            next_tag_at += len / 4;
        }
    }
    text.push_str("\n<task-done>build-api</task-done>\n");
    text
}

/// Splits at `size` bytes, moved back to character boundaries.
fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut pieces = Vec::with_capacity(text.len() / size + 1);
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&text[start..end]);
        start = end;
    }
    pieces
}

fn scan_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("sigils");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    for (label, len) in [
        ("64KiB", 64 * 1024),
        ("4MiB", 4 * 1024 * 1024),
        ("10MB", 10_000_000),
    ] {
        let text = message(len);
        assert!(
            sigils::parse(&text).task_done.is_some(),
            "the bench text must hold its sigils"
        );
        bench_parsers(&mut group, label, &text);
    }
    group.finish();
}

/// Text built to defeat a naive parser: unclosed text tags and endless partial tags.
fn adversarial_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("sigils-adversarial");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    let len = 4 * 1024 * 1024;
    let cases = [
        (
            "unclosed-journals",
            "<journal> notes that never end ".repeat(len / 31),
        ),
        ("open-brackets", "<".repeat(len)),
        ("backticks", "` ``".repeat(len / 4)),
        ("fence-lines", "```\n~~~\n".repeat(len / 8)),
        (
            "quoted-sigils",
            "> <task-done>x</task-done>\n".repeat(len / 27),
        ),
        (
            "partial-tags",
            "<task-done>x <promise>FAIL <knowledge title='t' ".repeat(len / 47),
        ),
    ];
    for (label, text) in cases {
        bench_parsers(&mut group, label, &text);
    }
    group.finish();
}

/// Benches parsing `text` whole and scanning it in 1 KiB chunks, as `label`.
fn bench_parsers(group: &mut BenchmarkGroup<'_, WallTime>, label: &str, text: &str) {
    let pieces = chunks(text, CHUNK);
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_with_input(BenchmarkId::new("whole", label), text, |b, text| {
        b.iter(|| sigils::parse(black_box(text)))
    });
    group.bench_with_input(
        BenchmarkId::new("chunks-1KiB", label),
        &pieces,
        |b, pieces| {
            b.iter(|| {
                let mut scanner = SigilScanner::new();
                for piece in pieces {
                    scanner.push(black_box(piece));
                }
                scanner.finish()
            })
        },
    );
}

criterion_group!(benches, scan_throughput, adversarial_throughput);
criterion_main!(benches);
