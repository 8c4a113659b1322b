//! The shared counter: `lost-update`, plus the counts of ops the storage
//! rightly refused.
//!
//! Workers increment the counter by reading it and writing read+1 under the
//! lock, so every acknowledged write should be a distinct value and the
//! harness's final read should be at least the number of acknowledged writes.

use crate::history::{error, f, History, OpType, Process};
use crate::ops::Pairs;
use crate::verdict::{Anomaly, CheckerReport, Validity, Witness, MAX_EXAMPLES};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

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

pub fn check(history: &History, pairs: &Pairs) -> CounterOutcome {
    let mut report = CounterReport {
        valid: Validity::Unknown,
        acknowledged: 0,
        final_value: None,
        possible: 0,
        stale_fence_rejected: Rejected::default(),
        lease_expired: 0,
    };
    let mut uncertain = 0;
    let mut first_write_of: HashMap<i64, u64> = HashMap::new();
    let mut duplicates: Vec<Witness> = Vec::new();
    let mut final_read = None;

    for pos in history.time_order() {
        let e = &history.events[pos];
        if e.process == Process::harness() && e.kind == OpType::Ok && e.f == f::READ {
            final_read = Some(e);
        }
        if !e.process.is_client() {
            continue;
        }
        let error = e.error.as_deref();
        match (e.kind, e.f.as_str()) {
            (OpType::Ok, f::WRITE) => {
                report.acknowledged += 1;
                if let Some(v) = e.int_value() {
                    match first_write_of.get(&v) {
                        Some(&earlier) => duplicates.push(Witness {
                            indices: vec![earlier, e.index],
                            time: e.time,
                        }),
                        None => {
                            first_write_of.insert(v, e.index);
                        }
                    }
                }
            }
            (OpType::Info, f::WRITE) => uncertain += 1,
            // The run ended before it completed: as uncertain as an `info`.
            (OpType::Invoke, f::WRITE) if pairs.completion_of(pos).is_none() => uncertain += 1,
            (OpType::Fail, f::READ) if error == Some(error::STALE_FENCE) => {
                report.stale_fence_rejected.reads += 1
            }
            (OpType::Fail, f::WRITE) if error == Some(error::STALE_FENCE) => {
                report.stale_fence_rejected.writes += 1
            }
            (OpType::Fail, f::WRITE) if error == Some(error::LEASE_EXPIRED) => {
                report.lease_expired += 1
            }
            _ => {}
        }
    }
    report.possible = report.acknowledged + uncertain;

    let mut notes = Vec::new();
    let final_read = match final_read {
        Some(e) => match e.int_value() {
            Some(v) => Some((v, e)),
            None => {
                notes.push(format!(
                    "the harness's final read (index {}) has no integer value: lost updates cannot be ruled out",
                    e.index
                ));
                None
            }
        },
        None => {
            notes
                .push("no final read by the harness: lost updates cannot be ruled out".to_string());
            None
        }
    };
    report.final_value = final_read.map(|(v, _)| v);

    let mut lost_update = Anomaly::default();
    let missing = final_read
        .map(|(v, e)| (i128::from(report.acknowledged) - i128::from(v), e))
        .filter(|&(missing, _)| missing > 0);
    // The final-read witness goes first so the example cap never hides it.
    if let Some((missing, e)) = missing {
        lost_update.count = u64::try_from(missing).unwrap_or(u64::MAX);
        lost_update.examples.push(vec![e.index]);
        lost_update.first_time = Some(e.time);
    }
    let duplicate_count = duplicates.len() as u64;
    for w in duplicates {
        if lost_update.examples.len() < MAX_EXAMPLES {
            lost_update.examples.push(w.indices);
        }
        lost_update.first_time = Some(lost_update.first_time.map_or(w.time, |t| t.min(w.time)));
    }
    lost_update.count = lost_update.count.max(duplicate_count);

    report.valid = if lost_update.found() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Hist;

    fn run(h: &Hist) -> CounterOutcome {
        let history = h.build();
        check(&history, &Pairs::new(&history))
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
        // final 2 < acknowledged 3 is the same loss seen from the end.
        assert_eq!(out.lost_update.examples, vec![vec![7], vec![1, 3]]);
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
        h.final_read(0);
        let out = run(&h);
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
        let out = run(&Hist::new());
        let report: CheckerReport = out.report.into();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["final"], serde_json::Value::Null);
        assert_eq!(json["valid"], "unknown");
        assert_eq!(json["stale_fence_rejected"]["writes"], 0);
    }
}
