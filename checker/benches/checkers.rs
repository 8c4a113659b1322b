//! Checker throughput on generated histories of a correct lock (so every
//! checker has to look at everything): `cargo bench -p checker`.
//!
//! Besides criterion's timings, each case prints once how fast it went and
//! its peak heap, from a counting allocator: the figures the speed and
//! memory targets are about (`whole-check-streamed` is `lockstorm check`).

// The counting allocator implements `GlobalAlloc`, an unsafe trait.
#![allow(unsafe_code)]

use checker::generate::{contended_history, valid_history, Contended};
use checker::History;
use checker::{check_linearizability, Budget};
use checker::{OnePass, Pairing};
use checker::{Promise, Window};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only the counts
// are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        // SAFETY: the caller's `layout` contract passes straight through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` once over `n` events (or ops) and prints how fast, and how much
/// heap it needed beyond what was live.
fn report_peak<T>(label: &str, n: u64, f: impl FnOnce() -> T) -> T {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let start = std::time::Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    let peak = PEAK.load(Relaxed) - base;
    eprintln!(
        "{label}: {:.2} s once ({:.2} M/s), peak heap {:.1} MB above the input",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64() / 1e6,
        peak as f64 / 1e6
    );
    out
}

/// ~10 events a cycle with 5 workers.
fn history_of(events: u64) -> History {
    valid_history(42, 5, events / 10, 20)
}

fn linear_checkers(h: &History) -> usize {
    let mut pass = OnePass::default();
    let mut pairing = Pairing::default();
    for e in h.in_time_order() {
        pairing.feed(e, &mut pass);
    }
    pass.counts().iter().map(|(_, n)| *n as usize).sum()
}

fn to_jsonl(h: &History) -> Vec<u8> {
    let mut text = Vec::new();
    for e in &h.events {
        serde_json::to_writer(&mut text, e).unwrap();
        text.push(b'\n');
    }
    text
}

fn linear(c: &mut Criterion) {
    let mut group = c.benchmark_group("linear-checkers");
    group.sample_size(10);
    for events in [1_000_000u64, 10_000_000] {
        let history = history_of(events);
        let n = history.events.len() as u64;
        report_peak(&format!("linear-checkers/{n}"), n, || {
            linear_checkers(&history)
        });
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &history, |b, h| {
            b.iter(|| linear_checkers(h))
        });
    }
    group.finish();

    // Streamed from JSONL: parsing included, linearizability left out.
    let mut group = c.benchmark_group("linear-checkers-streamed");
    group.sample_size(10);
    let history = history_of(1_000_000);
    let text = to_jsonl(&history);
    drop(history);
    let n = text.iter().filter(|&&b| b == b'\n').count() as u64;
    // Generated events are ~500 ns apart: a 1 ms window holds ~2000.
    let window = 1_000_000;
    let stream = |t: &[u8]| checker::check_jsonl(t, Promise::MutualExclusion, window, false);
    let (results, _) = report_peak(&format!("linear-checkers-streamed/{n}"), n, || {
        stream(&text)
    })
    .unwrap();
    assert!(results.anomalies.values().all(|a| a.count == 0));
    group.throughput(Throughput::Elements(n));
    group.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, t| {
        b.iter(|| stream(t))
    });
    group.finish();
}

/// The whole check as `lockstorm check` runs it on a history file: parsed
/// from JSONL, every checker, linearizability too, in the harness's first
/// window (120 s, at most 65 536 events waiting). Events/s and peak heap
/// once for 1 M and 10 M events; criterion's timing for 1 M.
fn whole_streamed(c: &mut Criterion) {
    let window = Window {
        ns: 120_000_000_000,
        events: 1 << 16,
    };
    let stream = |t: &[u8]| checker::check_jsonl(t, Promise::MutualExclusion, window, true);
    let mut group = c.benchmark_group("whole-check-streamed");
    group.sample_size(10);
    for events in [1_000_000u64, 10_000_000] {
        let text = to_jsonl(&history_of(events));
        let n = text.iter().filter(|&&b| b == b'\n').count() as u64;
        let label = format!("whole-check-streamed/{n}");
        let (results, stats) = report_peak(&label, n, || stream(&text)).unwrap();
        assert_eq!(results.valid, checker::Validity::True, "{results:?}");
        assert_eq!(stats.late, 0);
        if events > 1_000_000 {
            // About 10 s a run: the figure above is the one to read.
            continue;
        }
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, t| {
            b.iter(|| stream(t))
        });
    }
    group.finish();
}

fn all_checkers(c: &mut Criterion) {
    let mut group = c.benchmark_group("all-checkers");
    group.sample_size(10);
    let history = history_of(1_000_000);
    let n = history.events.len() as u64;
    report_peak(&format!("all-checkers/{n}"), n, || {
        checker::check(&history, Promise::MutualExclusion)
    });
    group.throughput(Throughput::Elements(n));
    group.bench_with_input(BenchmarkId::from_parameter(n), &history, |b, h| {
        b.iter(|| checker::check(h, Promise::MutualExclusion))
    });
    group.finish();
}

fn linearizability(c: &mut Criterion) {
    let mut group = c.benchmark_group("linearizability");
    group.sample_size(10);
    for processes in [5u64, 20] {
        for ops in [10_000u64, 100_000, 1_000_000] {
            // Three lock ops a cycle (two acquire attempts, one release);
            // 2% of releases end `info`.
            let history = valid_history(7, processes, ops / 3, 20);
            let id = format!("linearizability/{processes}-processes/{ops}");
            let outcome = report_peak(&id, ops, || {
                check_linearizability(&history, Budget::default())
            });
            assert_eq!(outcome.valid, checker::Validity::True, "{id}: {outcome:?}");
            group.throughput(Throughput::Elements(ops));
            let id = BenchmarkId::new(format!("{processes}-processes"), ops);
            group.bench_with_input(id, &history, |b, h| {
                b.iter(|| check_linearizability(h, Budget::default()))
            });
        }
    }
    group.finish();
}

/// The `lose-reply` shape (issue 25): 20 workers contending, each acquire
/// retrying within the op for up to 4 s, and a fifth of the acquires ending
/// `info`, never released (their workers go on under new process ids). The
/// search alone must decide it valid within 10 s, and so must the whole check
/// as `lockstorm check` runs it (streamed, every checker); criterion times
/// the search.
fn lost_replies(c: &mut Criterion) {
    let shape = Contended {
        processes: 20,
        lock_ops: 100_000,
        info_acquire_per_mille: 200,
    };
    let history = contended_history(25, shape);
    let ops = shape.lock_ops;
    let id = format!("linearizability-lost-replies/20-processes/{ops}");
    let started = std::time::Instant::now();
    let outcome = report_peak(&id, ops, || {
        check_linearizability(&history, Budget::default())
    });
    assert_eq!(outcome.valid, checker::Validity::True, "{id}: {outcome:?}");
    assert!(
        started.elapsed().as_secs() < 10,
        "{id}: over the 10 s target"
    );

    let window = Window {
        ns: 120_000_000_000,
        events: 1 << 16,
    };
    let text = to_jsonl(&history);
    let n = text.iter().filter(|&&b| b == b'\n').count() as u64;
    let label = format!("whole-check-streamed-lost-replies/{n}");
    let (results, _) = report_peak(&label, n, || {
        checker::check_jsonl(&text[..], Promise::MutualExclusion, window, true)
    })
    .unwrap();
    assert_eq!(results.valid, checker::Validity::True, "{results:?}");

    let mut group = c.benchmark_group("linearizability-lost-replies");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ops));
    let id = BenchmarkId::new("20-processes", ops);
    group.bench_with_input(id, &history, |b, h| {
        b.iter(|| check_linearizability(h, Budget::default()))
    });
    group.finish();
}

/// Workers that go on under the same process id after a lost reply
/// (`generate::live`, issue 43): 20 workers, a fifth of the acquires
/// `info`, with tokens and without, 100 k and 1 M lock ops; the search
/// alone, each size timed once with its peak heap, then criterion on 100 k.
fn live_info(c: &mut Criterion) {
    use checker::generate::live::{live_history, Live};
    let mut group = c.benchmark_group("linearizability-live-info");
    group.sample_size(10);
    for tokens in [true, false] {
        let name = if tokens { "tokens" } else { "tokenless" };
        for ops in [100_000, 1_000_000] {
            let history = live_history(1, Live::lost_acquires(ops, tokens));
            let id = format!("linearizability-live-info/{name}/{ops}");
            let started = std::time::Instant::now();
            let outcome = report_peak(&id, ops, || {
                check_linearizability(&history, Budget::default())
            });
            println!("{id}: {:?} in {:.2?}", outcome.valid, started.elapsed());
            assert_eq!(outcome.valid, checker::Validity::True, "{id}: {outcome:?}");
            if ops == 100_000 {
                group.throughput(Throughput::Elements(ops));
                let id = BenchmarkId::new(name, ops);
                group.bench_with_input(id, &history, |b, h| {
                    b.iter(|| check_linearizability(h, Budget::default()))
                });
            }
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    linear,
    whole_streamed,
    all_checkers,
    linearizability,
    lost_replies,
    live_info
);
criterion_main!(benches);
