//! `deadlock`: the lock is stuck. Between two grants, acquires were
//! attempted for longer than a threshold of time in which no fault was
//! active, e.g. a key left without expiry by a holder that died between
//! `SETNX` and `PEXPIRE`. A lock must be released eventually even if its
//! holder dies, so this counts under every promise.
//!
//! Each interval runs from a grant (or the history's start) to the next
//! grant. Faults pause it: only its fault-free stretches count, each from
//! its first acquire in flight to its last, and they add up, so a lock
//! stuck across faults that come every second or two is still found (the
//! nemesis's quiet between faults is shorter than the threshold). A grant
//! is where a hold starts, so an interval holds one hold and the wait after
//! it: a holder that dies or stalls is waited out within a TTL, and a
//! retrying worker notices within its acquire timeout. The history does not
//! record those, so the threshold comes from the run
//! ([`Settings::deadlock_after`]); without one nothing is checked.

use crate::demand::{ActiveFaults, Change, Demand};
use crate::finding::{Anomaly, CheckerReport, Finding, Validity, Witness, MAX_EXAMPLES};
use crate::history::{f, Event, OpType, Process};
use crate::settings::Settings;
use crate::{anomaly, Checker, Invoked, OnEvent};
use rustc_hash::FxHashMap;
use serde_json::json;

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "deadlock";

/// The key of the report's `[start, end]` of each interval found (ns, the
/// first [`MAX_EXAMPLES`]).
pub const INTERVALS: &str = "intervals";

/// How many stuck acquires an occurrence names (the first of each process):
/// enough to see who waited, bounded however many replacements came.
const MAX_STUCK: usize = 10;

pub struct Deadlock {
    threshold_ns: Option<u64>,
    faults: ActiveFaults,
    demand: Demand,
    /// A fault-free stretch of the interval is running.
    open: bool,
    /// The interval's fault-free demand so far, in its closed stretches.
    counted_ns: u64,
    /// The interval's first and latest moments of demand (history time).
    span: Option<(u64, u64)>,
    /// The fault-free demand counted when the interval's first fault began.
    before_fault_ns: Option<u64>,
    /// The first demand after the interval's first fault.
    after_fault: Option<u64>,
    /// Each client's acquire in flight: its invoke's index.
    acquiring: FxHashMap<Process, u64>,
    /// The current interval's stuck acquires, one per process, in order.
    stuck: Vec<(Process, u64)>,
    /// The first occurrences' intervals (history time, ns), for pictures.
    intervals: Vec<[u64; 2]>,
    latest: u64,
    longest_ns: u64,
    found: Anomaly,
}

impl Deadlock {
    pub fn new(settings: &Settings) -> Self {
        Deadlock {
            threshold_ns: settings.deadlock_after.map(|d| d.as_nanos() as u64),
            faults: ActiveFaults::default(),
            demand: Demand::default(),
            // The history's start is a fresh lock, free and fault-free.
            open: true,
            counted_ns: 0,
            span: None,
            before_fault_ns: None,
            after_fault: None,
            acquiring: FxHashMap::default(),
            stuck: Vec::new(),
            intervals: Vec::new(),
            latest: 0,
            longest_ns: 0,
            found: Anomaly::default(),
        }
    }

    /// A fault-free stretch from `now`, unless a fault is active: the
    /// acquires in flight are stuck ones of the interval (if it has room).
    fn resume(&mut self, now: u64) {
        self.open = !self.faults.any();
        if !self.open {
            return;
        }
        self.demand.open(now);
        let mut waiting: Vec<(Process, u64)> = self
            .acquiring
            .iter()
            .filter(|(p, _)| !self.stuck.iter().any(|(q, _)| q == *p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        waiting.sort_by_key(|(_, i)| *i);
        waiting.truncate(MAX_STUCK.saturating_sub(self.stuck.len()));
        self.stuck.extend(waiting);
    }

    /// Ends the running stretch at `now` (at a fault's start, or with the
    /// interval): its demand counts.
    fn pause(&mut self, now: u64, fault: bool) {
        if std::mem::take(&mut self.open) {
            if let Some((first, last)) = self.demand.span(now) {
                self.counted_ns += last - first;
                let begun = self.span.map_or(first, |(f, _)| f);
                self.span = Some((begun, last));
                if self.before_fault_ns.is_some() {
                    self.after_fault.get_or_insert(first);
                }
            }
        }
        if fault && self.before_fault_ns.is_none() {
            self.before_fault_ns = Some(self.counted_ns);
        }
    }

    /// Ends the interval at `now` (a grant, or the history's end): was the
    /// lock wanted for longer than the threshold of fault-free time? Its
    /// witness time is where it got stuck, so attribution names what left
    /// it stuck, not what happened a threshold later: the interval's start,
    /// or, if it was not yet stuck for a threshold when its first fault
    /// began, the first demand after that fault (the fault it never
    /// recovered from).
    fn close(&mut self, now: u64) {
        self.pause(now, false);
        let length = std::mem::take(&mut self.counted_ns);
        let span = self.span.take();
        let stuck = std::mem::take(&mut self.stuck);
        let before_fault = self.before_fault_ns.take();
        let after_fault = self.after_fault.take();
        let Some((first, last)) = span else {
            return;
        };
        self.longest_ns = self.longest_ns.max(length);
        if let Some(t) = self.threshold_ns.filter(|t| length > *t) {
            let time = match (before_fault, after_fault) {
                (Some(before), Some(after)) if before <= t => after,
                _ => first,
            };
            let mut indices: Vec<u64> = stuck.iter().map(|(_, i)| *i).collect();
            indices.sort_unstable();
            if self.intervals.len() < MAX_EXAMPLES {
                self.intervals.push([first, last]);
            }
            self.found.record(Witness { indices, time });
        }
    }
}

impl OnEvent for Deadlock {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        self.latest = self.latest.max(e.time);
        if e.node_died() {
            // Not a fault (it pauses nothing: the lock is as stuck as a
            // waiter sees it), but what follows is dated after it, so the
            // death is named as the cause, as a fault's start would be.
            self.pause(e.time, true);
            return self.resume(e.time);
        }
        match self.faults.on_event(e) {
            Some(Change::Started) => return self.pause(e.time, true),
            Some(Change::Stopped) if !self.faults.any() => return self.resume(e.time),
            Some(Change::Stopped) => return,
            None => {}
        }
        if e.f != f::ACQUIRE || !e.process.is_client() {
            return;
        }
        let granted = e.kind == OpType::Ok;
        if granted {
            self.close(e.time);
        }
        self.demand.on_event(e);
        match e.kind {
            OpType::Invoke => {
                self.acquiring.insert(e.process.clone(), e.index);
                let known = self.stuck.iter().any(|(p, _)| *p == e.process);
                if self.open && !known && self.stuck.len() < MAX_STUCK {
                    self.stuck.push((e.process.clone(), e.index));
                }
            }
            _ => {
                self.acquiring.remove(&e.process);
            }
        }
        if granted {
            self.resume(e.time);
        }
    }
}

impl Checker for Deadlock {
    fn finish(mut self: Box<Self>) -> Finding {
        // The history's end closes the last interval: a lock stuck until
        // the workers stopped is stuck.
        self.close(self.latest);
        let Some(threshold) = self.threshold_ns else {
            return not_asked();
        };
        let mut report = CheckerReport::from_anomalies([&self.found]);
        report
            .details
            .insert("threshold_ms".into(), json!(ms(threshold)));
        report
            .details
            .insert("longest_ungranted_ms".into(), json!(ms(self.longest_ns)));
        // From its first acquire wanting the lock to its last, in the
        // history's time: what the timeline shades.
        report
            .details
            .insert(INTERVALS.into(), json!(self.intervals));
        let mut notes = Vec::new();
        if self.found.found() {
            notes.push(format!(
                "deadlock: {} interval(s) between grants in which acquires were attempted for longer than the threshold of {:.1} s with no fault active (the longest {:.1} s)",
                self.found.count,
                secs(threshold),
                secs(self.longest_ns)
            ));
        }
        Finding {
            report,
            anomalies: vec![(anomaly::DEADLOCK, self.found)],
            notes,
            not_asked: false,
        }
    }
}

/// No threshold: the history alone cannot tell a stuck lock from a long
/// lease, so `deadlock` is not checked, and says so.
fn not_asked() -> Finding {
    let why = "no threshold was given, and the history does not record the lock's TTL";
    let mut report = CheckerReport::new(Validity::Unknown);
    report.details.insert("not_checked".into(), json!(why));
    Finding {
        report,
        anomalies: vec![(anomaly::DEADLOCK, Anomaly::default())],
        notes: vec![format!("deadlock not checked: {why}")],
        not_asked: true,
    }
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Pairing;
    use crate::history::build::Hist;
    use crate::settings::Promise;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;
    /// TTL 2 s + acquire timeout 4 s + 1 s.
    const THRESHOLD: Duration = Duration::from_secs(7);

    fn run(h: &Hist) -> Finding {
        let settings = Settings::new(Promise::MutualExclusion).deadlock_after(THRESHOLD);
        let mut d = Deadlock::new(&settings);
        let mut pairing = Pairing::default();
        for e in h.build().in_time_order() {
            pairing.feed(e, &mut d);
        }
        Box::new(d).finish()
    }

    fn found(f: &Finding) -> &Anomaly {
        &f.anomalies[0].1
    }

    /// Process 1 takes the lock at 1 s and its key never expires: 2 and 3
    /// retry, each acquire timing out after 4 s, from 1 s to `until`.
    fn stuck(h: &mut Hist, until: u64) {
        h.invoke(1, "acquire").time(S);
        h.ok(1, "acquire").token("a").time(S);
        h.ungranted(S, until);
    }

    #[test]
    fn a_lock_stuck_with_no_fault_active_is_found_with_its_threshold() {
        let mut h = Hist::new();
        h.nemesis("start-crash").time(S / 2);
        h.nemesis("stop-crash").time(S / 2 + 1);
        stuck(&mut h, 13 * S);
        let f = run(&h);
        let a = found(&f);
        assert_eq!(a.count, 1, "{a:?}");
        // The stuck acquires: the first of process 2 and of process 3.
        assert_eq!(a.examples, [vec![4, 6]]);
        assert_eq!(f.report.valid, Validity::False);
        assert_eq!(f.report.details["threshold_ms"], 7_000);
        assert_eq!(f.report.details["longest_ungranted_ms"], 12_000);
        assert_eq!(f.report.details[INTERVALS], json!([[S, 13 * S]]));
        assert!(f.notes[0].contains("threshold of 7.0 s"), "{:?}", f.notes);
    }

    #[test]
    fn a_lock_stuck_after_its_node_died_by_itself_is_dated_after_the_death() {
        let mut h = Hist::new();
        stuck(&mut h, 13 * S);
        h.push_crash_of_node("n1", 2 * S);
        let f = run(&h);
        let a = found(&f);
        assert_eq!(a.count, 1, "{a:?}");
        assert_eq!(
            f.report.details["longest_ungranted_ms"], 12_000,
            "nothing paused"
        );
        let dated = a.first_time.unwrap();
        assert!(dated >= 2 * S, "dated {dated}, before the death at 2 s");
    }

    #[test]
    fn the_same_gap_while_a_fault_is_active_is_not_found() {
        let mut h = Hist::new();
        h.nemesis("start-partition").time(S / 2);
        stuck(&mut h, 13 * S);
        h.nemesis("stop-partition").time(13 * S);
        let f = run(&h);
        assert_eq!(found(&f).count, 0);
        assert_eq!(f.report.valid, Validity::True);
    }

    #[test]
    fn a_lock_stuck_across_faults_adds_up_its_fault_free_time() {
        // Stuck from 1 s to 13 s with a 0.5 s pause every 2 s: 9 s of it
        // fault-free, in stretches of 1.5 s, none long enough alone.
        let mut h = Hist::new();
        stuck(&mut h, 13 * S);
        for k in 0..6 {
            h.nemesis("start-pause").time(2 * S + k * 2 * S);
            h.nemesis("stop-pause").time(2 * S + S / 2 + k * 2 * S);
        }
        let f = run(&h);
        let a = found(&f);
        assert_eq!(a.count, 1, "{a:?}");
        assert_eq!(f.report.details["longest_ungranted_ms"], 9_000);
        // Not stuck for a threshold before the first pause: dated after it
        // (at its heal), so attribution names the pause.
        assert_eq!(a.first_time, Some(2 * S + S / 2), "{a:?}");
        // A grant between the stretches starts a new interval: nothing adds up.
        let mut h = Hist::new();
        stuck(&mut h, 13 * S);
        h.nemesis("start-pause").time(6 * S);
        h.invoke(4, "acquire").time(6 * S + 1);
        h.ok(4, "acquire").token("d").time(6 * S + 2);
        h.nemesis("stop-pause").time(7 * S);
        let f = run(&h);
        assert_eq!(found(&f).count, 0, "{:?}", found(&f));
    }

    #[test]
    fn a_gap_shorter_than_the_threshold_is_not_found() {
        let mut h = Hist::new();
        stuck(&mut h, 5 * S);
        h.invoke(2, "acquire").time(5 * S + 1);
        h.ok(2, "acquire").token("b").time(7 * S);
        let f = run(&h);
        assert_eq!(found(&f).count, 0);
        assert_eq!(f.report.details["longest_ungranted_ms"], 6_000);
        assert_eq!(f.report.valid, Validity::True);
    }

    #[test]
    fn a_gap_after_a_crash_that_ends_within_the_ttl_is_not_found() {
        // The holder dies at 1.5 s; its key expires 2 s after its grant and
        // the waiter gets the lock at 3.1 s.
        let mut h = Hist::new();
        h.invoke(1, "acquire").time(S);
        h.ok(1, "acquire").token("a").time(S);
        h.invoke(2, "acquire").time(S + 1);
        h.nemesis("start-crash").time(S + S / 2);
        h.crash(1).token("a").time(S + S / 2 + 1);
        h.nemesis("stop-crash").time(S + S / 2 + 2);
        h.ok(2, "acquire").token("b").time(3 * S + S / 10);
        h.invoke(2, "release").token("b").time(4 * S);
        let f = run(&h);
        assert_eq!(found(&f).count, 0);
        assert_eq!(f.report.valid, Validity::True);
    }

    #[test]
    fn no_one_waiting_is_no_deadlock() {
        let mut h = Hist::new();
        for (p, t) in [(1, S), (2, 40 * S)] {
            h.invoke(p, "acquire").time(t);
            h.ok(p, "acquire").time(t);
            h.invoke(p, "release").time(t + 20 * S);
            h.ok(p, "release").time(t + 20 * S);
        }
        assert_eq!(found(&run(&h)).count, 0);
    }
}
