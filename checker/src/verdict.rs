//! The verdict: what a run promised, what was found, and whether that breaks
//! the promise. These types are the `results.json` contract (docs/formats.md,
//! "results.json"), so they read back what they write.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::registry::{self, Breaks};

/// What a lock configuration claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Promise {
    /// Never two holders at once (unfenced configs).
    #[default]
    MutualExclusion,
    /// Overlaps may happen, but the storage refuses the stale holder (fenced configs).
    DataSafety,
}

impl Promise {
    pub fn as_str(self) -> &'static str {
        match self {
            Promise::MutualExclusion => "mutual-exclusion",
            Promise::DataSafety => "data-safety",
        }
    }

    /// Whether an occurrence of `anomaly` breaks this promise. Under data
    /// safety, overlaps and what follows from them (actions and releases of a
    /// stale holder) are expected; only damage to the data, and a lock that
    /// is never granted again, count.
    pub fn counts(self, anomaly: &str) -> bool {
        match self {
            Promise::MutualExclusion => true,
            Promise::DataSafety => {
                registry::kind(anomaly).is_some_and(|k| k.breaks != Breaks::Exclusion)
            }
        }
    }
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown promise `{0}`: use mutual-exclusion or data-safety")]
pub struct UnknownPromise(pub String);

impl FromStr for Promise {
    type Err = UnknownPromise;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mutual-exclusion" => Ok(Promise::MutualExclusion),
            "data-safety" => Ok(Promise::DataSafety),
            other => Err(UnknownPromise(other.to_owned())),
        }
    }
}

/// Jepsen's three-valued verdict; JSON `true`, `false` or `"unknown"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Validity {
    True,
    False,
    #[default]
    Unknown,
}

impl Validity {
    /// Both must hold: a definite failure wins over not knowing.
    pub fn and(self, other: Validity) -> Validity {
        match (self, other) {
            (Validity::False, _) | (_, Validity::False) => Validity::False,
            (Validity::Unknown, _) | (_, Validity::Unknown) => Validity::Unknown,
            _ => Validity::True,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Validity::True => "true",
            Validity::False => "false",
            Validity::Unknown => "unknown",
        }
    }
}

impl From<bool> for Validity {
    fn from(ok: bool) -> Self {
        if ok {
            Validity::True
        } else {
            Validity::False
        }
    }
}

impl fmt::Display for Validity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Validity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Validity::True => s.serialize_bool(true),
            Validity::False => s.serialize_bool(false),
            Validity::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl<'de> Deserialize<'de> for Validity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Validity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or \"unknown\"")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Validity, E> {
                Ok(v.into())
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Validity, E> {
                match v {
                    "unknown" => Ok(Validity::Unknown),
                    "true" => Ok(Validity::True),
                    "false" => Ok(Validity::False),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One occurrence of an anomaly: the `index` values of the events that
/// witness it, and the `time` at which it became visible (its latest witness).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    pub indices: Vec<u64>,
    pub time: u64,
}

/// How many examples `results.json` keeps per anomaly; the count stays exact.
pub const MAX_EXAMPLES: usize = 20;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    pub count: u64,
    #[serde(default)]
    pub examples: Vec<Vec<u64>>,
    /// When the first occurrence became visible, so a report can say how
    /// long after the first fault things went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<u64>,
    /// How many occurrences each fault preceded: a nemesis fault's name
    /// (`pause`, `kill`…), `stall`, or `none` (see `cause.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub causes: BTreeMap<String, u64>,
    /// The cause of each example, in the order of `examples`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub example_causes: Vec<String>,
    /// Every occurrence's witness time, until the whole history is seen and
    /// attribution (`cause.rs`) turns them into `causes`: a stall is
    /// recorded when it ends, after the anomaly it may explain.
    #[serde(skip)]
    pub times: Vec<u64>,
}

impl Anomaly {
    pub fn record(&mut self, witness: Witness) {
        self.count += 1;
        self.times.push(witness.time);
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(witness.indices);
        }
        self.first_time = Some(
            self.first_time
                .map_or(witness.time, |t| t.min(witness.time)),
        );
    }

    pub fn from_witnesses(witnesses: impl IntoIterator<Item = Witness>) -> Self {
        let mut anomaly = Anomaly::default();
        for w in witnesses {
            anomaly.record(w);
        }
        anomaly
    }

    pub fn found(&self) -> bool {
        self.count > 0
    }
}

/// One checker's entry under `checkers`: its own `valid`, plus whatever
/// details it reports (kept as JSON so new checkers need no schema change).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckerReport {
    pub valid: Validity,
    #[serde(flatten)]
    pub details: BTreeMap<String, serde_json::Value>,
}

impl CheckerReport {
    pub fn new(valid: Validity) -> Self {
        CheckerReport {
            valid,
            details: BTreeMap::new(),
        }
    }

    /// Valid exactly when none of `anomalies` occurred.
    pub fn from_anomalies<'a>(anomalies: impl IntoIterator<Item = &'a Anomaly>) -> Self {
        let found = anomalies.into_iter().any(Anomaly::found);
        CheckerReport::new((!found).into())
    }
}

/// Rates and counts for the report. Every field defaults so results written
/// with fewer fields still read back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Client invocations.
    pub ops: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    pub ops_per_s: f64,
    /// Successful acquisitions.
    pub acquired: u64,
    pub cycles_per_s: f64,
    pub duration_s: f64,
    /// Time of the first `start-*` nemesis event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fault_time: Option<u64>,
    /// Faults injected: `start-*` nemesis events.
    pub faults: u64,
    /// Stalls of a worker or the harness that no nemesis fault explains (a
    /// busy host), and the longest of them in ms.
    pub stalls: u64,
    pub longest_stall_ms: u64,
    /// How often each kind of `error` (the part before any `:`) appeared on
    /// a client `fail`/`info`.
    pub errors: BTreeMap<String, u64>,
    /// Grants with and without faults, recovery after heals and crashes.
    pub availability: crate::availability::Availability,
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
    /// `(start, end)` in history time, the first [`MAX_EXAMPLES`]; empty
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
    use serde_json::json;

    #[test]
    fn validity_is_json_true_false_or_unknown() {
        assert_eq!(serde_json::to_value(Validity::True).unwrap(), json!(true));
        assert_eq!(serde_json::to_value(Validity::False).unwrap(), json!(false));
        assert_eq!(
            serde_json::to_value(Validity::Unknown).unwrap(),
            json!("unknown")
        );
        for v in [Validity::True, Validity::False, Validity::Unknown] {
            let text = serde_json::to_string(&v).unwrap();
            assert_eq!(serde_json::from_str::<Validity>(&text).unwrap(), v);
        }
        assert!(serde_json::from_str::<Validity>("\"maybe\"").is_err());
        assert!(serde_json::from_str::<Validity>("1").is_err());
    }

    #[test]
    fn false_wins_over_unknown_wins_over_true() {
        use Validity::*;
        assert_eq!(Unknown.and(False), False);
        assert_eq!(True.and(Unknown), Unknown);
        assert_eq!(True.and(True), True);
    }

    #[test]
    fn promise_names_parse_print_and_serialise_alike() {
        for p in [Promise::MutualExclusion, Promise::DataSafety] {
            assert_eq!(p.to_string().parse::<Promise>().unwrap(), p);
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                json!(p.to_string()),
                "serde and Display disagree"
            );
        }
        assert_eq!(Promise::DataSafety.to_string(), "data-safety");
        let err = "fenced".parse::<Promise>().unwrap_err();
        assert!(err.to_string().contains("mutual-exclusion"), "{err}");
    }

    #[test]
    fn data_safety_counts_only_damage_to_the_data() {
        let p = Promise::DataSafety;
        assert!(p.counts(anomaly::LOST_UPDATE) && p.counts(anomaly::STALE_FENCE_ACCEPTED));
        assert!(!p.counts(anomaly::LOCK_OVERLAP) && !p.counts(anomaly::NONLINEARIZABLE));
        assert!(Promise::MutualExclusion.counts(anomaly::FOREIGN_RELEASE));
    }

    #[test]
    fn examples_are_capped_but_the_count_is_exact() {
        let a = Anomaly::from_witnesses((0..30).rev().map(|i| Witness {
            indices: vec![i],
            time: 100 + i,
        }));
        assert_eq!(a.count, 30);
        assert_eq!(a.examples.len(), MAX_EXAMPLES);
        assert_eq!(a.first_time, Some(100));
        let none = serde_json::to_value(Anomaly::default()).unwrap();
        assert_eq!(none, json!({"count": 0, "examples": []}));
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
