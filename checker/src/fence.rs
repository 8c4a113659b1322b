//! `stale-fence-accepted`: the storage accepted an op carrying fence f after
//! it had already accepted one carrying a higher fence g.
//!
//! "After" must be certain from real time: the higher-fenced op completed
//! before this op was invoked. Ops that overlap in time may have reached the
//! storage in either order, so they prove nothing.

use crate::history::{f, Event, History, OpType};
use crate::ops::Pairs;
use crate::verdict::Witness;

/// Witness: `[the higher-fenced op's ok, this op's ok]`, visible at this op's ok.
///
/// One pass in time order keeps the highest fence accepted so far. Oks at
/// the current instant are held back until time moves on, so an op invoked
/// at the same nanosecond as another's ok is not counted as after it.
pub fn stale_fences_accepted(history: &History, pairs: &Pairs) -> Vec<Witness> {
    let events = &history.events;
    let fence_of = |ok: usize| -> Option<u64> {
        events[ok]
            .fence
            .or_else(|| pairs.invoke_of(ok).and_then(|i| events[i].fence))
    };
    let is_data_op = |e: &Event| e.f == f::READ || e.f == f::WRITE;

    let mut witnesses = Vec::new();
    // Highest (fence, ok index) accepted strictly before `now`, and at `now`.
    let mut settled: Option<(u64, u64)> = None;
    let mut at_now: Option<(u64, u64)> = None;
    let mut now = None;
    for pos in history.time_order() {
        let e = &events[pos];
        if now != Some(e.time) {
            settled = higher(settled, at_now.take());
            now = Some(e.time);
        }
        if !is_data_op(e) {
            continue;
        }
        match e.kind {
            OpType::Invoke => {
                let Some(ok) = pairs
                    .completion_of(pos)
                    .filter(|&c| events[c].kind == OpType::Ok)
                else {
                    continue;
                };
                let (Some(mine), Some((highest, by))) = (fence_of(ok), settled) else {
                    continue;
                };
                if highest > mine {
                    witnesses.push(Witness {
                        indices: vec![by, events[ok].index],
                        time: events[ok].time,
                    });
                }
            }
            OpType::Ok => {
                if let Some(fence) = fence_of(pos) {
                    at_now = higher(at_now, Some((fence, e.index)));
                }
            }
            _ => {}
        }
    }
    witnesses.sort_by_key(|w| w.time);
    witnesses
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
    use crate::testing::Hist;

    fn run(h: &Hist) -> Vec<Vec<u64>> {
        let history = h.build();
        stale_fences_accepted(&history, &Pairs::new(&history))
            .into_iter()
            .map(|w| w.indices)
            .collect()
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
