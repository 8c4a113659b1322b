//! Whether every fault showed that it took effect. The nemesis records its
//! evidence under `verified` in a fault event's value, or why it could not
//! under `unverified`; a run whose fault may not have happened proves
//! nothing, so any `unverified` makes the verdict unknown.

use crate::finding::{CheckerReport, Validity};
use crate::history::fault::UNVERIFIED;
use crate::history::Event;
use crate::{Invoked, OnEvent};

/// The checker's key under `results.json`'s `checkers`. Not in the registry:
/// a fault that may not have happened leaves any verdict unknown, whatever
/// the promise.
pub const NAME: &str = "faults";

/// Every nemesis event that carries [`UNVERIFIED`], in time order, and
/// every strike that did not land at its point.
#[derive(Default)]
pub struct Faults {
    /// (event index, fault event name, reason).
    pub unverified: Vec<(u64, String, String)>,
    placement: crate::strike::Placement,
}

impl OnEvent for Faults {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        self.placement.on_event(e);
        if !e.is_nemesis() {
            return;
        }
        if let Some(why) = e.value.get(UNVERIFIED) {
            let reason = why.as_str().map_or_else(|| why.to_string(), str::to_string);
            self.unverified.push((e.index, e.f.clone(), reason));
        }
    }
}

impl Faults {
    /// The checker's report and one note per unverified fault.
    pub fn finish(mut self) -> (CheckerReport, Vec<String>) {
        // A strike elsewhere than it says did not test what it claims.
        self.unverified.append(&mut self.placement.misplaced);
        self.unverified.sort_by_key(|(index, _, _)| *index);
        let valid = match self.unverified.is_empty() {
            true => Validity::True,
            false => Validity::Unknown,
        };
        let mut report = CheckerReport::new(valid);
        let notes: Vec<String> = self
            .unverified
            .iter()
            .map(|(index, f, why)| {
                format!("fault not verified: {f} (event {index}): {why}; the run cannot show what it did")
            })
            .collect();
        if !notes.is_empty() {
            report
                .details
                .insert(UNVERIFIED.into(), serde_json::json!(notes));
        }
        (report, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;
    use serde_json::json;

    fn faults(h: &Hist) -> (CheckerReport, Vec<String>) {
        crate::feed::feed::<Faults>(&h.build()).finish()
    }

    #[test]
    fn verified_faults_leave_the_verdict_alone() {
        let mut h = Hist::new();
        h.nemesis("start-pause")
            .value(json!({"target": "worker-1", "verified": {"state": "T"}}));
        h.nemesis("stop-pause")
            .value(json!({"target": "worker-1", "verified": {"state": "S"}}));
        let (report, notes) = faults(&h);
        assert_eq!(report.valid, Validity::True);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn an_unverified_fault_makes_it_unknown_naming_fault_and_reason() {
        let mut h = Hist::new();
        h.nemesis("start-clock")
            .value(json!({"targets": ["n1"], "unverified": "n1: TIME moved 0 ms, not 30000"}));
        h.nemesis("stop-clock")
            .value(json!({"targets": ["n1"], "verified": {}}));
        let (report, notes) = faults(&h);
        assert_eq!(report.valid, Validity::Unknown);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("start-clock"), "{}", notes[0]);
        assert!(notes[0].contains("TIME moved 0 ms"), "{}", notes[0]);
    }

    #[test]
    fn only_nemesis_events_count() {
        let mut h = Hist::new();
        h.acquire(1, "a")
            .value(json!({"unverified": "not a fault"}));
        assert_eq!(faults(&h).0.valid, Validity::True);
    }
}
