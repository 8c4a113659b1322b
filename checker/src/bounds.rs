//! Jepsen's counter check, for a counter incremented by read-then-write: an
//! acknowledged read must lie between the number of increments certainly
//! applied before it began and the number possibly applied before it ended.
//!
//! Unlike the final-read check this sees a loss when it happens, and still
//! decides when the run ended without a final read.

use crate::finding::{Validity, MAX_EXAMPLES};
use crate::history::{f, Event, OpType, Process};
use crate::{Invoked, OnEvent};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// The bounds check's entry, under `checkers.counter.bounds`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    pub valid: Validity,
    /// Acknowledged client reads checked.
    pub reads: u64,
    /// Reads below their lower bound: acknowledged increments were undone.
    pub below: u64,
    /// Reads above their upper bound: a value no increment could produce.
    pub above: u64,
    /// `[read ok, the last write acknowledged before the read began]` for a
    /// read below; `[read ok]` for one above.
    #[serde(default)]
    pub examples: Vec<Vec<u64>>,
    /// When the first out-of-bounds read completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<u64>,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            valid: Validity::True,
            reads: 0,
            below: 0,
            above: 0,
            examples: Vec::new(),
            first_time: None,
        }
    }
}

/// Fed in time order. Lower bound, taken at a read's invoke: writes
/// acknowledged so far. Upper bound at its ok: writes invoked so far, less
/// those that failed so far (`fail` = never applied; `info` or no answer may
/// have been). The harness's reads (setup, final) are the final-read check's.
#[derive(Default)]
pub struct BoundsCheck {
    acknowledged: u64,
    last_acknowledged: Option<u64>,
    invoked: u64,
    failed: u64,
    /// Per read in flight: the lower bound and the write that set it.
    lower: FxHashMap<Process, (u64, Option<u64>)>,
    pub bounds: Bounds,
}

impl OnEvent for BoundsCheck {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        if !e.process.is_client() {
            return;
        }
        match (e.kind, e.f.as_str()) {
            (OpType::Invoke, f::WRITE) => self.invoked += 1,
            (OpType::Ok, f::WRITE) => {
                self.acknowledged += 1;
                self.last_acknowledged = Some(e.index);
            }
            (OpType::Fail, f::WRITE) => self.failed += 1,
            (OpType::Invoke, f::READ) => {
                let lower = (self.acknowledged, self.last_acknowledged);
                self.lower.insert(e.process.clone(), lower);
            }
            (OpType::Ok, f::READ) => {
                let lower = self.lower.remove(&e.process);
                if let (Some((lower, write)), Some(value)) = (lower, e.int_value()) {
                    self.read(e, value, lower, write);
                }
            }
            (_, f::READ) => {
                self.lower.remove(&e.process);
            }
            _ => {}
        }
    }
}

impl BoundsCheck {
    /// Client writes acknowledged so far.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    /// Client writes that may have been applied: every one invoked and not
    /// failed (`info`, or no answer before the run ended, included).
    pub fn possible(&self) -> u64 {
        (self.invoked - self.failed.min(self.invoked)).max(self.acknowledged)
    }

    fn read(&mut self, e: &Event, value: i64, lower: u64, write: Option<u64>) {
        let upper = self.possible();
        let b = &mut self.bounds;
        b.reads += 1;
        let example = if value < lower as i64 {
            b.below += 1;
            vec![e.index, write.unwrap_or(e.index)]
        } else if value > upper as i64 {
            b.above += 1;
            vec![e.index]
        } else {
            return;
        };
        b.valid = Validity::False;
        b.first_time.get_or_insert(e.time);
        if b.examples.len() < MAX_EXAMPLES {
            b.examples.push(example);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Hist;

    fn run(h: &Hist) -> Bounds {
        crate::feed::feed::<BoundsCheck>(&h.build()).bounds
    }

    #[test]
    fn reads_of_a_correct_counter_are_within_bounds() {
        let mut h = Hist::new();
        for v in 0..3 {
            h.read(1, v);
            h.write(1, v + 1);
        }
        let b = run(&h);
        assert_eq!(
            (b.valid, b.reads, b.below, b.above),
            (Validity::True, 3, 0, 0)
        );
    }

    #[test]
    fn a_read_behind_an_acknowledged_write_is_below() {
        let mut h = Hist::new();
        h.read(1, 0);
        h.write(1, 1); // ok at index 3
        h.write(2, 2); // ok at index 5
        h.read(3, 1); // a stale holder set the counter back to 1
        let b = run(&h);
        assert_eq!((b.valid, b.below, b.above), (Validity::False, 1, 0));
        // Reading 1 misses the increment acknowledged before the read began.
        assert_eq!(b.examples, vec![vec![7, 5]]);
        assert_eq!(b.first_time, Some(h.build().events[7].time));
    }

    #[test]
    fn a_read_ahead_of_every_possible_write_is_above() {
        let mut h = Hist::new();
        h.write(1, 1);
        h.read(2, 2);
        let b = run(&h);
        assert_eq!((b.valid, b.below, b.above), (Validity::False, 0, 1));
        assert_eq!(b.examples, vec![vec![3]]);
    }

    #[test]
    fn unknown_and_concurrent_writes_widen_the_upper_bound_failed_ones_do_not() {
        let mut h = Hist::new();
        h.invoke(1, "write").value(1);
        h.info(1, "write").error("timeout"); // may have been applied
        h.invoke(2, "read");
        h.invoke(3, "write").value(2); // concurrent with the read
        h.ok(2, "read").value(2);
        h.ok(3, "write").value(2);
        assert_eq!(run(&h).valid, Validity::True);

        let mut h = Hist::new();
        h.invoke(1, "write").value(1);
        h.fail(1, "write").error("stale-fence"); // never applied
        h.read(2, 1);
        assert_eq!(run(&h).above, 1);
    }

    #[test]
    fn a_write_acknowledged_during_a_read_does_not_raise_its_lower_bound() {
        let mut h = Hist::new();
        h.invoke(2, "read");
        h.write(1, 1);
        h.ok(2, "read").value(0);
        assert_eq!(run(&h).valid, Validity::True);
    }

    #[test]
    fn harness_reads_are_left_to_the_final_read_check() {
        let mut h = Hist::new();
        h.final_read(7);
        let b = run(&h);
        assert_eq!((b.reads, b.valid), (0, Validity::True));
    }
}
