//! Availability: how often the lock was granted with and without a fault
//! active, how long it took to be granted again after a heal or a holder's
//! death, and the longest time no one held it while someone wanted it.
//! Part of the run's own record (`stats.availability`), not a verdict: the
//! verdict's liveness anomaly is `deadlock` (`deadlock.rs`).

use crate::demand::{ActiveFaults, Change, Demand};
use crate::history::{f, Event, OpType, Process};
use crate::{Invoked, OnEvent};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// `stats.availability` in `results.json`. Every field defaults so results
/// written before it existed still read back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Availability {
    /// Acquire ops invoked with no fault active, and how many were granted.
    pub attempts: u64,
    pub granted: u64,
    /// Acquire ops invoked while a fault was active, and how many were granted.
    pub attempts_in_fault: u64,
    pub granted_in_fault: u64,
    /// Heals (`stop-…`) and holders' crashes that a grant followed, and the
    /// time from each to the next grant (ms): the longest and the median.
    pub recoveries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_max_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_median_ms: Option<u64>,
    /// Heals and holders' crashes with no grant after them.
    pub unrecovered: u64,
    /// The longest time no one held the lock while an acquire was in flight
    /// (a hold runs from its acquire `ok` to its release invoke or its
    /// holder's crash), in ms.
    pub longest_unheld_ms: u64,
}

impl Availability {
    /// The share of acquires granted with no fault active, if any were tried.
    pub fn share(&self) -> Option<f64> {
        ratio(self.granted, self.attempts)
    }

    /// The share of acquires granted while a fault was active.
    pub fn share_in_fault(&self) -> Option<f64> {
        ratio(self.granted_in_fault, self.attempts_in_fault)
    }
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Fed in time order, in the one pass.
#[derive(Default)]
pub struct AvailabilityCheck {
    a: Availability,
    faults: ActiveFaults,
    /// Each acquire in flight: was a fault active at its invoke?
    in_fault: rustc_hash::FxHashMap<Process, bool>,
    /// Heals and crashes waiting for the next grant (their times).
    waiting: Vec<u64>,
    recoveries: Vec<u64>,
    holders: FxHashSet<Process>,
    /// Demand while no one holds the lock.
    unheld: Demand,
    latest: u64,
}

impl OnEvent for AvailabilityCheck {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        self.latest = self.latest.max(e.time);
        let active_before = self.faults.any();
        if self.faults.on_event(e) == Some(Change::Stopped) {
            self.waiting.push(e.time);
            return;
        }
        if let Some(dead) = e.crashed() {
            // A crash inside a fault (the `crash` nemesis) is measured from
            // that fault's heal.
            if e.token.is_some() && !active_before {
                self.waiting.push(e.time);
            }
            self.released(&dead, e.time);
            return;
        }
        if !e.process.is_client() {
            return;
        }
        match (e.kind, e.f.as_str()) {
            (OpType::Invoke, f::RELEASE) => self.released(&e.process.clone(), e.time),
            (OpType::Invoke, f::ACQUIRE) => {
                match active_before {
                    true => self.a.attempts_in_fault += 1,
                    false => self.a.attempts += 1,
                }
                self.in_fault.insert(e.process.clone(), active_before);
            }
            (OpType::Ok, f::ACQUIRE) => {
                match self.in_fault.get(&e.process) {
                    Some(true) => self.a.granted_in_fault += 1,
                    Some(false) => self.a.granted += 1,
                    None => {}
                }
                for healed in self.waiting.drain(..) {
                    self.recoveries.push(e.time - healed.min(e.time));
                }
                if self.holders.is_empty() {
                    self.close_unheld(e.time);
                }
                self.holders.insert(e.process.clone());
            }
            _ => {}
        }
        if e.f == f::ACQUIRE {
            self.unheld.on_event(e);
            if e.kind != OpType::Invoke {
                self.in_fault.remove(&e.process);
            }
        }
    }
}

impl AvailabilityCheck {
    /// `p`'s hold, if it had one, ends at `now`.
    fn released(&mut self, p: &Process, now: u64) {
        if self.holders.remove(p) && self.holders.is_empty() {
            self.unheld.open(now);
        }
    }

    fn close_unheld(&mut self, now: u64) {
        if let Some((first, last)) = self.unheld.span(now) {
            let ms = (last - first) / 1_000_000;
            self.a.longest_unheld_ms = self.a.longest_unheld_ms.max(ms);
        }
    }

    pub fn finish(mut self) -> Availability {
        if self.holders.is_empty() {
            self.close_unheld(self.latest);
        }
        self.a.unrecovered = self.waiting.len() as u64;
        self.recoveries.sort_unstable();
        let ms = |ns: u64| ns / 1_000_000;
        self.a.recoveries = self.recoveries.len() as u64;
        self.a.recovery_max_ms = self.recoveries.last().copied().map(ms);
        self.a.recovery_median_ms = median(&self.recoveries).map(ms);
        self.a
    }
}

/// The middle of sorted `values` (the lower of the two middles).
fn median(values: &[u64]) -> Option<u64> {
    let n = values.len();
    (n > 0).then(|| values[(n - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn availability(h: &Hist) -> Availability {
        crate::feed::feed::<AvailabilityCheck>(&h.build()).finish()
    }

    #[test]
    fn grants_are_counted_with_and_without_a_fault_active() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.nemesis("start-partition");
        h.invoke(2, "acquire");
        h.fail(2, "acquire").error("timeout");
        h.invoke(3, "acquire");
        h.nemesis("stop-partition"); // judged by the fault at its invoke
        h.ok(3, "acquire");
        h.invoke(2, "acquire");
        h.fail(2, "acquire").error("lock-busy");
        let a = availability(&h);
        assert_eq!((a.attempts, a.granted), (2, 1));
        assert_eq!((a.attempts_in_fault, a.granted_in_fault), (2, 1));
        assert_eq!((a.share(), a.share_in_fault()), (Some(0.5), Some(0.5)));
        assert_eq!(Availability::default().share(), None);
    }

    #[test]
    fn recovery_runs_from_each_heal_or_holder_crash_to_the_next_grant() {
        let mut h = Hist::new();
        h.nemesis("start-pause").time(S);
        h.nemesis("stop-pause").time(2 * S);
        h.invoke(1, "acquire").time(2 * S);
        h.ok(1, "acquire").token("a").time(2 * S + 300 * MS);
        // The holder dies holding; the next grant is a TTL later.
        h.crash(1).token("a").time(3 * S);
        h.invoke(2, "acquire").time(3 * S);
        h.ok(2, "acquire").token("b").time(5 * S);
        // Inside a crash fault, only its heal counts.
        h.nemesis("start-crash").time(6 * S);
        h.crash(2).token("b").time(6 * S + MS);
        h.nemesis("stop-crash").time(6 * S + 2 * MS);
        h.invoke(3, "acquire").time(6 * S + 2 * MS);
        h.ok(3, "acquire").token("c").time(7 * S + 2 * MS);
        h.nemesis("start-kill").time(9 * S);
        h.nemesis("stop-kill").time(10 * S);
        let a = availability(&h);
        assert_eq!(a.recoveries, 3);
        assert_eq!(a.recovery_max_ms, Some(2_000));
        assert_eq!(a.recovery_median_ms, Some(1_000));
        assert_eq!(a.unrecovered, 1, "the kill's heal saw no grant after it");
    }

    #[test]
    fn the_longest_unheld_time_counts_only_while_someone_wanted_the_lock() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").time(S);
        h.ok(1, "acquire").token("a").time(S + 10 * MS);
        h.invoke(1, "release").token("a").time(2 * S);
        h.ok(1, "release").token("a").time(2 * S + MS);
        // No one wants it for 10 s, then 2 waits 400 ms for a dead holder.
        h.invoke(2, "acquire").time(12 * S);
        h.ok(2, "acquire").token("b").time(12 * S);
        h.crash(2).token("b").time(13 * S);
        h.invoke(3, "acquire").time(13 * S + 100 * MS);
        h.ok(3, "acquire").token("c").time(13 * S + 500 * MS);
        // Still waiting when the history ends.
        h.invoke(3, "release").token("c").time(14 * S);
        h.invoke(4, "acquire").time(14 * S);
        h.info(4, "acquire")
            .time(14 * S + 700 * MS)
            .error("timeout");
        let a = availability(&h);
        assert_eq!(a.longest_unheld_ms, 700);
    }
}
