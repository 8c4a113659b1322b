//! The verdict: whether what was found breaks what the run promised
//! ([`Promise::counts`], [`decide`]), and [`Results`], the content of
//! `results.json` (docs/formats.md, "results.json"), which reads back what
//! it writes. Its parts come from below: each checker's finding, the stats,
//! the promise.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::cause::Incident;
use crate::finding::{Anomaly, CheckerReport, Validity};
use crate::registry::{self, Breaks};
use crate::settings::Promise;
use crate::stats::Stats;

/// Which anomalies count under a promise is the registry's to say (each
/// anomaly's [`Breaks`]), so it is said here, above the registry, rather
/// than where [`Promise`] is defined.
impl Promise {
    /// Whether an occurrence of `anomaly` breaks this promise. Under data
    /// safety, overlaps and what follows from them (actions and releases of a
    /// stale holder) are expected; only damage to the data, and a lock that
    /// is never granted again, count.
    pub fn counts(self, anomaly: &str) -> bool {
        match self {
            Promise::MutualExclusion => true,
            Promise::DataSafety => {
                registry::anomaly_kind(anomaly).is_some_and(|k| k.breaks != Breaks::Exclusion)
            }
        }
    }
}

/// The content of `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub valid: Validity,
    pub promise: Promise,
    pub anomalies: BTreeMap<String, Anomaly>,
    pub checkers: BTreeMap<String, CheckerReport>,
    pub stats: Stats,
    /// Why the verdict is what it is, when that is not obvious from the counts.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Each fault the nemesis injected and the anomalies put down to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incidents: Vec<Incident>,
}

impl Results {
    /// When the first anomaly that breaks the promise happened, in history time.
    pub fn first_anomaly_time(&self) -> Option<u64> {
        self.anomalies
            .iter()
            .filter(|(name, _)| self.promise.counts(name))
            .filter_map(|(_, a)| a.first_time)
            .min()
    }

    /// How long after the first fault the first anomaly that breaks the
    /// promise came, in ns: `None` without both, or with the anomaly first.
    pub fn detection_ns(&self) -> Option<u64> {
        self.first_anomaly_time()?
            .checked_sub(self.stats.first_fault_time?)
    }

    /// Occurrences of the anomalies that break the promise.
    pub fn counted_anomalies(&self) -> u64 {
        self.anomalies
            .iter()
            .filter(|(name, _)| self.promise.counts(name))
            .map(|(_, a)| a.count)
            .sum()
    }

    /// The counter checker's typed report, if present and well-formed.
    pub fn counter(&self) -> Option<crate::counter::CounterReport> {
        let report = self.checkers.get(crate::counter::NAME)?;
        serde_json::to_value(report)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
    }

    /// When the lock was stuck (`deadlock`): each interval found as
    /// `(start, end)` in history time, the first `MAX_EXAMPLES`; empty
    /// when none was found or it was not checked.
    pub fn deadlocks(&self) -> Vec<(u64, u64)> {
        let intervals = self
            .checkers
            .get(crate::deadlock::NAME)
            .and_then(|c| c.details.get(crate::deadlock::INTERVALS));
        intervals
            .and_then(|v| serde_json::from_value::<Vec<(u64, u64)>>(v.clone()).ok())
            .unwrap_or_default()
    }
}

/// Combines the findings into the top-level `valid`, appending to `notes`
/// the reasons a reader could not see from the counts alone.
pub fn decide(
    promise: Promise,
    anomalies: &BTreeMap<String, Anomaly>,
    checkers: &BTreeMap<String, CheckerReport>,
    not_asked: &[&str],
    truncated: bool,
    notes: &mut Vec<String>,
) -> Validity {
    let mut valid = Validity::True;
    for (name, a) in anomalies {
        if promise.counts(name) {
            valid = valid.and((!a.found()).into());
        } else if a.found() {
            notes.push(format!(
                "{name}: {} occurrence(s) reported; they do not count against the {promise} promise",
                a.count
            ));
        }
    }
    for (name, report) in checkers {
        // A checker the registry does not know (the run's own `faults`, or
        // one from newer results) counts under every promise: it fails safe.
        let counts = registry::entry(name)
            .is_none_or(|c| c.anomalies.iter().any(|a| promise.counts(a.name)));
        // Not given what it needs: its own note says so.
        if !counts || not_asked.contains(&name.as_str()) {
            continue;
        }
        if report.valid == Validity::Unknown && valid == Validity::True {
            notes.push(format!("checker {name} could not decide"));
        }
        valid = valid.and(report.valid);
    }
    if truncated {
        notes.push(
            "history is truncated: its last line was cut off, so the run's end is missing".into(),
        );
        valid = valid.and(Validity::Unknown);
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anomaly;

    #[test]
    fn data_safety_counts_only_damage_to_the_data() {
        let p = Promise::DataSafety;
        assert!(p.counts(anomaly::LOST_UPDATE) && p.counts(anomaly::STALE_FENCE_ACCEPTED));
        assert!(!p.counts(anomaly::LOCK_OVERLAP) && !p.counts(anomaly::NONLINEARIZABLE));
        assert!(Promise::MutualExclusion.counts(anomaly::FOREIGN_RELEASE));
    }

    #[test]
    fn an_unknown_checker_that_does_not_count_leaves_the_verdict_alone() {
        let mut checkers = BTreeMap::new();
        checkers.insert(
            crate::linear::NAME.to_string(),
            CheckerReport::new(Validity::Unknown),
        );
        let anomalies = BTreeMap::new();
        let mut notes = vec![];
        let data = decide(
            Promise::DataSafety,
            &anomalies,
            &checkers,
            &[],
            false,
            &mut notes,
        );
        assert_eq!(data, Validity::True);
        let mutex = decide(
            Promise::MutualExclusion,
            &anomalies,
            &checkers,
            &[],
            false,
            &mut notes,
        );
        assert_eq!(mutex, Validity::Unknown);
        assert!(
            notes.iter().any(|n| n.contains("nonlinearizable")),
            "{notes:?}"
        );
    }

    #[test]
    fn the_design_example_reads_back() {
        let text = r#"{"valid": false, "promise": "mutual-exclusion",
            "anomalies": {"lock-overlap": {"count": 3, "examples": [[8, 41], [97, 120]]}},
            "checkers": {"mutex": {"valid": false}, "counter": {"valid": false, "acknowledged": 57, "final": 56}},
            "stats": {"ops": 1204, "ok": 610, "fail": 590, "info": 4, "ops_per_s": 40.1}}"#;
        let r: Results = serde_json::from_str(text).unwrap();
        assert_eq!(r.valid, Validity::False);
        assert_eq!(r.anomalies["lock-overlap"].examples[1], vec![97, 120]);
        assert_eq!(r.stats.fail, 590);
        let counter = r.counter().unwrap();
        assert_eq!((counter.acknowledged, counter.final_value), (57, Some(56)));
        assert!(r.notes.is_empty());
    }
}
