//! Mutual-exclusion anomalies found from lock holds: `lock-overlap`,
//! `unsafe-action` and `foreign-release`.
//!
//! All three take holds sorted by start, as [`crate::holds::holds`] returns
//! them, so "who acquired in between" is a binary search over start times.

use crate::history::{f, History, OpType, Process};
use crate::holds::Hold;
use crate::ops::Pairs;
use crate::verdict::Witness;
use std::collections::HashMap;

/// Pairs of holds of different locks that intersect; each witness is
/// `[earlier acquire-ok, later acquire-ok]`, visible when the later one starts.
///
/// A sweep keeps only holds still open at the current start, so the work is
/// proportional to the concurrency (bounded by the worker count, plus holds
/// that never end), not to the number of holds squared.
pub fn overlaps(holds: &[Hold]) -> Vec<Witness> {
    debug_assert!(holds.windows(2).all(|w| w[0].start <= w[1].start));
    let mut witnesses = Vec::new();
    let mut active: Vec<&Hold> = Vec::new();
    for b in holds {
        // Ended by b's start: cannot intersect b nor anything starting later.
        active.retain(|a| a.end > b.start);
        for a in &active {
            if !a.same_lock(b) && a.intersects(b) {
                witnesses.push(Witness {
                    indices: vec![a.start_index, b.start_index],
                    time: b.start,
                });
            }
        }
        active.push(b);
    }
    witnesses
}

/// Reads and writes the storage accepted from a process after someone else
/// acquired the lock since that process's own acquisition. Witness:
/// `[the op's ok, the other acquire-ok]`.
///
/// The other acquisition must complete before the op's *invoke*: only then
/// did it certainly happen before the storage handled the op.
pub fn unsafe_actions(history: &History, pairs: &Pairs, holds: &[Hold]) -> Vec<Witness> {
    let index = HoldIndex::new(holds);
    let mut witnesses = Vec::new();
    for pos in history.time_order() {
        let e = &history.events[pos];
        let is_data_op = e.f == f::READ || e.f == f::WRITE;
        if e.kind != OpType::Ok || !is_data_op || !e.process.is_client() {
            continue;
        }
        let Some(invoked) = pairs.invoke_of(pos).map(|i| history.events[i].time) else {
            continue;
        };
        let Some(mine) = index.current_hold(&e.process, invoked) else {
            continue;
        };
        if let Some(other) = index
            .started_between(mine.start, invoked)
            .find(|h| !h.same_lock(mine))
        {
            witnesses.push(Witness {
                indices: vec![e.index, other.start_index],
                time: e.time,
            });
        }
    }
    witnesses
}

/// Successful releases that must have deleted someone else's lock: another
/// hold started after the releaser's own acquisition and was still held when
/// the release was invoked. A compare-and-delete release cannot succeed then
/// (it fails `not-held`); a plain `DEL` can. Witness:
/// `[release ok, the other acquire-ok]`.
pub fn foreign_releases(history: &History, pairs: &Pairs, holds: &[Hold]) -> Vec<Witness> {
    let index = HoldIndex::new(holds);
    let mut witnesses = Vec::new();
    for pos in history.time_order() {
        let e = &history.events[pos];
        if e.kind != OpType::Ok || e.f != f::RELEASE || e.is_nemesis() {
            continue;
        }
        let Some(invoke) = pairs.invoke_of(pos).map(|i| &history.events[i]) else {
            continue;
        };
        let token = e.token.as_deref().or(invoke.token.as_deref());
        let Some(mine) = index.hold_being_released(token, &e.process, invoke.time) else {
            continue;
        };
        if let Some(other) = index
            .started_between(mine.start, invoke.time)
            .find(|h| !h.same_lock(mine) && h.end > invoke.time)
        {
            witnesses.push(Witness {
                indices: vec![e.index, other.start_index],
                time: e.time,
            });
        }
    }
    witnesses
}

/// Lookups over holds sorted by start.
struct HoldIndex<'a> {
    holds: &'a [Hold],
    starts: Vec<u64>,
    by_process: HashMap<&'a Process, Vec<&'a Hold>>,
    by_token: HashMap<&'a str, Vec<&'a Hold>>,
}

impl<'a> HoldIndex<'a> {
    fn new(holds: &'a [Hold]) -> Self {
        let mut by_process: HashMap<&Process, Vec<&Hold>> = HashMap::new();
        let mut by_token: HashMap<&str, Vec<&Hold>> = HashMap::new();
        for h in holds {
            by_process.entry(&h.process).or_default().push(h);
            if let Some(t) = &h.token {
                by_token.entry(t).or_default().push(h);
            }
        }
        HoldIndex {
            holds,
            starts: holds.iter().map(|h| h.start).collect(),
            by_process,
            by_token,
        }
    }

    /// The latest of `candidates` started at or before `t`.
    fn latest_started_by(candidates: &[&'a Hold], t: u64) -> Option<&'a Hold> {
        let n = candidates.partition_point(|h| h.start <= t);
        n.checked_sub(1).map(|i| candidates[i])
    }

    /// The hold `p` most recently started by `t`, if it has not ended by then.
    fn current_hold(&self, p: &Process, t: u64) -> Option<&'a Hold> {
        let hold = Self::latest_started_by(self.by_process.get(p)?, t)?;
        (hold.end > t).then_some(hold)
    }

    /// The hold a release at `t` ends: the latest with its token or, for a
    /// tokenless release, the releasing process's latest tokenless hold.
    fn hold_being_released(&self, token: Option<&str>, p: &Process, t: u64) -> Option<&'a Hold> {
        match token {
            Some(token) => Self::latest_started_by(self.by_token.get(token)?, t),
            None => {
                let tokenless: Vec<&Hold> = self
                    .by_process
                    .get(p)?
                    .iter()
                    .copied()
                    .filter(|h| h.token.is_none())
                    .collect();
                Self::latest_started_by(&tokenless, t)
            }
        }
    }

    /// Holds started strictly after `after` and strictly before `before`.
    fn started_between(&self, after: u64, before: u64) -> impl Iterator<Item = &'a Hold> {
        let lo = self.starts.partition_point(|&s| s <= after);
        let hi = self.starts.partition_point(|&s| s < before).max(lo);
        self.holds[lo..hi].iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holds::holds;
    use crate::testing::Hist;

    fn run(h: &Hist) -> (Vec<Witness>, Vec<Witness>, Vec<Witness>) {
        let history = h.build();
        let pairs = Pairs::new(&history);
        let holds = holds(&history);
        (
            overlaps(&holds),
            unsafe_actions(&history, &pairs, &holds),
            foreign_releases(&history, &pairs, &holds),
        )
    }

    fn indices(ws: &[Witness]) -> Vec<Vec<u64>> {
        ws.iter().map(|w| w.indices.clone()).collect()
    }

    #[test]
    fn taking_turns_is_clean() {
        let mut h = Hist::new();
        for (p, token) in [(1, "a"), (2, "b"), (1, "c")] {
            h.acquire(p, token);
            h.read(p, 0);
            h.write(p, 1);
            h.release(p, token);
        }
        let (o, u, f) = run(&h);
        assert!(
            o.is_empty() && u.is_empty() && f.is_empty(),
            "{o:?} {u:?} {f:?}"
        );
    }

    #[test]
    fn a_paused_holder_overlaps_the_next_one() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1: paused past its TTL
        h.acquire(2, "b"); // 3
        h.release(2, "b"); // 4
        h.release(1, "a"); // 6
        let (o, _, _) = run(&h);
        assert_eq!(indices(&o), vec![vec![1, 3]]);
        assert_eq!(o[0].time, h.build().events[3].time);
    }

    #[test]
    fn holds_that_only_touch_do_not_overlap() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a").time(100);
        h.ok(1, "release").token("a").time(105);
        h.invoke(2, "acquire").time(90);
        h.ok(2, "acquire").token("b").time(100);
        let (o, _, _) = run(&h);
        assert!(o.is_empty(), "{o:?}");
    }

    #[test]
    fn one_endless_hold_overlaps_every_later_one_once() {
        let mut h = Hist::new();
        h.acquire(9, "stuck"); // 1, never released
        for i in 0..50 {
            let token = format!("t{i}");
            h.acquire(1, &token);
            h.release(1, &token);
        }
        let (o, _, _) = run(&h);
        assert_eq!(o.len(), 50);
        assert!(o.iter().all(|w| w.indices[0] == 1));
    }

    #[test]
    fn the_same_token_seen_twice_is_not_an_overlap() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(1, "a"); // e.g. a retried acquire reporting the same lock
        h.release(1, "a");
        assert!(run(&h).0.is_empty());
    }

    #[test]
    fn a_write_after_another_acquired_is_unsafe() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.acquire(2, "b"); // 3: 1's lease expired while it was paused
        h.write(2, 1); // 5: 2 holds the newest lock: fine
        h.write(1, 1); // 6, 7: stale holder
        h.read(3, 1); // 8, 9: no lock held: not an unsafe action
        let (_, u, _) = run(&h);
        assert_eq!(indices(&u), vec![vec![7, 3]]);
        assert_eq!(u[0].time, h.build().events[7].time);
    }

    #[test]
    fn an_acquire_completing_during_the_write_is_not_certainly_before_it() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "write").value(1); // 2
        h.acquire(2, "b"); // ok at 4, after the write's invoke
        h.ok(1, "write").value(1); // 5
        h.release(1, "a"); // so 1 still holds "a" when the write completes
        let (o, u, _) = run(&h);
        assert!(u.is_empty(), "{u:?}");
        assert_eq!(o.len(), 1, "the holds still overlap");
    }

    #[test]
    fn a_write_after_releasing_is_not_under_a_hold() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.release(1, "a");
        h.acquire(2, "b");
        h.write(1, 1);
        assert!(run(&h).1.is_empty());
    }

    #[test]
    fn a_del_release_deletes_the_next_holder_lock() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.acquire(2, "b"); // 3
        h.release(1, "a"); // 4 invoke, 5 ok: plain DEL removed b's key
        h.release(2, "b");
        let (_, _, f) = run(&h);
        assert_eq!(indices(&f), vec![vec![5, 3]]);
    }

    #[test]
    fn a_compare_and_delete_release_fails_instead() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b");
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        h.release(2, "b");
        assert!(run(&h).2.is_empty());
    }

    #[test]
    fn releasing_after_the_other_holder_released_deletes_nothing_of_theirs() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b");
        h.release(2, "b");
        h.release(1, "a");
        assert!(run(&h).2.is_empty());
    }

    #[test]
    fn a_foreign_release_by_a_worker_under_its_new_id_is_caught() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "write").value(1);
        h.info(1, "write").error("timeout");
        h.acquire(2, "b"); // 5
        h.release(11, "a"); // 6, 7: process 1 continuing as 11
        let (_, _, f) = run(&h);
        assert_eq!(indices(&f), vec![vec![7, 5]]);
    }
}
