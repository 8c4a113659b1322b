//! Feeding checkers one event at a time, in time order (stateright's
//! `on_invoke`/`on_return`), from a history in memory or streamed from a
//! JSONL file whose lines arrive in file order.
//!
//! [`Pairing`] hands each completion its invocation; [`Reorder`] puts a
//! streamed file back into time order. The event-fed checkers keep only
//! what is open: ops in flight, holds not yet released. So a streamed check
//! needs memory for the open ops plus the reorder window, not for the
//! history.

use crate::history::{Event, OpType};
use crate::ops::InFlight;
use crate::{Invoked, OnEvent};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Pairs each completion with its process's op in flight, as
/// [`crate::ops::Pairs`] does for a whole history.
#[derive(Default)]
pub struct Pairing {
    in_flight: InFlight<Invoked>,
}

impl Pairing {
    /// Feeds `e` to `checker` with its invocation, then records it.
    pub fn feed(&mut self, e: &Event, checker: &mut impl OnEvent) {
        if e.kind == OpType::Invoke {
            checker.on_event(e, None);
            let invoked = Invoked {
                time: e.time,
                index: e.index,
                fence: e.fence,
            };
            self.in_flight.invoke(e, invoked);
            return;
        }
        let invoke = self.in_flight.complete(e);
        checker.on_event(e, invoke.as_ref());
    }

    pub fn unmatched(&self) -> usize {
        self.in_flight.unmatched()
    }
}

/// Feeds a whole history in time order to a fresh `T`: how a checker's own
/// tests run it alone.
#[cfg(test)]
pub fn feed<T: OnEvent + Default>(history: &crate::history::History) -> T {
    feed_into(history, T::default())
}

/// Feeds a whole history in time order to `checker` (one made for some
/// settings).
#[cfg(test)]
pub fn feed_into<T: OnEvent>(history: &crate::history::History, mut checker: T) -> T {
    let mut pairing = Pairing::default();
    for e in history.in_time_order() {
        pairing.feed(e, &mut checker);
    }
    checker
}

/// Puts events that arrive in file order back into time order. A worker
/// paused between taking a timestamp and writing its event delivers it late,
/// so events wait until the newest time seen is `window_ns` past them, or
/// (when [`Reorder::holding_at_most`] bounds it) until too many wait: a
/// history dense in time would otherwise wait whole. One arriving after a
/// later event was released is fed out of order and counted in `late`.
///
/// Most events arrive in order: those wait in a queue, in arrival order;
/// only the others go through a heap.
pub struct Reorder {
    window_ns: u64,
    max_waiting: usize,
    /// Waiting events that arrived in (time, index) order.
    run: VecDeque<Event>,
    /// Waiting events that arrived after one they precede in time:
    /// (time, index, slot) of each.
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Event>>,
    free: Vec<usize>,
    newest: u64,
    released: u64,
    pub late: u64,
    pub peak: usize,
    /// How far behind the newest time seen an event arrived, at most (ns):
    /// a window this wide (and unbounded in events) puts the events in order.
    pub lateness: u64,
}

impl Reorder {
    pub fn new(window_ns: u64) -> Self {
        Reorder {
            window_ns,
            max_waiting: usize::MAX,
            run: VecDeque::new(),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            newest: 0,
            released: 0,
            late: 0,
            peak: 0,
            lateness: 0,
        }
    }

    /// Releases the earliest event whenever more than `events` wait,
    /// whatever their time: bounds the memory a dense history takes.
    pub fn holding_at_most(mut self, events: usize) -> Self {
        self.max_waiting = events;
        self
    }

    /// Takes `e`; hands every event now safe to release to `out`.
    pub fn push(&mut self, e: Event, mut out: impl FnMut(Event)) {
        self.lateness = self.lateness.max(self.newest.saturating_sub(e.time));
        if e.time < self.released {
            self.late += 1;
            out(e);
            return;
        }
        self.newest = self.newest.max(e.time);
        let in_order = self
            .run
            .back()
            .is_none_or(|last| (last.time, last.index) <= (e.time, e.index));
        if in_order {
            self.run.push_back(e);
        } else {
            let key = (e.time, e.index);
            let slot = match self.free.pop() {
                Some(slot) => {
                    self.slots[slot] = Some(e);
                    slot
                }
                None => {
                    self.slots.push(Some(e));
                    self.slots.len() - 1
                }
            };
            self.heap.push(Reverse((key.0, key.1, slot)));
        }
        let waiting = self.run.len() + self.heap.len();
        self.peak = self.peak.max(waiting);
        let horizon = self.newest.saturating_sub(self.window_ns);
        while let Some((time, heaped)) = self.earliest() {
            let waiting = self.run.len() + self.heap.len();
            if time >= horizon && waiting <= self.max_waiting {
                break;
            }
            out(self.pop(heaped));
        }
    }

    /// Releases everything still waiting, in time order.
    pub fn drain(&mut self, mut out: impl FnMut(Event)) {
        while let Some((_, heaped)) = self.earliest() {
            out(self.pop(heaped));
        }
    }

    /// The time of the earliest event waiting, by (time, index), and
    /// whether it is in the heap.
    fn earliest(&self) -> Option<(u64, bool)> {
        let queued = self.run.front().map(|e| (e.time, e.index));
        let heaped = self.heap.peek().map(|Reverse((t, i, _))| (*t, *i));
        match (queued, heaped) {
            (Some(q), Some(h)) if h < q => Some((h.0, true)),
            (Some(q), _) => Some((q.0, false)),
            (None, h) => h.map(|h| (h.0, true)),
        }
    }

    fn pop(&mut self, heaped: bool) -> Event {
        let e = match heaped {
            true => {
                let Reverse((_, _, slot)) = self.heap.pop().expect("peeked");
                self.free.push(slot);
                self.slots[slot].take().expect("each slot is filled once")
            }
            false => self.run.pop_front().expect("peeked"),
        };
        self.released = e.time;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Process;

    fn at(time: u64, index: u64) -> Event {
        let mut e = Event::new(time, Process::Client(1), OpType::Invoke, "read");
        e.index = index;
        e
    }

    #[test]
    fn reorder_releases_in_time_order_within_the_window() {
        let mut r = Reorder::new(100);
        let mut out = Vec::new();
        for (t, i) in [(10, 0), (50, 1), (30, 2), (200, 3), (120, 4), (400, 5)] {
            r.push(at(t, i), |e| out.push(e.time));
        }
        r.drain(|e| out.push(e.time));
        assert_eq!(out, vec![10, 30, 50, 120, 200, 400]);
        assert_eq!(r.late, 0);
        assert_eq!(r.peak, 4);
    }

    #[test]
    fn an_event_later_than_the_window_is_counted_late() {
        let mut r = Reorder::new(100);
        let mut out = Vec::new();
        for (t, i) in [(10, 0), (500, 1), (700, 2), (20, 3)] {
            r.push(at(t, i), |e| out.push(e.time));
        }
        r.drain(|e| out.push(e.time));
        assert_eq!(out, vec![10, 500, 20, 700]);
        assert_eq!(r.late, 1);
    }

    #[test]
    fn a_bound_in_events_releases_the_earliest_whatever_its_time() {
        let mut r = Reorder::new(1_000).holding_at_most(2);
        let mut out = Vec::new();
        // 30 comes one event late: within the bound. 20 comes three late:
        // 40 went on before it, so it is late, and 40 − 20 behind.
        for (t, i) in [(10, 0), (40, 1), (30, 2), (50, 3), (60, 4), (20, 5)] {
            r.push(at(t, i), |e| out.push(e.time));
        }
        r.drain(|e| out.push(e.time));
        assert_eq!(out, vec![10, 30, 40, 20, 50, 60]);
        assert_eq!((r.late, r.peak, r.lateness), (1, 3, 40));
        // A window of that much time alone puts them in order.
        let mut r = Reorder::new(40);
        let mut out = Vec::new();
        for (t, i) in [(10, 0), (40, 1), (30, 2), (50, 3), (60, 4), (20, 5)] {
            r.push(at(t, i), |e| out.push(e.time));
        }
        r.drain(|e| out.push(e.time));
        assert_eq!(out, vec![10, 20, 30, 40, 50, 60]);
        assert_eq!(r.late, 0);
    }

    #[test]
    fn pairing_hands_a_completion_its_invocation() {
        #[derive(Default)]
        struct Seen(Vec<Option<u64>>);
        impl OnEvent for Seen {
            fn on_event(&mut self, _e: &Event, invoke: Option<&Invoked>) {
                self.0.push(invoke.map(|i| i.index));
            }
        }
        let mut h = crate::history::build::Hist::new();
        h.invoke(1, "read");
        h.invoke(2, "write").value(1);
        h.ok(1, "read").value(0);
        h.ok(2, "read"); // wrong f: unmatched
        let history = h.build();
        let mut seen = Seen::default();
        let mut pairing = Pairing::default();
        for e in &history.events {
            pairing.feed(e, &mut seen);
        }
        assert_eq!(seen.0, vec![None, None, Some(0), None]);
        assert_eq!(pairing.unmatched(), 1);
    }
}
