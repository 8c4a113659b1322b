//! Whether the history's `crash` events can be believed. A crash ends the
//! dead process's hold (its key lives on until its TTL), so a crash that did
//! not happen hides every overlap of the hold it ends. Only the harness
//! (which saw the worker die) or the nemesis (which killed it) records one;
//! a process that acts after its own crash did not die. Either way the
//! history contradicts itself and decides nothing: the verdict is unknown,
//! whatever the checkers found.

use crate::finding::{CheckerReport, Validity};
use crate::history::{f, Event, Process};
use crate::{Invoked, OnEvent};
use rustc_hash::FxHashMap;

/// The key under `results.json`'s `checkers`. Not in the registry, like
/// `faults`: a history that contradicts itself is unknown under any promise.
pub const NAME: &str = "crashes";

/// Notes beyond this many are counted, not listed.
const MAX_NOTES: usize = 5;

#[derive(Default)]
pub struct Crashes {
    /// Each dead client process and the index of its crash event.
    dead: FxHashMap<Process, u64>,
    /// (event index, why it cannot be believed), in time order.
    contradictions: Vec<(u64, String)>,
}

impl OnEvent for Crashes {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        if e.f == f::CRASH && e.process.is_client() {
            self.contradictions.push((
                e.index,
                format!(
                    "a crash recorded by client process {}: only the harness or the nemesis records one, so it was not honoured",
                    e.process
                ),
            ));
            return;
        }
        if let Some(dead) = e.crashed() {
            self.dead.entry(dead).or_insert(e.index);
            return;
        }
        if let Some(crash) = self.dead.get(&e.process) {
            self.contradictions.push((
                e.index,
                format!(
                    "process {} acted ({} {}) after its own crash (event {crash})",
                    e.process,
                    e.f,
                    format!("{:?}", e.kind).to_lowercase()
                ),
            ));
        }
    }
}

impl Crashes {
    /// The report and its notes: unknown if any crash cannot be believed.
    pub fn finish(self) -> (CheckerReport, Vec<String>) {
        let valid = match self.contradictions.is_empty() {
            true => Validity::True,
            false => Validity::Unknown,
        };
        let mut report = CheckerReport::new(valid);
        let mut notes: Vec<String> = self
            .contradictions
            .iter()
            .take(MAX_NOTES)
            .map(|(index, why)| {
                format!("history contradicts itself at event {index}: {why}; the run cannot show what it did")
            })
            .collect();
        if self.contradictions.len() > MAX_NOTES {
            notes.push(format!(
                "… and {} more such event(s)",
                self.contradictions.len() - MAX_NOTES
            ));
        }
        if !notes.is_empty() {
            let events: Vec<u64> = self.contradictions.iter().map(|(i, _)| *i).collect();
            report
                .details
                .insert("contradicting_events".into(), serde_json::json!(events));
        }
        (report, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    fn crashes(h: &Hist) -> (CheckerReport, Vec<String>) {
        crate::feed::feed::<Crashes>(&h.build()).finish()
    }

    #[test]
    fn a_harness_crash_after_which_the_process_is_silent_is_believed() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.crash(1).token("a");
        h.acquire(11, "b");
        let (report, notes) = crashes(&h);
        assert_eq!(report.valid, Validity::True);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_process_acting_after_its_own_crash_makes_it_unknown_naming_both_events() {
        let mut h = Hist::new();
        h.acquire(0, "a");
        h.crash(0).token("a");
        h.write(0, 1);
        let (report, notes) = crashes(&h);
        assert_eq!(report.valid, Validity::Unknown);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("event 3"), "{}", notes[0]);
        assert!(
            notes[0].contains("after its own crash (event 2)"),
            "{}",
            notes[0]
        );
    }

    #[test]
    fn a_crash_written_by_a_client_is_not_honoured() {
        let mut h = Hist::new();
        h.acquire(0, "a");
        h.info(1, f::CRASH).value(serde_json::json!({"process": 0}));
        assert_eq!(h.build().events[2].crashed(), None);
        let (report, notes) = crashes(&h);
        assert_eq!(report.valid, Validity::Unknown);
        assert!(notes[0].contains("client process 1"), "{notes:?}");
    }
}
