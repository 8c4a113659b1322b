//! The shared counter: `lost-update`, plus the counts of ops the storage
//! rightly refused.
//!
//! Workers increment the counter by reading it and writing read+1 under the
//! lock, so every acknowledged write should be a distinct value and the
//! harness's final read should be at least the number of acknowledged writes.

use crate::bounds::{Bounds, BoundsCheck, Write};
use crate::finding::{Anomaly, CheckerReport, Finding, Validity, Witness, MAX_EXAMPLES};
use crate::history::{error, f, Event, OpType, Process};
use crate::settings::Settings;
use crate::{anomaly, Checker, Invoked, OnEvent};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "counter";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    pub reads: u64,
    pub writes: u64,
}

/// The counter checker's entry under `checkers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterReport {
    pub valid: Validity,
    /// Client writes the storage acknowledged.
    #[serde(default)]
    pub acknowledged: u64,
    /// The harness's final read; `null` when there was none.
    #[serde(rename = "final", default)]
    pub final_value: Option<i64>,
    /// Acknowledged plus writes whose outcome is unknown.
    #[serde(default)]
    pub possible: u64,
    #[serde(default)]
    pub stale_fence_rejected: Rejected,
    #[serde(default)]
    pub lease_expired: u64,
    /// Writes the network held (`delay`) that the storage refused when they
    /// reached it, as the fault proxy saw (its `stop-delay`'s `accepted`):
    /// their writers had timed out, so no client saw the refusal.
    #[serde(default)]
    pub late_writes_refused: u64,
    /// Every acknowledged read within the increments applied around it.
    #[serde(default)]
    pub bounds: Bounds,
    /// Why there was nothing to check (a lock-only history): the checker
    /// then has nothing to find, which is not the same as not knowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
}

impl CounterReport {
    fn new(bounds: Bounds) -> Self {
        CounterReport {
            valid: Validity::Unknown,
            acknowledged: 0,
            final_value: None,
            possible: 0,
            stale_fence_rejected: Rejected::default(),
            lease_expired: 0,
            late_writes_refused: 0,
            bounds,
            not_applicable: None,
        }
    }
}

impl From<CounterReport> for CheckerReport {
    fn from(report: CounterReport) -> Self {
        let valid = report.valid;
        let mut details: BTreeMap<String, serde_json::Value> = match serde_json::to_value(report) {
            Ok(serde_json::Value::Object(map)) => map.into_iter().collect(),
            _ => Default::default(),
        };
        details.remove("valid");
        CheckerReport { valid, details }
    }
}

pub struct CounterOutcome {
    pub lost_update: Anomaly,
    pub report: CounterReport,
    pub notes: Vec<String>,
}

/// Fed in time order. Memory: one bit per counter value written (for
/// duplicates), the last few writes to name the earlier of two that wrote
/// the same value, and the bounds check's reads in flight. The write counts
/// are the bounds check's, and so is when a write counts as acknowledged:
/// at its `ok`, or at its holder's release `ok` when writes commit with the
/// release ([`Settings::writes_commit_with_release`]).
#[derive(Default)]
pub struct Counter {
    rejected: Rejected,
    lease_expired: u64,
    late_writes_refused: u64,
    written: ValueSet,
    recent: VecDeque<(i64, u64)>,
    duplicates: Anomaly,
    /// The harness's last read: (value, index, time).
    final_read: Option<(Option<i64>, u64, u64)>,
    bounds: BoundsCheck,
    /// Whether any client read or wrote the counter.
    used: bool,
}

/// How many recent writes are kept to name a duplicate's first writer.
const RECENT: usize = 1024;

impl OnEvent for Counter {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        for write in self.bounds.step(e) {
            self.acknowledge(write);
        }
        if e.process == Process::harness() && e.kind == OpType::Ok && e.f == f::READ {
            self.final_read = Some((e.int_value(), e.index, e.time));
        }
        if e.is_nemesis() && refused_late(e) {
            self.late_writes_refused += 1;
        }
        if !e.process.is_client() {
            return;
        }
        self.used |= e.f == f::READ || e.f == f::WRITE;
        let error = e.error.as_deref();
        match (e.kind, e.f.as_str()) {
            (OpType::Fail, f::READ) if error == Some(error::STALE_FENCE) => {
                self.rejected.reads += 1
            }
            (OpType::Fail, f::WRITE) if error == Some(error::STALE_FENCE) => {
                self.rejected.writes += 1
            }
            (OpType::Fail, f::WRITE) if error == Some(error::LEASE_EXPIRED) => {
                self.lease_expired += 1
            }
            _ => {}
        }
    }
}

/// A held write the storage refused when the proxy let it go.
fn refused_late(e: &Event) -> bool {
    let v = &e.value;
    crate::history::fault::stopped(&e.f) == Some("delay")
        && v.get("class").and_then(|c| c.as_str()) == Some("write")
        && v.get(crate::history::fault::ACCEPTED)
            .and_then(|a| a.as_bool())
            == Some(false)
}

/// `lost-update`'s count rests on the final read: none before the end.
impl Checker for Counter {
    fn finish(self: Box<Self>) -> Finding {
        let outcome = Counter::finish(*self);
        Finding {
            report: outcome.report.into(),
            anomalies: vec![(anomaly::LOST_UPDATE, outcome.lost_update)],
            notes: outcome.notes,
            not_asked: false,
        }
    }
}

impl Counter {
    /// A check that counts writes as `settings` says they take effect.
    pub fn new(settings: &Settings) -> Self {
        Counter {
            bounds: BoundsCheck::new(settings),
            ..Counter::default()
        }
    }

    /// A write now acknowledged. A duplicate is named and timed by the
    /// writes' own `ok`s, even when a later release committed them.
    fn acknowledge(&mut self, write: Write) {
        let Some(v) = write.value else { return };
        if self.written.insert(v) {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((v, write.index));
            return;
        }
        let earlier = self.recent.iter().find(|(w, _)| *w == v).map(|&(_, i)| i);
        self.duplicates.record(Witness {
            indices: earlier.into_iter().chain([write.index]).collect(),
            time: write.time,
        });
    }

    pub fn finish(self) -> CounterOutcome {
        if !self.used && self.final_read.is_none() {
            return CounterOutcome {
                lost_update: Anomaly::default(),
                report: CounterReport {
                    valid: Validity::True,
                    not_applicable: Some("the history has no counter reads or writes".into()),
                    ..CounterReport::new(self.bounds.bounds)
                },
                notes: Vec::new(),
            };
        }
        let mut report = CounterReport {
            acknowledged: self.bounds.acknowledged(),
            possible: self.bounds.possible(),
            stale_fence_rejected: self.rejected,
            lease_expired: self.lease_expired,
            late_writes_refused: self.late_writes_refused,
            ..CounterReport::new(self.bounds.bounds)
        };
        let mut notes = Vec::new();
        let final_read = match self.final_read {
            Some((Some(v), index, time)) => Some((v, index, time)),
            Some((None, index, _)) => {
                notes.push(format!(
                    "the harness's final read (index {index}) has no integer value: lost updates cannot be ruled out"
                ));
                None
            }
            None => {
                notes.push(
                    "no final read by the harness: lost updates cannot be ruled out".to_string(),
                );
                None
            }
        };
        report.final_value = final_read.map(|(v, _, _)| v);

        let mut lost_update = Anomaly::default();
        let missing = final_read
            .map(|(v, index, time)| (i128::from(report.acknowledged) - i128::from(v), index, time))
            .filter(|&(missing, _, _)| missing > 0);
        let dups = self.duplicates;
        // Each occurrence is put down to a fault by its time (`times`, in the
        // order of `examples`). When the duplicates witness every loss, they
        // are the occurrences and the final read only confirms them: it goes
        // last. Otherwise it witnesses losses no duplicate shows, and goes
        // first so the example cap never hides it, timed at the first
        // evidence of a loss (it happened by then, not at the end).
        let final_witness = missing.map(|(missing, index, time)| {
            let earliest = dups.first_time.map_or(time, |t| t.min(time));
            (u64::try_from(missing).unwrap_or(u64::MAX), index, earliest)
        });
        let shown_first = final_witness.filter(|&(missing, _, _)| missing > dups.count);
        if let Some((missing, index, earliest)) = shown_first {
            lost_update.count = missing;
            lost_update.examples.push(vec![index]);
            lost_update.times.push(earliest);
        }
        lost_update.times.extend(dups.times);
        for example in dups.examples {
            if lost_update.examples.len() < MAX_EXAMPLES {
                lost_update.examples.push(example);
            }
        }
        if let (Some((_, index, earliest)), None) = (final_witness, shown_first) {
            if lost_update.examples.len() < MAX_EXAMPLES {
                lost_update.examples.push(vec![index]);
            }
            lost_update.times.push(earliest);
        }
        let final_time = final_read.filter(|_| missing.is_some()).map(|(_, _, t)| t);
        lost_update.first_time = [final_time, dups.first_time].into_iter().flatten().min();
        lost_update.count = lost_update.count.max(dups.count);

        report.valid = if lost_update.found() || report.bounds.valid == Validity::False {
            Validity::False
        } else if report.final_value.is_none() {
            Validity::Unknown
        } else {
            Validity::True
        };
        CounterOutcome {
            lost_update,
            report,
            notes,
        }
    }
}

/// Counter values seen: a bit each for values up to a few times the number
/// written (a correct counter's values are dense from 1), a set beyond, so
/// a wild value costs one entry, not gigabytes.
#[derive(Default)]
struct ValueSet {
    bits: Vec<u64>,
    sparse: FxHashSet<i64>,
    count: u64,
}

impl ValueSet {
    /// Whether `v` was new.
    fn insert(&mut self, v: i64) -> bool {
        if self.bits_contain(v) || self.sparse.contains(&v) {
            return false;
        }
        self.count += 1;
        let dense_limit = 4 * self.count + 4096;
        match u64::try_from(v) {
            Ok(v) if v < dense_limit => {
                let word = (v / 64) as usize;
                if word >= self.bits.len() {
                    self.bits.resize(word + 1, 0);
                }
                self.bits[word] |= 1 << (v % 64);
            }
            _ => {
                self.sparse.insert(v);
            }
        }
        true
    }

    fn bits_contain(&self, v: i64) -> bool {
        u64::try_from(v).is_ok_and(|v| {
            self.bits
                .get((v / 64) as usize)
                .is_some_and(|w| w & (1 << (v % 64)) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    fn run(h: &Hist) -> CounterOutcome {
        crate::feed::feed::<Counter>(&h.build()).finish()
    }

    #[test]
    fn every_acknowledged_increment_in_the_final_value_is_valid() {
        let mut h = Hist::new();
        for v in 1..=3 {
            h.read(1, v - 1);
            h.write(1, v);
        }
        h.final_read(3);
        let out = run(&h);
        assert_eq!(out.report.valid, Validity::True);
        assert_eq!(
            (out.report.acknowledged, out.report.final_value),
            (3, Some(3))
        );
        assert_eq!(out.lost_update.count, 0);
        assert!(out.notes.is_empty());
    }

    #[test]
    fn two_writes_of_the_same_value_lose_one() {
        let mut h = Hist::new();
        h.write(1, 1); // ok 1
        h.write(2, 1); // ok 3: both read 0
        h.write(1, 2); // ok 5
        h.final_read(2);
        let out = run(&h);
        assert_eq!(out.report.valid, Validity::False);
        assert_eq!(out.lost_update.count, 1);
        // final 2 < acknowledged 3 is the same loss seen from the end: the
        // duplicate is the occurrence (its time names the fault), the final
        // read confirms it.
        assert_eq!(out.lost_update.examples, vec![vec![1, 3], vec![7]]);
        let dup = h.build().events[3].time;
        assert_eq!(out.lost_update.times[0], dup);
        assert_eq!(out.lost_update.first_time, Some(h.build().events[3].time));
    }

    #[test]
    fn a_final_value_below_the_acknowledged_count_is_a_loss() {
        let mut h = Hist::new();
        for v in 1..=3 {
            h.write(1, v);
        }
        h.final_read(1);
        let out = run(&h);
        assert_eq!(out.lost_update.count, 2);
        assert_eq!(out.lost_update.examples, vec![vec![7]]);
    }

    #[test]
    fn without_a_final_read_only_duplicates_can_decide() {
        let mut h = Hist::new();
        h.write(1, 1);
        h.write(2, 2);
        let out = run(&h);
        assert_eq!(out.report.valid, Validity::Unknown);
        assert_eq!(out.report.final_value, None);
        assert!(out.notes[0].contains("no final read"), "{:?}", out.notes);

        h.write(3, 2);
        assert_eq!(run(&h).report.valid, Validity::False);
    }

    #[test]
    fn a_read_out_of_bounds_decides_even_without_a_final_read() {
        let mut h = Hist::new();
        h.write(1, 1);
        h.write(2, 2);
        h.read(3, 1);
        let out = run(&h);
        assert_eq!(out.report.final_value, None);
        assert_eq!(out.report.bounds.below, 1);
        assert_eq!(out.report.valid, Validity::False);
    }

    #[test]
    fn only_the_last_harness_read_is_final() {
        let mut h = Hist::new();
        h.final_read(5); // a setup read, not the final one
        h.write(1, 1);
        h.final_read(1);
        let out = run(&h);
        assert_eq!(out.report.final_value, Some(1));
        assert_eq!(out.report.valid, Validity::True);
    }

    #[test]
    fn uncertain_writes_count_as_possible_not_acknowledged() {
        let mut h = Hist::new();
        h.write(1, 1);
        h.invoke(1, "write").value(2);
        h.info(1, "write").error("timeout");
        h.invoke(11, "write").value(2); // the run ended before it completed
        h.final_read(2);
        let out = run(&h);
        assert_eq!(out.report.acknowledged, 1);
        assert_eq!(out.report.possible, 3);
        assert_eq!(out.report.valid, Validity::True);
    }

    /// With writes committed by their holder's release (a transaction lock).
    fn run_committing(h: &Hist) -> CounterOutcome {
        let settings = Settings::default().writes_commit_with_release(true);
        crate::feed::feed_into(&h.build(), Counter::new(&settings)).finish()
    }

    #[test]
    fn a_committed_write_counts_at_its_release_and_an_uncommitted_one_is_only_possible() {
        let history = |last: i64| {
            let mut h = Hist::new();
            h.acquire(1, "a");
            h.write(1, 1);
            h.release(1, "a");
            h.acquire(2, "b");
            h.write(2, 2); // its commit's outcome is unknown: rolled back here
            h.invoke(2, "release").token("b");
            h.info(2, "release").error("timeout");
            h.acquire(3, "c");
            h.write(3, 2);
            h.release(3, "c");
            h.final_read(last);
            h
        };
        let out = run_committing(&history(2));
        assert_eq!((out.report.acknowledged, out.report.possible), (2, 3));
        assert_eq!(out.lost_update.count, 0);
        assert_eq!(out.report.valid, Validity::True);
        // Counted at their oks, 2 was written twice.
        assert_eq!(run(&history(2)).lost_update.count, 1);
        // Two commits, but the final counter holds one: a loss all the same.
        let out = run_committing(&history(1));
        assert_eq!(out.lost_update.examples, vec![vec![19]]);
        assert_eq!(out.report.valid, Validity::False);
    }

    #[test]
    fn a_value_committed_twice_is_a_duplicate_named_by_the_writes() {
        let history = |second_commits: bool| {
            let mut h = Hist::new();
            h.acquire(1, "a");
            h.write(1, 1); // ok at index 3
            h.release(1, "a");
            h.acquire(2, "b");
            h.write(2, 1); // ok at index 9
            h.invoke(2, "release").token("b");
            if second_commits {
                h.ok(2, "release").token("b");
            } // else the run ended before it completed
            h
        };
        let h = history(true);
        let out = run_committing(&h);
        assert_eq!(out.lost_update.examples, vec![vec![3, 9]]);
        assert_eq!(out.lost_update.times, vec![h.build().events[9].time]);
        assert_eq!(run_committing(&history(false)).lost_update.count, 0);
    }

    #[test]
    fn refused_ops_are_counted_by_reason() {
        let mut h = Hist::new();
        h.invoke(1, "read");
        h.fail(1, "read").error("stale-fence");
        h.invoke(1, "write").value(1);
        h.fail(1, "write").error("stale-fence");
        h.invoke(1, "write").value(1);
        h.fail(1, "write").error("stale-fence");
        h.invoke(2, "write").value(1);
        h.fail(2, "write").error("lease-expired");
        // Held by the network past its writer's timeout, then refused; and
        // one taken, and a held read refused: neither counts.
        for (class, accepted) in [("write", false), ("write", true), ("read", false)] {
            h.nemesis("stop-delay")
                .value(serde_json::json!({"class": class, "accepted": accepted}));
        }
        h.final_read(0);
        let out = run(&h);
        assert_eq!(out.report.late_writes_refused, 1);
        assert_eq!(
            out.report.stale_fence_rejected,
            Rejected {
                reads: 1,
                writes: 2
            }
        );
        assert_eq!(out.report.lease_expired, 1);
        assert_eq!(out.report.acknowledged, 0);
        assert_eq!(out.report.valid, Validity::True);
    }

    #[test]
    fn the_report_serialises_final_as_null_when_missing() {
        let mut h = Hist::new();
        h.write(1, 1);
        let out = run(&h);
        let report: CheckerReport = out.report.into();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["final"], serde_json::Value::Null);
        assert_eq!(json["valid"], "unknown");
        assert_eq!(json["stale_fence_rejected"]["writes"], 0);
        assert!(json.get("not_applicable").is_none(), "{json}");
    }

    #[test]
    fn a_history_without_counter_ops_is_not_applicable_not_unknown() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.release(1, "a");
        let out = run(&h);
        assert_eq!(out.report.valid, Validity::True);
        assert!(out.report.not_applicable.is_some());
        assert!(out.notes.is_empty(), "{:?}", out.notes);
    }
}
