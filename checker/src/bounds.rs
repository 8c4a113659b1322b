//! Jepsen's counter check, for a counter incremented by read-then-write: an
//! acknowledged read must lie between the number of increments certainly
//! applied before it began and the number possibly applied before it ended.
//!
//! Unlike the final-read check this sees a loss when it happens, and still
//! decides when the run ended without a final read.

use crate::finding::{Validity, MAX_EXAMPLES};
use crate::history::{f, Event, OpType, Process};
use crate::settings::Settings;
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
///
/// A write is acknowledged at its `ok`, or, when writes commit with the
/// release ([`Settings::writes_commit_with_release`]), at its holder's next
/// release `ok`; a release `fail` then fails it, and a release `info` or its
/// holder's `crash` leave it possible.
#[derive(Default)]
pub struct BoundsCheck {
    acknowledged: u64,
    last_acknowledged: Option<u64>,
    invoked: u64,
    failed: u64,
    /// Per read in flight: the lower bound and the write that set it.
    lower: FxHashMap<Process, (u64, Option<u64>)>,
    /// Whether a write's `ok` waits for its holder's release to count.
    commit_at_release: bool,
    /// With it, each process's writes `ok` since its last release completed:
    /// ran inside its transaction, not yet committed.
    uncommitted: FxHashMap<Process, Vec<Write>>,
    pub bounds: Bounds,
}

/// A client write's `ok`: the value it wrote, its index and its time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub value: Option<i64>,
    pub index: u64,
    pub time: u64,
}

impl OnEvent for BoundsCheck {
    fn on_event(&mut self, e: &Event, _invoke: Option<&Invoked>) {
        // Counted in `step`; only the counter needs which they were.
        let _acknowledged = self.step(e);
    }
}

impl BoundsCheck {
    /// A check that counts writes as `settings` says they take effect.
    pub fn new(settings: &Settings) -> Self {
        BoundsCheck {
            commit_at_release: settings.writes_commit_with_release,
            ..BoundsCheck::default()
        }
    }

    /// Feeds `e`, returning the writes it acknowledged (already counted):
    /// a write's own `ok`, or the writes its holder's release `ok`
    /// committed. The counter's other checks take them from here, so both
    /// agree on when a write counts.
    pub(crate) fn step(&mut self, e: &Event) -> impl Iterator<Item = Write> {
        let mut now = None;
        let mut committed = None;
        if let Some(dead) = e.crashed() {
            // Its transaction died with it, committed or not: unknown.
            self.uncommitted.remove(&dead);
        }
        if e.process.is_client() {
            match (e.kind, e.f.as_str()) {
                (OpType::Invoke, f::WRITE) => self.invoked += 1,
                (OpType::Ok, f::WRITE) => {
                    let write = Write {
                        value: e.int_value(),
                        index: e.index,
                        time: e.time,
                    };
                    match self.commit_at_release {
                        true => self
                            .uncommitted
                            .entry(e.process.clone())
                            .or_default()
                            .push(write),
                        false => now = Some(write),
                    }
                }
                (OpType::Fail, f::WRITE) => self.failed += 1,
                (OpType::Ok, f::RELEASE) => committed = self.uncommitted.remove(&e.process),
                // The commit failed: its writes were rolled back.
                (OpType::Fail, f::RELEASE) => {
                    let rolled_back = self.uncommitted.remove(&e.process);
                    self.failed += rolled_back.map_or(0, |w| w.len() as u64);
                }
                // Committed or not, no one can say: they stay possible.
                // So too when the process takes the lock again without a
                // completed release: its commit, if any, is not recorded.
                (OpType::Info, f::RELEASE) | (OpType::Invoke, f::ACQUIRE) => {
                    self.uncommitted.remove(&e.process);
                }
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
        for w in now.iter().chain(committed.iter().flatten()) {
            self.acknowledged += 1;
            self.last_acknowledged = Some(w.index);
        }
        now.into_iter().chain(committed.into_iter().flatten())
    }

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
    use crate::history::build::Hist;

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

    /// With writes committed by their holder's release (a transaction lock).
    fn run_committing(h: &Hist) -> Bounds {
        let settings = Settings::default().writes_commit_with_release(true);
        crate::feed::feed_into(&h.build(), BoundsCheck::new(&settings)).bounds
    }

    /// Process 1 writes 1 inside its hold; process 2 reads 0 after the
    /// write's ok but before the release's, then process 3 reads `late`
    /// after the release ok.
    fn read_before_and_after_the_commit(late: i64) -> Hist {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.read(1, 0);
        h.write(1, 1); // ok at index 5
        h.read(2, 0); // ok at index 7
        h.release(1, "a"); // ok at index 9: the commit
        h.read(3, late); // ok at index 11
        h
    }

    #[test]
    fn a_write_inside_a_transaction_raises_lower_bounds_only_once_its_release_commits() {
        let h = read_before_and_after_the_commit(1);
        assert_eq!(run_committing(&h).valid, Validity::True);
        // Counted at its own ok, the read in between would be below.
        assert_eq!(run(&h).examples, vec![vec![7, 5]]);

        let h = read_before_and_after_the_commit(0);
        let b = run_committing(&h);
        assert_eq!((b.valid, b.below, b.above), (Validity::False, 1, 0));
        // The write that set the bound is named by its own ok.
        assert_eq!(b.examples, vec![vec![11, 5]]);
    }

    #[test]
    fn a_transaction_whose_release_fails_never_applied_its_write() {
        let with_release = |outcome: OpType| {
            let mut h = Hist::new();
            h.acquire(1, "a");
            h.write(1, 1);
            h.invoke(1, "release").token("a");
            match outcome {
                OpType::Fail => h.fail(1, "release").error("not-held"),
                _ => h.info(1, "release").error("timeout"),
            };
            h.read(2, 1);
            h
        };
        // Rolled back: nothing can have set the counter to 1.
        let b = run_committing(&with_release(OpType::Fail));
        assert_eq!((b.valid, b.below, b.above), (Validity::False, 0, 1));
        assert_eq!(b.examples, vec![vec![7]]);
        // Counted at its ok, the write was applied whatever its release did.
        assert_eq!(run(&with_release(OpType::Fail)).valid, Validity::True);
        // Unknown: it may have committed, so 1 is possible, and 0 too.
        assert_eq!(
            run_committing(&with_release(OpType::Info)).valid,
            Validity::True
        );
    }

    #[test]
    fn a_holder_crashing_before_its_commit_leaves_its_write_possible_not_acknowledged() {
        for read in [0, 1] {
            let mut h = Hist::new();
            h.acquire(1, "a");
            h.write(1, 1);
            h.crash(1).token("a");
            h.read(2, read);
            assert_eq!(run_committing(&h).valid, Validity::True, "read {read}");
        }
        // Without the setting, reading 0 after the write's ok is below.
        let mut h = Hist::new();
        h.write(1, 1);
        h.crash(1);
        h.read(2, 0);
        assert_eq!(run(&h).below, 1);
    }

    #[test]
    fn harness_reads_are_left_to_the_final_read_check() {
        let mut h = Hist::new();
        h.final_read(7);
        let b = run(&h);
        assert_eq!((b.reads, b.valid), (0, Validity::True));
    }
}
