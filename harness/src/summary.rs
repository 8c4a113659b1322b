//! The short human summary printed at the end of a run or a check.

use checker::verdict::{Results, Validity};
use std::fmt::Write;

pub fn verdict_word(v: Validity) -> &'static str {
    match v {
        Validity::True => "VALID",
        Validity::False => "INVALID",
        Validity::Unknown => "UNKNOWN",
    }
}

/// A few lines: the verdict, every anomaly count, rates, and where to look.
pub fn render(title: &str, results: &Results, path: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{title}: {} (promise: {})",
        verdict_word(results.valid),
        results.promise
    );
    let counts: Vec<String> = results
        .anomalies
        .iter()
        .map(|(name, a)| {
            let mark = if a.count > 0 && results.promise.counts(name) {
                "!"
            } else {
                ""
            };
            format!("{name} {}{mark}", a.count)
        })
        .collect();
    let _ = writeln!(out, "  anomalies: {}", counts.join(", "));
    let s = &results.stats;
    let _ = writeln!(
        out,
        "  ops: {} ({} ok, {} fail, {} info) in {:.1} s, {:.1} ops/s, {:.1} lock cycles/s",
        s.ops, s.ok, s.fail, s.info, s.duration_s, s.ops_per_s, s.cycles_per_s
    );
    if let Some(line) = counter_line(results) {
        let _ = writeln!(out, "  {line}");
    }
    if !s.errors.is_empty() {
        let errors: Vec<String> = s.errors.iter().map(|(e, n)| format!("{e} {n}")).collect();
        let _ = writeln!(out, "  errors: {}", errors.join(", "));
    }
    let first_anomaly = results
        .anomalies
        .iter()
        .filter(|(name, _)| results.promise.counts(name))
        .filter_map(|(_, a)| a.first_time)
        .min();
    match (s.first_fault_time, first_anomaly) {
        (Some(fault), Some(anomaly)) if anomaly < fault => {
            let _ = writeln!(
                out,
                "  first anomaly at {:.2} s, before the first fault at {:.2} s",
                secs(anomaly),
                secs(fault)
            );
        }
        (Some(fault), Some(anomaly)) => {
            let _ = writeln!(
                out,
                "  first fault at {:.2} s, first anomaly at {:.2} s ({:+.2} s)",
                secs(fault),
                secs(anomaly),
                secs(anomaly) - secs(fault)
            );
        }
        (None, Some(anomaly)) => {
            let _ = writeln!(
                out,
                "  first anomaly at {:.2} s (no fault injected)",
                secs(anomaly)
            );
        }
        (Some(fault), None) => {
            let _ = writeln!(out, "  first fault at {:.2} s, no anomaly", secs(fault));
        }
        (None, None) => {}
    }
    for note in &results.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    let _ = writeln!(out, "  results: {path}");
    out
}

/// Acknowledged increments against the final value, and how many reads
/// fell outside the increments applied around them.
fn counter_line(results: &Results) -> Option<String> {
    let counter = results.checkers.get("counter")?;
    let d = &counter.details;
    let number = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_i64());
    let final_value = number(d.get("final")).map_or("none".to_string(), |v| v.to_string());
    let bounds = d.get("bounds");
    let field = |name: &str| number(bounds.and_then(|b| b.get(name))).unwrap_or(0);
    let (reads, below, above) = (field("reads"), field("below"), field("above"));
    Some(format!(
        "counter: {} writes acknowledged, final {final_value}; reads out of bounds: {} of {reads} ({below} below, {above} above)",
        number(d.get("acknowledged")).unwrap_or(0),
        below + above,
    ))
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}
