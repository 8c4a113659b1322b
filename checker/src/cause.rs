//! Attribution: which fault preceded an anomaly. A nemesis fault lasts from
//! its `start-<fault>` to its `stop-<fault>` event; an unplanned stall of a
//! worker or the harness is a `stall` event stamped when the stalled process
//! woke, lasting `value.ms` before it.
//!
//! The rule: of the faults that began at or before the anomaly became visible
//! and were still active, or had ended at most [`WINDOW_NS`] earlier, the one
//! that began last. A stall that overlaps a nemesis fault is not a candidate:
//! a holder frozen by the nemesis (SIGSTOP) wakes late too, and that stall is
//! the planned fault itself, as is any starvation during a fault.
//!
//! The window is fixed because the checker does not know the run's TTL or
//! hold times: 10 s covers the default leases and work times with room, so a
//! fault's effect (a lease running out, a restarted node forgetting a key)
//! can surface well after its end and still be named.

use crate::finding::Anomaly;
use crate::history::{error, f, Event, OpType};
use crate::Invoked;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long after a fault ended an anomaly is still put down to it.
pub const WINDOW_NS: u64 = 10_000_000_000;

/// The cause named when no fault preceded an anomaly within the window.
pub const NONE: &str = "none";

/// A client adapter hung or died with an op in flight (the op's `info`
/// completion says `adapter`): from the op's invocation to its completion.
pub const ADAPTER: &str = "adapter";

/// A node died that no fault killed (the harness's `crash` event naming a
/// `node`): from then on, as nothing restarts it.
pub const NODE_DIED: &str = "node-died";

/// One fault as an interval of run time; `end` is `None` while it never stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fault {
    kind: String,
    start: u64,
    end: Option<u64>,
    /// The event that began it (a nemesis fault's `start-<fault>`).
    index: u64,
}

/// One fault the nemesis injected, and what it led to: how many
/// occurrences of each anomaly attribution put down to it (`results.json`'s
/// `incidents`, in start order). A summary leads with these: 6 pauses, 6
/// led to two holders at once, rather than 12 pairs of overlapping holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    /// The fault's name (`pause`, `kill`, …).
    pub fault: String,
    /// The index of its `start-<fault>` event.
    pub index: u64,
    /// When it began and ended (ns); `None` if it never stopped.
    pub start: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    /// Occurrences of each anomaly put down to it; empty if it harmed nothing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub anomalies: BTreeMap<String, u64>,
}

impl Fault {
    fn ends_after(&self, t: u64) -> bool {
        self.end.is_none_or(|end| end >= t)
    }

    fn overlaps(&self, other: &Fault) -> bool {
        self.start <= other.end.unwrap_or(u64::MAX) && other.start <= self.end.unwrap_or(u64::MAX)
    }

    /// Began by `at` and had not ended more than the window before it.
    fn precedes(&self, at: u64) -> bool {
        self.start <= at && self.ends_after(at.saturating_sub(WINDOW_NS))
    }
}

/// The faults and stalls of a history that an anomaly may be put down to,
/// gathered from its events in any order.
#[derive(Clone, Debug, Default)]
pub struct Causes {
    nemesis: Vec<Fault>,
    stalls: Vec<Fault>,
    /// Failures the harness saw that no fault caused: [`ADAPTER`], [`NODE_DIED`].
    incidents: Vec<Fault>,
    /// Indices of `stall` events whose length cannot be read.
    unreadable: Vec<u64>,
}

impl Causes {
    pub fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>) {
        let adapter = e.kind == OpType::Info
            && e.process.is_client()
            && e.error.as_deref().map(error::kind) == Some(error::ADAPTER);
        if adapter {
            self.incidents.push(Fault {
                kind: ADAPTER.into(),
                start: invoke.map_or(e.time, |i| i.time),
                end: Some(e.time),
                index: e.index,
            });
            return;
        }
        if e.node_died() {
            self.incidents.push(Fault {
                kind: NODE_DIED.into(),
                start: e.time,
                end: None,
                index: e.index,
            });
            return;
        }
        if e.f == f::STALL {
            // A stall says how long it lasted, and it cannot have begun
            // before the run: anything else names no interval to blame.
            let ns = e.value["ms"]
                .as_u64()
                .and_then(|ms| ms.checked_mul(1_000_000))
                .filter(|&ns| ns <= e.time);
            match ns {
                Some(ns) => self.stalls.push(Fault {
                    kind: f::STALL.into(),
                    start: e.time - ns,
                    end: Some(e.time),
                    index: e.index,
                }),
                None => self.unreadable.push(e.index),
            }
            return;
        }
        if !e.is_nemesis() {
            return;
        }
        if let Some(kind) = crate::history::fault::started(&e.f) {
            self.nemesis.push(Fault {
                kind: kind.into(),
                start: e.time,
                end: None,
                index: e.index,
            });
        } else if let Some(kind) = crate::history::fault::stopped(&e.f) {
            // Ends the earliest open fault of its kind: faults of one kind
            // stop in the order they started.
            let open = self
                .nemesis
                .iter_mut()
                .filter(|x| x.kind == kind && x.end.is_none() && x.start <= e.time)
                .min_by_key(|x| x.start);
            if let Some(x) = open {
                x.end = Some(e.time);
            }
        }
    }

    /// Unplanned stalls: those no nemesis fault overlaps.
    fn unplanned_stalls(&self) -> impl Iterator<Item = &Fault> {
        self.stalls
            .iter()
            .filter(|s| !self.nemesis.iter().any(|x| x.overlaps(s)))
    }

    /// The cause of an anomaly that became visible at `at`: a nemesis fault's
    /// name, `stall`, or [`NONE`]. Ties go to the nemesis fault.
    pub fn cause(&self, at: u64) -> &str {
        self.chosen(at).map_or(NONE, |x| x.kind.as_str())
    }

    /// The fault or stall an anomaly visible at `at` is put down to.
    fn chosen(&self, at: u64) -> Option<&Fault> {
        // What the harness saw fail by itself is as definite as a fault.
        let planned = latest(self.nemesis.iter().chain(&self.incidents), at);
        match (planned, latest(self.unplanned_stalls(), at)) {
            (Some(p), Some(s)) if s.start > p.start => Some(s),
            (Some(p), _) => Some(p),
            (None, s) => s,
        }
    }

    /// Every nemesis fault, in start order, with nothing attributed yet.
    pub fn incidents(&self) -> Vec<Incident> {
        let mut all: Vec<Incident> = self
            .nemesis
            .iter()
            .map(|x| Incident {
                fault: x.kind.clone(),
                index: x.index,
                start: x.start,
                end: x.end,
                anomalies: BTreeMap::new(),
            })
            .collect();
        all.sort_by_key(|i| (i.start, i.index));
        all
    }

    /// A note naming the `stall` events that were ignored, if any.
    pub fn note(&self) -> Option<String> {
        let first = self.unreadable.iter().take(5).map(u64::to_string);
        (!self.unreadable.is_empty()).then(|| {
            format!(
                "{} stall event(s) ignored as causes: their value.ms is not a length in milliseconds that fits the run (events {}{})",
                self.unreadable.len(),
                first.collect::<Vec<_>>().join(", "),
                if self.unreadable.len() > 5 { ", …" } else { "" }
            )
        })
    }

    /// How many stalls no nemesis fault explains, and the longest (ms).
    pub fn unplanned(&self) -> (u64, u64) {
        let lengths = self
            .unplanned_stalls()
            .map(|s| (s.end.unwrap_or(s.start) - s.start) / 1_000_000);
        lengths.fold((0, 0), |(n, longest), ms| (n + 1, longest.max(ms)))
    }
}

/// Of `faults` that precede `at`, the one that began last.
fn latest<'a>(faults: impl Iterator<Item = &'a Fault>, at: u64) -> Option<&'a Fault> {
    faults.filter(|x| x.precedes(at)).max_by_key(|x| x.start)
}

/// Fills `causes` and `example_causes` from the witness times `anomaly`
/// gathered (one per occurrence, the first ones matching `examples`), once
/// every fault of the history is known, and adds each occurrence to the
/// incident (from [`Causes::incidents`]) it is put down to, under `name`.
/// Occurrences counted without a time of their own (a loss seen only in the
/// final count) are put down to the cause of the anomaly's first evidence.
pub fn attribute(name: &str, anomaly: &mut Anomaly, faults: &Causes, incidents: &mut [Incident]) {
    let times = anomaly.times.clone();
    let first = anomaly.first_time.or(times.first().copied());
    let timed = times
        .len()
        .min(usize::try_from(anomaly.count).unwrap_or(usize::MAX));
    let untimed = anomaly.count - timed as u64;
    let mut causes = BTreeMap::new();
    let mut put = |at: u64, n: u64| {
        let chosen = faults.chosen(at);
        let kind = chosen.map_or(NONE, |x| x.kind.as_str());
        *causes.entry(kind.to_string()).or_default() += n;
        let incident = chosen.and_then(|x| incidents.iter_mut().find(|i| i.index == x.index));
        if let Some(i) = incident.filter(|i| i.fault == kind) {
            *i.anomalies.entry(name.into()).or_default() += n;
        }
    };
    for &t in &times[..timed] {
        put(t, 1);
    }
    if let (Some(first), true) = (first, untimed > 0) {
        put(first, untimed);
    }
    anomaly.causes = causes;
    anomaly.example_causes = (0..anomaly.examples.len())
        .filter_map(|i| times.get(i).copied().or(first))
        .map(|t| faults.cause(t).to_string())
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Witness;
    use crate::history::build::Hist;
    use crate::history::{OpType, Process};
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    fn stall(who: &str, end: u64, ms: u64) -> Event {
        Event::new(end, Process::from(who), OpType::Info, f::STALL)
            .with_value(json!({"who": who, "ms": ms}))
    }

    fn faults(h: &Hist, extra: &[Event]) -> Causes {
        let mut faults = Causes::default();
        for e in h.build().events.iter().chain(extra) {
            faults.on_event(e, None);
        }
        faults
    }

    #[test]
    fn nothing_before_an_anomaly_is_none() {
        let mut h = Hist::new();
        h.nemesis("start-pause").time(20 * S);
        h.nemesis("stop-pause").time(22 * S);
        let faults = faults(&h, &[]);
        assert_eq!(
            faults.cause(5 * S),
            NONE,
            "a fault after it explains nothing"
        );
        assert_eq!(faults.cause(21 * S), "pause", "active");
        assert_eq!(faults.cause(31 * S), "pause", "ended 9 s before");
        assert_eq!(faults.cause(33 * S), NONE, "ended beyond the window");
    }

    #[test]
    fn a_fault_never_stopped_stays_active() {
        let mut h = Hist::new();
        h.nemesis("start-partition").time(S);
        assert_eq!(faults(&h, &[]).cause(100 * S), "partition");
    }

    #[test]
    fn the_fault_that_began_last_wins() {
        let mut h = Hist::new();
        h.nemesis("start-kill").time(S);
        h.nemesis("stop-kill").time(2 * S);
        h.nemesis("start-clock").time(3 * S);
        h.nemesis("stop-clock").time(4 * S);
        let unplanned = stall("worker-2", 6 * S, 500);
        let faults = faults(&h, &[unplanned]);
        assert_eq!(faults.unplanned(), (1, 500));
        assert_eq!(faults.cause(3 * S + 1), "clock");
        assert_eq!(faults.cause(7 * S), "stall", "the stall began at 5.5 s");
        assert_eq!(faults.cause(2 * S + 1), "kill");
    }

    #[test]
    fn a_stall_counts_from_when_it_began_though_recorded_at_its_end() {
        // The holder stalls from 1 s to 3 s; the overlap shows at 2 s, before
        // the stall's event (stamped on waking) exists.
        let faults = faults(&Hist::new(), &[stall("worker-0", 3 * S, 2000)]);
        assert_eq!(faults.cause(2 * S), "stall");
        assert_eq!(faults.cause(S / 2), NONE);
    }

    #[test]
    fn a_hung_adapter_and_a_node_that_died_by_itself_are_named() {
        let mut causes = Causes::default();
        let hung = Event::new(5 * S, 3.into(), OpType::Info, f::ACQUIRE)
            .with_error("adapter: the adapter did not answer acquire #4 within 20000 ms");
        let invoke = Invoked {
            time: S,
            index: 0,
            fence: None,
        };
        causes.on_event(&hung, Some(&invoke));
        assert_eq!(causes.cause(S / 2), NONE);
        assert_eq!(causes.cause(S), ADAPTER, "from the op's invocation");
        assert_eq!(causes.cause(14 * S), ADAPTER, "within the window after");
        let died = Event::new(20 * S, "harness".into(), OpType::Info, f::CRASH)
            .with_node("n1")
            .with_value(json!({"node": "n1", "pid": 42}));
        causes.on_event(&died, None);
        assert_eq!(causes.cause(60 * S), NODE_DIED, "it stays dead");
        // A worker's crash is not a node's.
        let mut h = Hist::new();
        h.crash(1);
        assert_eq!(faults(&h, &[]).cause(S), NONE);
    }

    #[test]
    fn a_stall_whose_length_cannot_be_read_is_ignored_with_a_note() {
        let garbage = |end: u64, ms: serde_json::Value| {
            Event::new(end, Process::from("worker-1"), OpType::Info, f::STALL)
                .with_value(json!({"ms": ms}))
        };
        let events = [
            garbage(3 * S, json!("abc")),
            garbage(3 * S, json!(-5)),
            garbage(3 * S, json!(1.5)),
            garbage(3 * S, json!(null)),
            garbage(3 * S, json!(u64::MAX)),
            garbage(3 * S, json!(4000)), // began before the run
        ];
        let ignored = faults(&Hist::new(), &events);
        assert_eq!(ignored.cause(2 * S), NONE);
        assert_eq!(ignored.unplanned(), (0, 0));
        let note = ignored.note().expect("a note");
        assert!(note.starts_with("6 stall event(s) ignored"), "{note}");
        assert!(faults(&Hist::new(), &[stall("w", 3 * S, 10)])
            .note()
            .is_none());
    }

    #[test]
    fn a_stall_during_a_nemesis_fault_is_that_fault() {
        // SIGSTOP makes the frozen worker's monitor wake 2 s late.
        let mut h = Hist::new();
        h.nemesis("start-pause").time(10 * S);
        h.nemesis("stop-pause").time(12 * S);
        let faults = faults(&h, &[stall("worker-3", 12 * S + 5, 2000)]);
        assert_eq!(faults.cause(12 * S + 10), "pause");
        assert_eq!(faults.unplanned(), (0, 0));
    }

    #[test]
    fn occurrences_without_a_time_go_to_the_first_evidence() {
        let mut h = Hist::new();
        h.nemesis("start-kill").time(10 * S);
        h.nemesis("stop-kill").time(11 * S);
        let mut a = Anomaly {
            count: 3,
            examples: vec![vec![1]],
            first_time: Some(12 * S),
            ..Anomaly::default()
        };
        let faults = faults(&h, &[]);
        let mut incidents = faults.incidents();
        attribute("lost-update", &mut a, &faults, &mut incidents);
        assert_eq!(a.causes.get("kill"), Some(&3), "{:?}", a.causes);
        assert_eq!(incidents[0].anomalies.get("lost-update"), Some(&3));
        assert_eq!(a.example_causes, ["kill"]);
    }

    #[test]
    fn attribution_tallies_every_occurrence_and_names_each_example() {
        let mut h = Hist::new();
        h.nemesis("start-pause").time(10 * S);
        h.nemesis("stop-pause").time(12 * S);
        let faults = faults(&h, &[stall("harness", 40 * S, 300)]);
        let mut a = Anomaly::default();
        for t in [S, 11 * S, 13 * S, 40 * S] {
            a.record(Witness {
                indices: vec![t],
                time: t,
            });
        }
        let mut incidents = faults.incidents();
        attribute("lock-overlap", &mut a, &faults, &mut incidents);
        assert_eq!(
            incidents.len(),
            1,
            "the stall is no incident: {incidents:?}"
        );
        assert_eq!(incidents[0].anomalies.get("lock-overlap"), Some(&2));
        let tally: Vec<(&str, u64)> = a.causes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(tally, [("none", 1), ("pause", 2), ("stall", 1)]);
        assert_eq!(a.example_causes, ["none", "pause", "pause", "stall"]);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["causes"], json!({"none": 1, "pause": 2, "stall": 1}));
    }

    #[test]
    fn each_fault_is_an_incident_with_what_was_put_down_to_it() {
        let mut h = Hist::new();
        h.nemesis("start-pause").time(10 * S);
        h.nemesis("stop-pause").time(12 * S);
        h.nemesis("start-pause").time(30 * S);
        h.nemesis("stop-pause").time(32 * S);
        h.nemesis("start-kill").time(50 * S);
        h.nemesis("stop-kill").time(51 * S);
        let faults = faults(&h, &[]);
        let mut incidents = faults.incidents();
        let mut overlaps = Anomaly::default();
        let mut lost = Anomaly::default();
        for t in [11 * S, 11 * S + 5, 31 * S] {
            overlaps.record(Witness {
                indices: vec![t],
                time: t,
            });
        }
        lost.record(Witness {
            indices: vec![1],
            time: 13 * S,
        });
        attribute("lock-overlap", &mut overlaps, &faults, &mut incidents);
        attribute("lost-update", &mut lost, &faults, &mut incidents);
        let seen: Vec<(&str, Vec<(&str, u64)>)> = incidents
            .iter()
            .map(|i| {
                let a = i.anomalies.iter().map(|(k, v)| (k.as_str(), *v));
                (i.fault.as_str(), a.collect())
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("pause", vec![("lock-overlap", 2), ("lost-update", 1)]),
                ("pause", vec![("lock-overlap", 1)]),
                ("kill", vec![]),
            ]
        );
    }
}
