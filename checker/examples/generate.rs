//! Writes a seeded history of a correct lock as JSONL, for measuring
//! `lockstorm check` (and other checkers) on large inputs:
//!
//! ```sh
//! cargo run --release -p checker --example generate -- 1000000 > /tmp/h1m.jsonl
//! /usr/bin/time -v target/release/lockstorm check --promise mutual-exclusion /tmp/h1m.jsonl
//! ```
//!
//! `generate EVENTS` is the benchmarks' shape: 5 processes, 2% of releases
//! `info`, about `EVENTS` events (10 per lock cycle). `generate LOCK_OPS
//! SHAPE [SEED]` writes a `checker::generate::live` history of `LOCK_OPS`
//! lock ops instead, its workers going on under the same id after a lost
//! reply; SHAPE is one of:
//!
//! - `live`: 20 workers, a fifth of the acquires `info` (with tokens);
//! - `live-tokenless`: the same, with no tokens (an owner is its process);
//! - `live-faults`: 8 workers; lost acquire and release replies, leases that
//!   run out mid-hold, crashed holders;
//! - any of these with `-overlap`: one refusal inside a certain hold turned
//!   into a grant, so the history is not linearizable.

use checker::generate::live::{live_history, with_overlap, Live};
use checker::history::History;
use std::io::Write;

fn usage() -> ! {
    eprintln!(
        "usage: generate EVENTS | generate LOCK_OPS live[-tokenless|-faults][-overlap] [SEED] > history.jsonl"
    );
    std::process::exit(254);
}

fn live(lock_ops: u64, shape: &str, seed: u64) -> Option<History> {
    let (name, overlap) = match shape.strip_suffix("-overlap") {
        Some(name) => (name, true),
        None => (shape, false),
    };
    let shape = match name {
        "live" => Live::lost_acquires(lock_ops, true),
        "live-tokenless" => Live::lost_acquires(lock_ops, false),
        "live-faults" => Live {
            processes: 8,
            lock_ops,
            info_acquire: 200,
            info_release: 100,
            expiry: 30,
            crash: 10,
            tokens: true,
        },
        _ => usage(),
    };
    let h = live_history(seed, shape);
    match overlap {
        true => with_overlap(&h),
        false => Some(h),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| {
        args.get(i)
            .map(|n| n.parse::<u64>().unwrap_or_else(|_| usage()))
    };
    let size = number(0).unwrap_or_else(|| usage());
    let history = match args.get(1) {
        None => checker::generate::valid_history(42, 5, size / 10, 20),
        Some(shape) => live(size, shape, number(2).unwrap_or(1)).unwrap_or_else(|| {
            eprintln!("generate: this history has no refusal inside a hold to turn into a grant; give more LOCK_OPS");
            std::process::exit(254);
        }),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for e in &history.events {
        let written = serde_json::to_writer(&mut out, e).map_err(std::io::Error::from);
        if written.and_then(|()| out.write_all(b"\n")).is_err() {
            std::process::exit(255);
        }
    }
    if out.flush().is_err() {
        std::process::exit(255);
    }
}
