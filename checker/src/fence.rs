//! `stale-fence-accepted`: the storage accepted an op carrying fence f after
//! it had already accepted one carrying a higher fence g.
//!
//! "After" must be certain from real time: the higher-fenced op completed
//! before this op was invoked. Ops that overlap in time may have reached the
//! storage in either order, so they prove nothing.

use crate::finding::{Anomaly, CheckerReport, Finding, Witness};
use crate::history::{f, Event, OpType, Process};
use crate::{anomaly, Checker, Invoked, OnEvent};
use rustc_hash::FxHashMap;

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "fence";

/// Fed in time order: keeps the highest fence accepted so far, and for each
/// op in flight the highest accepted before its invoke. Witness:
/// `[the higher-fenced op's ok, this op's ok]`, visible at this op's ok.
#[derive(Default)]
pub struct Fences {
    /// Highest (fence, ok index) accepted strictly before `now`, and at
    /// `now`: oks at the current instant are held back until time moves on,
    /// so an op invoked at the same nanosecond is not counted as after them.
    settled: Option<(u64, u64)>,
    at_now: Option<(u64, u64)>,
    now: Option<u64>,
    before_invoke: FxHashMap<Process, (u64, u64)>,
    pub stale: Anomaly,
}

impl OnEvent for Fences {
    fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>) {
        if self.now != Some(e.time) {
            self.settled = higher(self.settled, self.at_now.take());
            self.now = Some(e.time);
        }
        if e.f != f::READ && e.f != f::WRITE {
            return;
        }
        match e.kind {
            OpType::Invoke => {
                match self.settled {
                    Some(highest) => self.before_invoke.insert(e.process.clone(), highest),
                    None => self.before_invoke.remove(&e.process),
                };
            }
            OpType::Ok => self.accepted(e, invoke),
            OpType::Fail | OpType::Info => {
                self.before_invoke.remove(&e.process);
            }
        }
    }
}

impl Checker for Fences {
    fn so_far(&self, anomaly: &str) -> Option<u64> {
        (anomaly == anomaly::STALE_FENCE_ACCEPTED).then_some(self.stale.count)
    }

    fn finish(self: Box<Self>) -> Finding {
        Finding {
            report: CheckerReport::from_anomalies([&self.stale]),
            anomalies: vec![(anomaly::STALE_FENCE_ACCEPTED, self.stale)],
            notes: Vec::new(),
            not_asked: false,
        }
    }
}

impl Fences {
    fn accepted(&mut self, e: &Event, invoke: Option<&Invoked>) {
        let highest = self.before_invoke.remove(&e.process);
        let Some(fence) = e.fence.or_else(|| invoke.and_then(|i| i.fence)) else {
            return;
        };
        if let Some((_, by)) = highest.filter(|&(g, _)| g > fence) {
            self.stale.record(Witness {
                indices: vec![by, e.index],
                time: e.time,
            });
        }
        self.at_now = higher(self.at_now, Some((fence, e.index)));
    }
}

/// The higher fence; on a tie the one seen first, the earliest witness.
fn higher(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    fn run(h: &Hist) -> Vec<Vec<u64>> {
        crate::feed::feed::<Fences>(&h.build()).stale.examples
    }

    #[test]
    fn rising_fences_are_fine() {
        let mut h = Hist::new();
        h.read(1, 0).fence(1);
        h.write(1, 1).fence(1);
        h.write(2, 2).fence(2);
        h.write(2, 3).fence(2);
        assert!(run(&h).is_empty());
    }

    #[test]
    fn a_lower_fence_accepted_after_a_higher_one_is_stale() {
        let mut h = Hist::new();
        h.write(2, 1).fence(2); // ok 1
        h.read(1, 1).fence(1); // ok 3: the storage should have refused it
        h.write(1, 2).fence(1); // ok 5
        assert_eq!(run(&h), vec![vec![1, 3], vec![1, 5]]);
    }

    #[test]
    fn the_fence_may_be_on_the_invoke_only() {
        let mut h = Hist::new();
        h.write(2, 1).fence(2);
        h.invoke(1, "write").value(2).fence(1);
        h.ok(1, "write").value(2);
        assert_eq!(run(&h), vec![vec![1, 3]]);
    }

    #[test]
    fn concurrent_ops_may_have_arrived_in_either_order() {
        let mut h = Hist::new();
        h.invoke(1, "write").value(1).fence(1);
        h.write(2, 1).fence(2);
        h.ok(1, "write").value(1).fence(1);
        assert!(run(&h).is_empty());
    }

    #[test]
    fn an_invoke_at_the_same_instant_as_the_ok_is_not_after_it() {
        let mut h = Hist::new();
        h.invoke(2, "write").value(1).fence(2).time(0);
        h.ok(2, "write").value(1).fence(2).time(50);
        h.invoke(1, "write").value(1).fence(1).time(50);
        h.ok(1, "write").value(1).fence(1).time(60);
        assert!(run(&h).is_empty());
    }

    #[test]
    fn refused_and_unfenced_ops_are_ignored() {
        let mut h = Hist::new();
        h.write(2, 1).fence(2);
        h.invoke(1, "write").value(1).fence(1);
        h.fail(1, "write").fence(1).error("stale-fence");
        h.write(3, 2); // no fence: an unfenced config
        h.final_read(2);
        assert!(run(&h).is_empty());
    }
}
