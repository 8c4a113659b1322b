//! The short human summary printed at the end of a run or a check: the
//! verdict, the faults and what they led to, then each anomaly found with
//! what its count counts (the registry's `meaning`).

use checker::{Anomaly, Availability, Results, Validity};
use std::fmt::Write;

pub fn verdict_word(v: Validity) -> &'static str {
    match v {
        Validity::True => "VALID",
        Validity::False => "INVALID",
        Validity::Unknown => "UNKNOWN",
    }
}

/// A few lines a person reads once: the verdict; the faults injected and
/// what they led to; each anomaly found with what its count counts; then
/// rates, the counter, timing and notes; and where to look.
pub fn render(title: &str, results: &Results, path: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{title}: {} (promise: {})",
        verdict_word(results.valid),
        results.promise
    );
    let _ = writeln!(out, "  {}", incidents_line(results));
    if let Some(line) = decision_line(&results.stats) {
        let _ = writeln!(out, "  {line}");
    }
    let mut absent = Vec::new();
    for kind in checker::anomalies() {
        let Some(a) = results.anomalies.get(kind.name) else {
            continue;
        };
        if a.count == 0 {
            absent.push(kind.name);
            continue;
        }
        let mark = if results.promise.counts(kind.name) {
            "!"
        } else {
            " (allowed by the promise)"
        };
        let labels: Vec<String> = a.labels.iter().map(|(l, n)| format!("{l} {n}")).collect();
        let said: Vec<String> = causes(a)
            .into_iter()
            .chain((!labels.is_empty()).then(|| labels.join(", ")))
            .collect();
        let causes = match said.is_empty() {
            true => String::new(),
            false => format!(" ({})", said.join("; ")),
        };
        let _ = writeln!(
            out,
            "  {} {}{mark}{causes}: {}",
            kind.name, a.count, kind.meaning
        );
    }
    if !absent.is_empty() {
        let _ = writeln!(out, "  none of: {}", absent.join(", "));
    }
    let s = &results.stats;
    let _ = writeln!(
        out,
        "  ops: {} ({} ok, {} fail, {} info) in {:.1} s, {:.1} ops/s, {:.1} lock cycles/s",
        s.ops, s.ok, s.fail, s.info, s.duration_s, s.ops_per_s, s.cycles_per_s
    );
    if let Some(ms) = s.acquire_median_ms {
        let _ = writeln!(out, "  a granted acquire took {ms:.2} ms (median)");
    }
    if let Some(line) = availability_line(&s.availability) {
        let _ = writeln!(out, "  {line}");
    }
    if let Some(line) = counter_line(results) {
        let _ = writeln!(out, "  {line}");
    }
    if !s.errors.is_empty() {
        let errors: Vec<String> = s.errors.iter().map(|(e, n)| format!("{e} {n}")).collect();
        let _ = writeln!(out, "  errors: {}", errors.join(", "));
    }
    if !s.unreported.is_empty() {
        let ops: Vec<String> = s
            .unreported
            .iter()
            .map(|(f, n)| format!("{f} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  the library reports no outcome of: {} (its adapter answers ok: null; not an error)",
            ops.join(", ")
        );
    }
    let first_anomaly = results.first_anomaly_time();
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
    if s.stalls > 0 {
        let _ = writeln!(
            out,
            "  unplanned stalls: {}, longest {} ms (a busy host pauses processes as the nemesis does)",
            s.stalls, s.longest_stall_ms
        );
    }
    for note in &results.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    let _ = writeln!(out, "  results: {path}");
    out
}

/// The faults injected and what they led to, by incident rather than by
/// occurrence: `faults: 6 pause; 6 led to two holders at once, 2 to a lost
/// update`. Harms the promise allows are said apart.
fn incidents_line(results: &Results) -> String {
    let incidents = &results.incidents;
    if incidents.is_empty() {
        return "faults: none injected".into();
    }
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for i in incidents {
        match kinds.iter_mut().find(|(k, _)| *k == i.fault) {
            Some((_, n)) => *n += 1,
            None => kinds.push((&i.fault, 1)),
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let led = |counted: bool| -> Option<String> {
        let parts: Vec<String> = checker::anomalies()
            .into_iter()
            .filter(|kind| results.promise.counts(kind.name) == counted)
            .filter_map(|kind| {
                let n = incidents
                    .iter()
                    .filter(|i| i.anomalies.contains_key(kind.name))
                    .count();
                (n > 0).then(|| format!("{n} to {}", kind.harm))
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", ").replacen(" to ", " led to ", 1))
    };
    let mut line = format!("faults: {}", kinds.join(", "));
    match led(true) {
        Some(harm) => {
            let _ = write!(line, "; {harm}");
        }
        None => {
            line.push_str("; none broke the promise");
            // What kept it: a fenced storage that refused the stale holder,
            // its own writes or the late ones the network held.
            let counter = results.counter();
            let stale = counter
                .as_ref()
                .map_or(0, |c| c.stale_fence_rejected.writes);
            let late = counter.as_ref().map_or(0, |c| c.late_writes_refused);
            let said: Vec<String> = [
                (stale, "write(s) with a stale fence"),
                (
                    late,
                    "late write(s) the network had held (the proxy saw it)",
                ),
            ]
            .into_iter()
            .filter(|&(n, _)| n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            if !said.is_empty() {
                let _ = write!(line, ": the storage refused {}", said.join(" and "));
            }
        }
    }
    if let Some(allowed) = led(false) {
        let _ = write!(line, " (as the promise allows, {allowed})");
    }
    line + &met(&results.stats.exposure)
}

/// What the faults met: `; they met 2 hold(s), 1 op(s) in flight, 5
/// grant(s), 4 write(s) (1 of 3 met none: …)`.
fn met(x: &checker::Exposure) -> String {
    if x.is_empty() {
        return String::new();
    }
    let mut said = format!(
        "; they met {} hold(s), {} op(s) in flight, {} grant(s), {} write(s)",
        x.holds, x.in_flight, x.grants, x.writes
    );
    if x.unmet > x.interrupted {
        let _ = write!(
            said,
            " ({} of {} met none: no holder, op in flight, grant or write, so no evidence)",
            x.unmet - x.interrupted,
            x.met + x.unmet
        );
    }
    if x.interrupted > 0 {
        let _ = write!(
            said,
            " ({} of {} cut short by the run's end before it acted, so no evidence)",
            x.interrupted,
            x.met + x.unmet
        );
    }
    said
}

/// Strikes at `acquiring` in a client adapter, by whether the library had
/// decided when it froze: a strike after the decision shows nothing of a
/// pause mid-acquisition, so a reader must not count it as one.
fn decision_line(s: &checker::Stats) -> Option<String> {
    let a = &s.acquiring_strikes;
    let (before, after) = (a.before_decision, a.after_decision);
    let mut line = format!(
        "strikes at acquiring: {before} of {} froze the library before its decision",
        before + after
    );
    if before > 0 {
        let _ = write!(
            line,
            " (it then handed back the frozen attempt's lock {}, granted another value {}, granted with no token to tell {}, refused {})",
            a.granted_frozen, a.granted_later, a.granted_untold, a.refused
        );
    }
    if after > 0 {
        let _ = write!(
            line,
            "; {after} after its reply was written, which shows nothing of a pause mid-acquisition"
        );
    }
    (before + after > 0).then_some(line)
}

/// What preceded an anomaly's occurrences, e.g. `pause 3, stall 1`: the
/// fault each is put down to (`checker::Anomaly::causes`); `None` when it never
/// occurred or was checked before attribution existed.
pub fn causes(a: &Anomaly) -> Option<String> {
    if a.count == 0 || a.causes.is_empty() {
        return None;
    }
    let tally: Vec<String> = a.causes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    Some(tally.join(", "))
}

/// Acknowledged increments against the final value, and how many reads
/// fell outside the increments applied around them — read as reads, not as
/// losses: once an update is lost, every later read is below its bound.
fn counter_line(results: &Results) -> Option<String> {
    let counter = results.checkers.get("counter")?;
    let d = &counter.details;
    let number = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_i64());
    let acknowledged = number(d.get("acknowledged")).unwrap_or(0);
    let final_value = number(d.get("final"));
    let short = match final_value {
        Some(v) if v < acknowledged => format!(" ({} short)", acknowledged - v),
        _ => String::new(),
    };
    let final_value = final_value.map_or("none".to_string(), |v| v.to_string());
    let bounds = d.get("bounds");
    let field = |name: &str| number(bounds.and_then(|b| b.get(name))).unwrap_or(0);
    let (reads, below, above) = (field("reads"), field("below"), field("above"));
    let mut line = format!(
        "counter: {acknowledged} writes acknowledged, final {final_value}{short}; reads out of bounds: {} of {reads} ({below} below, {above} above)",
        below + above,
    );
    let first = bounds
        .and_then(|b| b.get("first_time"))
        .and_then(|t| t.as_u64());
    if let (Some(first), true) = (first, below > 0) {
        let _ = write!(
            line,
            ", from {:.2} s on (every read after a lost update is below: this counts reads, not losses)",
            secs(first)
        );
    }
    Some(line)
}

/// How available the lock was: grants with and without a fault active, how
/// soon it was granted again after each heal or holder's crash, and the
/// longest wait with no holder. `None` when no acquire was tried (or the
/// results predate these figures).
fn availability_line(a: &Availability) -> Option<String> {
    if a.attempts + a.attempts_in_fault == 0 {
        return None;
    }
    let share = |granted: u64, tried: u64| match tried {
        0 => "none tried".to_string(),
        _ => format!(
            "{granted} of {tried} ({:.0}%)",
            100.0 * granted as f64 / tried as f64
        ),
    };
    let mut line = format!(
        "acquires granted: {} with no fault active, {} during faults",
        share(a.granted, a.attempts),
        share(a.granted_in_fault, a.attempts_in_fault)
    );
    if let (Some(max), Some(median)) = (a.recovery_max_ms, a.recovery_median_ms) {
        let _ = write!(
            line,
            "; granted again after {} heal(s) or holder crash(es) within {:.2} s (median {:.2} s)",
            a.recoveries,
            max as f64 / 1e3,
            median as f64 / 1e3
        );
    }
    if a.unrecovered > 0 {
        let _ = write!(line, ", {} never", a.unrecovered);
    }
    let _ = write!(
        line,
        "; longest wait with no holder {:.2} s",
        a.longest_unheld_ms as f64 / 1e3
    );
    Some(line)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_anomaly_found_names_what_preceded_it() {
        let history = checker::History::new(Vec::new());
        let mut results = checker::check(&history, checker::Promise::MutualExclusion);
        let overlap = results.anomalies.get_mut("lock-overlap").unwrap();
        overlap.count = 4;
        overlap.causes = [("pause".to_string(), 3), ("stall".to_string(), 1)].into();
        results.stats.stalls = 2;
        results.stats.longest_stall_ms = 412;
        let text = render("t", &results, "p");
        assert!(
            text.contains("lock-overlap 4! (pause 3, stall 1): pairs of holds"),
            "{text}"
        );
        assert!(
            text.contains("unplanned stalls: 2, longest 412 ms"),
            "{text}"
        );
        assert!(!text.contains("acquires granted"), "none tried: {text}");
    }

    #[test]
    fn a_release_with_no_outcome_is_said_as_such_not_as_an_error() {
        let history = checker::History::new(Vec::new());
        let mut results = checker::check(&history, checker::Promise::MutualExclusion);
        results.stats.unreported = [("release".to_string(), 12)].into();
        let text = render("t", &results, "p");
        assert!(
            text.contains("the library reports no outcome of: release 12"),
            "{text}"
        );
        assert!(!text.contains("errors:"), "{text}");
    }

    #[test]
    fn availability_is_one_line_of_grants_recoveries_and_the_longest_wait() {
        let history = checker::History::new(Vec::new());
        let mut results = checker::check(&history, checker::Promise::MutualExclusion);
        results.stats.availability = Availability {
            attempts: 40,
            granted: 30,
            attempts_in_fault: 10,
            granted_in_fault: 1,
            recoveries: 3,
            recovery_max_ms: Some(2_310),
            recovery_median_ms: Some(1_020),
            unrecovered: 1,
            longest_unheld_ms: 2_400,
        };
        let text = render("t", &results, "p");
        assert!(
            text.contains("acquires granted: 30 of 40 (75%) with no fault active, 1 of 10 (10%) during faults; granted again after 3 heal(s) or holder crash(es) within 2.31 s (median 1.02 s), 1 never; longest wait with no holder 2.40 s"),
            "{text}"
        );
    }

    fn incident(fault: &str, found: &[(&str, u64)]) -> checker::Incident {
        checker::Incident {
            fault: fault.into(),
            anomalies: found.iter().map(|(a, n)| (a.to_string(), *n)).collect(),
            ..checker::Incident::default()
        }
    }

    #[test]
    fn the_summary_leads_with_the_faults_and_what_each_led_to() {
        let history = checker::History::new(Vec::new());
        let mut results = checker::check(&history, checker::Promise::MutualExclusion);
        assert!(render("t", &results, "p").contains("faults: none injected"));
        results.incidents = vec![
            incident("pause", &[("lock-overlap", 2), ("lost-update", 1)]),
            incident("pause", &[("lock-overlap", 1)]),
            incident("kill", &[]),
        ];
        let text = render("t", &results, "p");
        assert!(
            text.contains(
                "faults: 2 pause, 1 kill; 2 led to two holders at once, 1 to a lost update\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("none of: lock-overlap, unsafe-action"),
            "{text}"
        );
        // Under data safety, overlaps are said apart: they break nothing.
        results.promise = checker::Promise::DataSafety;
        results.incidents = vec![incident("pause", &[("lock-overlap", 3)])];
        let text = render("t", &results, "p");
        assert!(
            text.contains("faults: 1 pause; none broke the promise (as the promise allows, 1 led to two holders at once)"),
            "{text}"
        );
        // And what kept it, when the storage refused stale writes.
        let mut counter = checker::CheckerReport::new(checker::Validity::True);
        let refused = serde_json::json!({"reads": 0, "writes": 3});
        counter
            .details
            .insert("stale_fence_rejected".into(), refused);
        counter
            .details
            .insert("late_writes_refused".into(), 2.into());
        results.checkers.insert("counter".into(), counter);
        let text = render("t", &results, "p");
        assert!(
            text.contains("none broke the promise: the storage refused 3 write(s) with a stale fence and 2 late write(s) the network had held (the proxy saw it) (as the promise allows"),
            "{text}"
        );
    }

    #[test]
    fn strikes_after_the_librarys_decision_are_said_apart() {
        let history = checker::History::new(Vec::new());
        let mut results = checker::check(&history, checker::Promise::MutualExclusion);
        assert!(!render("t", &results, "p").contains("strikes at acquiring"));
        results.stats.acquiring_strikes = checker::AcquiringStrikes {
            before_decision: 2,
            after_decision: 1,
            granted_frozen: 2,
            ..Default::default()
        };
        let text = render("t", &results, "p");
        assert!(
            text.contains("strikes at acquiring: 2 of 3 froze the library before its decision (it then handed back the frozen attempt's lock 2, granted another value 0, granted with no token to tell 0, refused 0); 1 after"),
            "{text}"
        );
    }
}
