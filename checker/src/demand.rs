//! Two things the liveness views (`deadlock`, availability stats) follow
//! through a history in time order: which faults are active, and when
//! someone wanted the lock (an acquire in flight).

use crate::history::{f, fault, Event, OpType};
use rustc_hash::FxHashMap;

/// The nemesis faults active now: each `start-X` until its `stop-X`.
#[derive(Default)]
pub struct ActiveFaults {
    open: FxHashMap<String, u32>,
}

/// What a nemesis event did to the set of active faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Started,
    Stopped,
}

impl ActiveFaults {
    /// Follows `e`; says whether it started or healed a fault.
    pub fn on_event(&mut self, e: &Event) -> Option<Change> {
        if !e.is_nemesis() {
            return None;
        }
        if let Some(kind) = fault::started(&e.f) {
            *self.open.entry(kind.to_string()).or_default() += 1;
            return Some(Change::Started);
        }
        let kind = fault::stopped(&e.f)?;
        // A stop with no start (a history cut at its beginning) heals nothing.
        let open = self.open.get_mut(kind).filter(|n| **n > 0)?;
        *open -= 1;
        Some(Change::Stopped)
    }

    pub fn any(&self) -> bool {
        self.open.values().any(|&n| n > 0)
    }
}

/// Acquires in flight, and within a window of time (opened by the caller)
/// the first and last moments someone wanted the lock. A worker's next
/// acquire may start a moment after its last one failed: the window spans
/// such gaps, from the first demand in it to the last.
#[derive(Default)]
pub struct Demand {
    in_flight: u32,
    first: Option<u64>,
    last: Option<u64>,
}

impl Demand {
    /// Follows a client acquire op; other events leave it alone.
    pub fn on_event(&mut self, e: &Event) {
        if e.f != f::ACQUIRE || !e.process.is_client() {
            return;
        }
        match e.kind {
            OpType::Invoke => {
                self.in_flight += 1;
                self.first.get_or_insert(e.time);
                self.last = Some(e.time);
            }
            _ => {
                self.in_flight = self.in_flight.saturating_sub(1);
                self.last = Some(e.time);
            }
        }
    }

    /// Starts a new window at `now`: an acquire in flight is demand from now.
    pub fn open(&mut self, now: u64) {
        let wanted = (self.in_flight > 0).then_some(now);
        (self.first, self.last) = (wanted, wanted);
    }

    /// From the window's first demand to its last, or to `now` while an
    /// acquire is still in flight; `None` if no one wanted the lock in it.
    pub fn span(&self, now: u64) -> Option<(u64, u64)> {
        let first = self.first?;
        let last = match self.in_flight {
            0 => self.last.unwrap_or(first),
            _ => now,
        };
        Some((first, last.max(first)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    #[test]
    fn a_fault_is_active_from_its_start_to_its_stop() {
        let mut h = Hist::new();
        h.nemesis("stop-pause"); // never started
        h.nemesis("start-pause");
        h.nemesis("start-kill");
        h.nemesis("stop-pause");
        h.nemesis("stop-kill");
        let mut faults = ActiveFaults::default();
        let active: Vec<bool> = h
            .build()
            .events
            .iter()
            .map(|e| {
                faults.on_event(e);
                faults.any()
            })
            .collect();
        assert_eq!(active, [false, true, true, true, false]);
    }

    #[test]
    fn demand_spans_retries_and_ends_at_the_last_acquire() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").time(100);
        h.fail(1, "acquire").time(200);
        h.invoke(1, "acquire").time(210);
        h.fail(1, "acquire").time(300);
        let mut d = Demand::default();
        d.open(50);
        assert_eq!(d.span(60), None);
        for e in &h.build().events {
            d.on_event(e);
        }
        assert_eq!(d.span(1_000), Some((100, 300)));
        h.invoke(2, "acquire").time(400);
        d.on_event(&h.build().events[4]);
        d.open(500);
        assert_eq!(d.span(900), Some((500, 900)), "still in flight");
    }
}
