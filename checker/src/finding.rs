//! What a checker finds: its own `valid` ([`Validity`], Jepsen's three
//! values), each anomaly it looks for ([`Anomaly`], counted from its
//! [`Witness`]es), its entry under `results.json`'s `checkers`
//! ([`CheckerReport`]), and all of it handed back together ([`Finding`]).
//! Plain data, shared by every checker and the verdict.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

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
    /// How many occurrences each label the observer's events give fits
    /// (`lock-overlap`: [`crate::LEASE_EXPIRED`] or [`crate::KEY_LOST`]);
    /// empty, and left out, for a history without them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, u64>,
    /// The label of each example, in the order of `examples` (`null`: the
    /// observer saw nothing that tells); left out when no example has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub example_labels: Vec<Option<String>>,
    /// Every occurrence's witness time (ns), in the order found, the first
    /// ones matching `examples`: attribution (`cause.rs`) reads them once
    /// the whole history is seen (a stall is recorded when it ends, after
    /// the anomaly it may explain), and pictures mark every occurrence from
    /// them, not only the examples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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

/// What a checker found: its entry under `checkers`, each of its anomalies
/// by name, and notes for the reader.
pub(crate) struct Finding {
    pub report: CheckerReport,
    pub anomalies: Vec<(&'static str, Anomaly)>,
    pub notes: Vec<String>,
    /// Not checked because the check was not given what it needs (a
    /// threshold the history cannot tell): its `unknown` leaves the verdict
    /// alone, and its note says why.
    pub not_asked: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
