//! Checker throughput on generated histories of a correct lock (so every
//! checker has to look at everything): `cargo bench -p checker`.

use checker::generate::valid_history;
use checker::linear::{self, Budget};
use checker::verdict::Promise;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn all_checkers(c: &mut Criterion) {
    let mut group = c.benchmark_group("all-checkers");
    group.sample_size(10);
    // ~10 events a cycle: 100k cycles ≈ 1M events.
    for cycles in [10_000u64, 100_000] {
        let history = valid_history(42, 5, cycles, 20);
        group.throughput(Throughput::Elements(history.events.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(history.events.len()),
            &history,
            |b, h| b.iter(|| checker::check(h, Promise::MutualExclusion)),
        );
    }
    group.finish();
}

fn linearizability(c: &mut Criterion) {
    let mut group = c.benchmark_group("linearizability");
    group.sample_size(10);
    for processes in [5u64, 20] {
        for ops in [10_000u64, 100_000] {
            // Four lock ops (two acquire attempts, one release) a cycle.
            let history = valid_history(7, processes, ops / 3, 20);
            group.throughput(Throughput::Elements(ops));
            let id = BenchmarkId::new(format!("{processes}-processes"), ops);
            group.bench_with_input(id, &history, |b, h| {
                b.iter(|| linear::check(h, Budget::default()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, all_checkers, linearizability);
criterion_main!(benches);
