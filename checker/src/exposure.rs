//! What each fault met: the holds live and the acquires and writes in
//! flight when it started (a strike's own op among them), and the grants
//! and writes while it was active. A fault that met none of them could not
//! have broken a lock (no holder to strand, no acquire to lose, no grant to
//! race, no write to land late), so it is no evidence for the verdict; a
//! run whose faults all met nothing tested nothing its nemesis was for.

use crate::history::{f, fault, Event, OpType, Process};
use crate::{Invoked, OnEvent};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// What the faults met, summed over them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Exposure {
    /// Faults that met at least one hold, grant or write, and those that
    /// met none.
    pub met: u64,
    pub unmet: u64,
    /// Of `unmet`: faults the run's end cut short before they acted.
    pub interrupted: u64,
    /// Holds live, and acquires and writes in flight, at a fault's start;
    /// grants and client writes while it was active (an event inside two
    /// overlapping faults counts for each).
    pub holds: u64,
    pub in_flight: u64,
    pub grants: u64,
    pub writes: u64,
}

impl Exposure {
    pub fn is_empty(&self) -> bool {
        self.met == 0 && self.unmet == 0
    }
}

/// One fault's tally, from its start to its heal.
struct Open {
    kind: String,
    interrupted: bool,
    holds: u64,
    in_flight: u64,
    grants: u64,
    writes: u64,
}

/// Fed in time order, in the one pass.
#[derive(Default)]
pub struct ExposureCheck {
    exposure: Exposure,
    open: Vec<Open>,
    holders: FxHashSet<Process>,
    /// Processes with an acquire or a write sent and not yet answered.
    in_flight: FxHashSet<Process>,
}

impl OnEvent for ExposureCheck {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        if let Some(dead) = e.crashed() {
            self.holders.remove(&dead);
            self.in_flight.remove(&dead);
        }
        if e.is_nemesis() {
            if let Some(kind) = fault::started(&e.f) {
                self.open.push(Open {
                    kind: kind.to_string(),
                    interrupted: false,
                    holds: self.holders.len() as u64,
                    in_flight: self.in_flight.len() as u64,
                    grants: 0,
                    writes: 0,
                });
            } else if let Some(kind) = fault::stopped(&e.f) {
                // Faults of one kind heal in the order they started.
                if let Some(i) = self.open.iter().position(|o| o.kind == kind) {
                    let mut closed = self.open.remove(i);
                    closed.interrupted = e.value.get(fault::INTERRUPTED).is_some();
                    self.close(closed);
                }
            }
            return;
        }
        if !e.process.is_client() {
            return;
        }
        if matches!(e.f.as_str(), f::ACQUIRE | f::WRITE) {
            match e.kind {
                OpType::Invoke => self.in_flight.insert(e.process.clone()),
                _ => self.in_flight.remove(&e.process),
            };
        }
        match (e.kind, e.f.as_str()) {
            (OpType::Ok, f::ACQUIRE) => {
                self.holders.insert(e.process.clone());
                self.open.iter_mut().for_each(|o| o.grants += 1);
            }
            (OpType::Invoke, f::RELEASE) => {
                self.holders.remove(&e.process);
            }
            (OpType::Invoke, f::WRITE) => self.open.iter_mut().for_each(|o| o.writes += 1),
            _ => {}
        }
    }
}

impl ExposureCheck {
    fn close(&mut self, o: Open) {
        let x = &mut self.exposure;
        match (o.interrupted, o.holds + o.in_flight + o.grants + o.writes) {
            (true, _) => {
                x.unmet += 1;
                x.interrupted += 1;
            }
            (false, 0) => x.unmet += 1,
            (false, _) => x.met += 1,
        }
        x.holds += o.holds;
        x.in_flight += o.in_flight;
        x.grants += o.grants;
        x.writes += o.writes;
    }

    /// A fault still active when the history ends counts as it stands.
    pub fn finish(mut self) -> Exposure {
        for o in std::mem::take(&mut self.open) {
            self.close(o);
        }
        self.exposure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    fn exposure(h: &Hist) -> Exposure {
        crate::feed::feed::<ExposureCheck>(&h.build()).finish()
    }

    #[test]
    fn a_fault_that_started_under_a_holder_met_it() {
        let mut h = Hist::new();
        h.acquire(1, "t1");
        h.nemesis("start-pause");
        h.nemesis("stop-pause");
        h.release(1, "t1");
        let x = exposure(&h);
        assert_eq!(
            (x.met, x.unmet, x.holds, x.grants, x.writes),
            (1, 0, 1, 0, 0)
        );
    }

    #[test]
    fn grants_and_writes_during_a_fault_count_and_a_fault_between_holds_met_nothing() {
        let mut h = Hist::new();
        h.nemesis("start-kill");
        h.acquire(1, "t1");
        h.write(1, 1);
        h.release(1, "t1");
        h.nemesis("stop-kill");
        // Nobody holds the lock, nobody takes it, nobody writes.
        h.nemesis("start-partition");
        h.nemesis("stop-partition");
        let x = exposure(&h);
        assert_eq!((x.met, x.unmet), (1, 1));
        assert_eq!((x.holds, x.grants, x.writes), (0, 1, 1));
    }

    #[test]
    fn a_fault_the_runs_end_cut_short_is_no_evidence_whatever_it_met() {
        let mut h = Hist::new();
        h.nemesis("start-failover");
        h.acquire(1, "t1");
        h.write(1, 1);
        let why = serde_json::json!({ fault::INTERRUPTED: "the run ended before the kill" });
        h.nemesis("stop-failover").value(why);
        let x = exposure(&h);
        assert_eq!((x.met, x.unmet, x.interrupted), (0, 1, 1));
        // What it saw still counts: the grant and the write happened.
        assert_eq!((x.grants, x.writes), (1, 1));
    }

    #[test]
    fn an_acquire_in_flight_when_a_fault_strikes_it_was_met() {
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.nemesis("start-lose-reply");
        h.nemesis("stop-lose-reply");
        h.info(1, "acquire");
        let x = exposure(&h);
        assert_eq!((x.met, x.unmet, x.holds, x.in_flight), (1, 0, 0, 1));
    }

    #[test]
    fn a_crashed_holder_holds_nothing_for_the_next_fault() {
        let mut h = Hist::new();
        h.acquire(1, "t1");
        h.crash(1);
        h.nemesis("start-partition");
        h.nemesis("stop-partition");
        let x = exposure(&h);
        assert_eq!((x.met, x.unmet, x.holds), (0, 1, 0));
    }
}
