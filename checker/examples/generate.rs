//! Writes a seeded history of a correct lock as JSONL, for measuring
//! `lockstorm check` on large inputs:
//!
//! ```sh
//! cargo run --release -p checker --example generate -- 1000000 > /tmp/h1m.jsonl
//! /usr/bin/time -v target/release/lockstorm check --promise mutual-exclusion /tmp/h1m.jsonl
//! ```
//!
//! The shape is the benchmarks': 5 processes, 2% of releases `info`, about
//! `events` events (10 per lock cycle).

use std::io::Write;

fn main() {
    let events: u64 = match std::env::args().nth(1).map(|n| n.parse()) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("usage: generate EVENTS > history.jsonl (EVENTS: a whole number)");
            std::process::exit(254);
        }
    };
    let history = checker::generate::valid_history(42, 5, events / 10, 20);
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
