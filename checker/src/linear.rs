//! `nonlinearizable`: is the lock history linearizable as an owner-aware mutex?
//!
//! Model: the state is the holder (`None` = free). `acquire` by owner `o`
//! succeeds only when free and makes `o` the holder; `release` by `o`
//! succeeds only when `o` holds, and frees the lock. An op's owner is its
//! lock token (from the completion, else the invocation), else its process.
//!
//! Ops: `ok` happened once between invocation and completion; `fail` did not
//! happen (so a holder whose release fails still holds, as in Knossos);
//! `info` or no completion may have happened at any time after invocation.
//!
//! An `info`/unfinished acquire *without a token* has an unknown owner: it may
//! be released by its own process or by a token that no acquire carries (the
//! worker continued under a new process id and released the token it never
//! saw acknowledged).
//!
//! A `crash` of a process is an uncertain release, invoked at the crash, of
//! every lock the dead process may hold: those it acquired, and the token
//! the crash names. Its key lives until the TTL, then the lock is free; the
//! model has no TTL, so it lets the lock go free at any time after the death.
//!
//! Search: Wing–Gong/Lowe just-in-time linearization (as in porcupine) over a
//! time-ordered list of call/return entries, with backtracking and a memo of
//! visited (linearized set, holder). The linearized set is kept as a 128-bit
//! Zobrist hash, so a memo entry is a few words whatever the history's size.
//! Uncertain ops that can no longer matter are pruned: an uncertain acquire
//! once no `ok` release could release it, an uncertain release once neither
//! the holder nor any remaining acquire could give it something to release.
//! Either way any valid completion using the op has one without it.

use crate::anomaly;
use crate::history::{f, Event, History, OpType, Process};
use crate::ops::Pairs;
use crate::registry::Finding;
use crate::verdict::{Anomaly, CheckerReport, Validity, Witness};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "nonlinearizable";

/// Limits of one search; exceeding either gives [`Validity::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Distinct (linearized set, holder) states visited; bounds memory.
    pub max_states: usize,
    pub max_time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_states: 5_000_000,
            max_time: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub valid: Validity,
    /// `index` of the events of ops that cannot be ordered (completion for
    /// `ok` ops, invocation otherwise), sorted; empty unless invalid.
    pub witness: Vec<u64>,
    pub reason: Option<String>,
    /// Distinct states visited.
    pub states: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Acquire,
    Release,
}

/// One lock operation, ready for the search.
#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    owner: usize,
    invoke: u64,
    /// Completion time of an `ok` op; `None` = may happen at any time after `invoke`.
    ret: Option<u64>,
    /// The event index that names this op in a witness.
    index: u64,
}

impl Op {
    fn certain(&self) -> bool {
        self.ret.is_some()
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct OwnerInfo {
    /// Owner of a tokenless uncertain acquire: its real token is unknown.
    wild: bool,
    /// For a wild owner: the owner id of its process (tokenless releases).
    proc_owner: Option<usize>,
    /// A token that no acquire carries: it may release a wild holder.
    orphan: bool,
}

#[derive(Debug, Default)]
struct Prepared {
    ops: Vec<Op>,
    owners: Vec<OwnerInfo>,
}

impl Prepared {
    /// Whether a release by `o` releases `holder`.
    fn releases(&self, holder: usize, o: usize) -> bool {
        holder == o || {
            let h = &self.owners[holder];
            h.wild && (self.owners[o].orphan || h.proc_owner == Some(o))
        }
    }

    /// The model's step, or `None` if `op` cannot take effect in `holder`.
    fn step(&self, holder: Option<usize>, op: &Op) -> Option<Option<usize>> {
        match (op.kind, holder) {
            (Kind::Acquire, None) => Some(Some(op.owner)),
            (Kind::Release, Some(h)) if self.releases(h, op.owner) => Some(None),
            _ => None,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum OwnerKey {
    Token(String),
    Process(Process),
    Wild(Process),
}

/// Pairs invocations with completions and resolves owners. Failed ops,
/// non-lock ops and non-client events are left out.
fn prepare(history: &History) -> Prepared {
    let pairs = Pairs::new(history);
    let mut ids: HashMap<OwnerKey, usize> = HashMap::new();
    let mut owners: Vec<OwnerInfo> = Vec::new();
    let mut intern = |key: OwnerKey, owners: &mut Vec<OwnerInfo>| -> usize {
        *ids.entry(key).or_insert_with(|| {
            owners.push(OwnerInfo::default());
            owners.len() - 1
        })
    };
    let mut ops = Vec::new();
    let mut acquire_tokens: HashSet<&str> = HashSet::new();
    let mut release_tokens: Vec<(usize, &str)> = Vec::new();
    // Per process, the owners of its acquires so far: what a crash releases.
    let mut acquired: HashMap<&Process, Vec<usize>> = HashMap::new();
    for (pos, e) in history.events.iter().enumerate() {
        if let Some(dead) = e.crashed() {
            let mut held = acquired.remove(&dead).unwrap_or_default();
            held.push(intern(OwnerKey::Process(dead.clone()), &mut owners));
            if let Some(t) = &e.token {
                held.push(intern(OwnerKey::Token(t.clone()), &mut owners));
            }
            held.sort_unstable();
            held.dedup();
            ops.extend(held.into_iter().map(|owner| Op {
                kind: Kind::Release,
                owner,
                invoke: e.time,
                ret: None,
                index: e.index,
            }));
            continue;
        }
        if e.kind != OpType::Invoke || !e.process.is_client() {
            continue;
        }
        let kind = match e.f.as_str() {
            f::ACQUIRE => Kind::Acquire,
            f::RELEASE => Kind::Release,
            _ => continue,
        };
        let completion = pairs.completion_of(pos).map(|c| &history.events[c]);
        let (ret, index) = match completion {
            Some(c) if c.kind == OpType::Fail => continue,
            Some(c) if c.kind == OpType::Ok => (Some(c.time.max(e.time)), c.index),
            _ => (None, e.index),
        };
        let token = completion
            .and_then(|c| c.token.as_deref())
            .or(e.token.as_deref());
        let owner = match token {
            Some(t) => {
                let id = intern(OwnerKey::Token(t.to_owned()), &mut owners);
                match kind {
                    Kind::Acquire => {
                        acquire_tokens.insert(t);
                    }
                    Kind::Release => release_tokens.push((id, t)),
                }
                id
            }
            None if kind == Kind::Acquire && ret.is_none() => {
                let id = intern(OwnerKey::Wild(e.process.clone()), &mut owners);
                let proc_owner = intern(OwnerKey::Process(e.process.clone()), &mut owners);
                owners[id].wild = true;
                owners[id].proc_owner = Some(proc_owner);
                id
            }
            None => intern(OwnerKey::Process(e.process.clone()), &mut owners),
        };
        if kind == Kind::Acquire {
            acquired.entry(&e.process).or_default().push(owner);
        }
        ops.push(Op {
            kind,
            owner,
            invoke: e.time,
            ret,
            index,
        });
    }
    for (id, t) in release_tokens {
        owners[id].orphan = !acquire_tokens.contains(t);
    }
    Prepared { ops, owners }
}

/// Whether the search reads `e`: client lock ops and crashes.
pub fn reads(e: &Event) -> bool {
    let lock_op = e.f == f::ACQUIRE || e.f == f::RELEASE;
    (lock_op && e.process.is_client()) || e.f == f::CRASH
}

/// Checks `history` for linearizability against the owner-aware mutex.
pub fn check(history: &History, budget: Budget) -> Outcome {
    Search::new(prepare(history), budget).run()
}

/// The lock operations as an owner-aware mutex, within the default budget:
/// the anomaly, the checker's report, and why it gave up if it did.
pub(crate) fn finding(history: &History) -> Finding {
    let outcome = check(history, Budget::default());
    let mut nonlinear = Anomaly::default();
    if outcome.valid == Validity::False {
        let time = outcome
            .witness
            .iter()
            .filter_map(|i| history.events.iter().find(|e| e.index == *i))
            .map(|e| e.time)
            .max()
            .unwrap_or_default();
        nonlinear.record(Witness {
            indices: outcome.witness.clone(),
            time,
        });
    }
    let mut report = CheckerReport::new(outcome.valid);
    report
        .details
        .insert("states".into(), serde_json::json!(outcome.states));
    if let Some(reason) = &outcome.reason {
        report
            .details
            .insert("reason".into(), serde_json::json!(reason));
    }
    let notes = match (outcome.valid, outcome.reason) {
        (Validity::Unknown, Some(r)) => vec![format!("nonlinearizable: could not decide: {r}")],
        _ => Vec::new(),
    };
    Finding {
        report,
        anomalies: vec![(anomaly::NONLINEARIZABLE, nonlinear)],
        notes,
        not_asked: false,
    }
}

const NIL: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
    prev: usize,
    next: usize,
    /// The matching return entry of a call (NIL if the op has none).
    ret: usize,
}

struct Frame {
    op: usize,
    holder: Option<usize>,
    /// Entries lifted as pruned (dead) while this frame was on top.
    pruned: Vec<usize>,
}

struct Search {
    p: Prepared,
    budget: Budget,
    /// entries[0] is the head sentinel.
    entries: Vec<Entry>,
    call_of: Vec<usize>,
    zobrist: Vec<u128>,
    /// Uncertain-or-ok acquires not yet linearized nor pruned, per owner.
    rem_acq: Vec<usize>,
    rem_wild_acq: usize,
    /// `ok` releases not yet linearized, per owner, and those by orphans.
    rem_ok_rel: Vec<usize>,
    rem_orphan_ok_rel: usize,
    base_pruned: Vec<usize>,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Search {
    fn new(p: Prepared, budget: Budget) -> Self {
        // (time, returns after calls at equal times, op): an op that returns
        // at t is concurrent with one invoked at t.
        let mut order: Vec<(u64, bool, usize)> = Vec::new();
        for (i, op) in p.ops.iter().enumerate() {
            order.push((op.invoke, false, i));
            if let Some(r) = op.ret {
                order.push((r, true, i));
            }
        }
        order.sort_unstable();
        let mut entries = vec![Entry {
            op: NIL,
            call: false,
            prev: NIL,
            next: NIL,
            ret: NIL,
        }];
        let mut call_of = vec![NIL; p.ops.len()];
        for (k, &(_, is_ret, op)) in order.iter().enumerate() {
            let id = k + 1;
            entries.push(Entry {
                op,
                call: !is_ret,
                prev: id - 1,
                next: if k + 1 < order.len() { id + 1 } else { NIL },
                ret: NIL,
            });
            if is_ret {
                entries[call_of[op]].ret = id;
            } else {
                call_of[op] = id;
            }
        }
        entries[0].next = if order.is_empty() { NIL } else { 1 };
        let n_owners = p.owners.len();
        let mut s = Search {
            zobrist: (0..p.ops.len() as u64)
                .map(|i| (u128::from(splitmix(2 * i)) << 64) | u128::from(splitmix(2 * i + 1)))
                .collect(),
            rem_acq: vec![0; n_owners],
            rem_wild_acq: 0,
            rem_ok_rel: vec![0; n_owners],
            rem_orphan_ok_rel: 0,
            base_pruned: Vec::new(),
            p,
            budget,
            entries,
            call_of,
        };
        for i in 0..s.p.ops.len() {
            s.count(i, 1);
        }
        s
    }

    /// Adds `delta` (±1) to the remaining-op counters for op `i`.
    fn count(&mut self, i: usize, delta: isize) {
        let op = &self.p.ops[i];
        let o = op.owner;
        let add = |c: &mut usize| *c = c.checked_add_signed(delta).expect("counter");
        match op.kind {
            Kind::Acquire => {
                add(&mut self.rem_acq[o]);
                if self.p.owners[o].wild {
                    add(&mut self.rem_wild_acq);
                }
            }
            Kind::Release if op.certain() => {
                add(&mut self.rem_ok_rel[o]);
                if self.p.owners[o].orphan {
                    add(&mut self.rem_orphan_ok_rel);
                }
            }
            Kind::Release => {}
        }
    }

    /// Whether uncertain op `i` can no longer matter (see the module doc).
    fn dead(&self, i: usize, holder: Option<usize>) -> bool {
        let op = &self.p.ops[i];
        let o = op.owner;
        let info = self.p.owners[o];
        match op.kind {
            Kind::Acquire => {
                let by_proc = info.proc_owner.is_some_and(|p| self.rem_ok_rel[p] > 0);
                self.rem_ok_rel[o] == 0 && !(info.wild && (by_proc || self.rem_orphan_ok_rel > 0))
            }
            Kind::Release => {
                if holder.is_some_and(|h| self.p.releases(h, o)) || self.rem_acq[o] > 0 {
                    return false;
                }
                // Wild acquires this release could release.
                !(self.rem_wild_acq > 0
                    && (info.orphan
                        || self.p.owners.iter().enumerate().any(|(w, wi)| {
                            wi.wild && wi.proc_owner == Some(o) && self.rem_acq[w] > 0
                        })))
            }
        }
    }

    fn lift(&mut self, e: usize) {
        let Entry { prev, next, .. } = self.entries[e];
        self.entries[prev].next = next;
        if next != NIL {
            self.entries[next].prev = prev;
        }
    }

    fn unlift(&mut self, e: usize) {
        let Entry { prev, next, .. } = self.entries[e];
        self.entries[prev].next = e;
        if next != NIL {
            self.entries[next].prev = e;
        }
    }

    fn lift_op(&mut self, call: usize) {
        self.lift(call);
        let ret = self.entries[call].ret;
        if ret != NIL {
            self.lift(ret);
        }
    }

    fn unlift_op(&mut self, call: usize) {
        let ret = self.entries[call].ret;
        if ret != NIL {
            self.unlift(ret);
        }
        self.unlift(call);
    }

    fn run(mut self) -> Outcome {
        let started = Instant::now();
        let mut memo: HashSet<(u128, usize)> = HashSet::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut holder: Option<usize> = None;
        let mut hash: u128 = 0;
        // Furthest failure: (return entry's time, stuck op, op that set the holder).
        let mut worst: Option<(u64, usize, Option<usize>)> = None;
        let mut steps: u64 = 0;
        let mut e = self.entries[0].next;
        let unknown = |why: String, states: usize| Outcome {
            valid: Validity::Unknown,
            witness: Vec::new(),
            reason: Some(why),
            states,
        };
        loop {
            steps += 1;
            if steps & 1023 == 0 && started.elapsed() > self.budget.max_time {
                return unknown(
                    format!(
                        "gave up after {:?} ({} states)",
                        self.budget.max_time,
                        memo.len()
                    ),
                    memo.len(),
                );
            }
            if e == NIL {
                // No return entry left: every `ok` op is linearized.
                return Outcome {
                    valid: Validity::True,
                    witness: Vec::new(),
                    reason: None,
                    states: memo.len(),
                };
            }
            let entry = self.entries[e];
            let i = entry.op;
            if entry.call {
                if !self.p.ops[i].certain() && self.dead(i, holder) {
                    self.lift(e);
                    self.count(i, -1);
                    match stack.last_mut() {
                        Some(top) => top.pruned.push(e),
                        None => self.base_pruned.push(e),
                    }
                    e = entry.next;
                    continue;
                }
                if let Some(next_holder) = self.p.step(holder, &self.p.ops[i]) {
                    let next_hash = hash ^ self.zobrist[i];
                    if memo.insert((next_hash, next_holder.map_or(NIL, |h| h))) {
                        if memo.len() > self.budget.max_states {
                            return unknown(
                                format!("gave up after {} states", self.budget.max_states),
                                memo.len(),
                            );
                        }
                        stack.push(Frame {
                            op: i,
                            holder,
                            pruned: Vec::new(),
                        });
                        self.lift_op(e);
                        self.count(i, -1);
                        holder = next_holder;
                        hash = next_hash;
                        e = self.entries[0].next;
                        continue;
                    }
                }
                e = entry.next;
                continue;
            }
            // The return of an op not yet linearized: this branch fails.
            let time = self.p.ops[i].ret.unwrap_or(u64::MAX);
            if worst.is_none_or(|(t, _, _)| time > t) {
                let setter = holder.and_then(|_| {
                    stack
                        .iter()
                        .rev()
                        .find(|f| self.p.ops[f.op].kind == Kind::Acquire)
                        .map(|f| f.op)
                });
                worst = Some((time, i, setter));
            }
            let Some(frame) = stack.pop() else {
                let (_, stuck, setter) = worst.expect("a failure was recorded");
                let mut witness: Vec<u64> = [Some(stuck), setter]
                    .into_iter()
                    .flatten()
                    .map(|o| self.p.ops[o].index)
                    .collect();
                witness.sort_unstable();
                witness.dedup();
                let op = &self.p.ops[stuck];
                return Outcome {
                    valid: Validity::False,
                    reason: Some(format!(
                        "no order of the lock operations explains the {} completed at event {}",
                        match op.kind {
                            Kind::Acquire => "acquire",
                            Kind::Release => "release",
                        },
                        op.index
                    )),
                    witness,
                    states: memo.len(),
                };
            };
            for &p in frame.pruned.iter().rev() {
                self.unlift(p);
                self.count(self.entries[p].op, 1);
            }
            let call = self.call_of[frame.op];
            self.unlift_op(call);
            self.count(frame.op, 1);
            hash ^= self.zobrist[frame.op];
            holder = frame.holder;
            e = self.entries[call].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Hist;
    use proptest::prelude::*;

    fn run(h: &Hist) -> Outcome {
        check(&h.build(), Budget::default())
    }

    #[test]
    fn alternating_acquires_and_releases_are_valid() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.release(1, "a");
        h.acquire(2, "b");
        h.invoke(1, "acquire").token("c");
        h.fail(1, "acquire").token("c").error("lock-busy");
        h.release(2, "b");
        h.acquire(1, "d");
        h.read(1, 0);
        h.release(1, "d");
        let out = run(&h);
        assert_eq!(out.valid, Validity::True, "{out:?}");
        assert!(out.witness.is_empty());
    }

    #[test]
    fn two_overlapping_ok_acquires_are_invalid() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // ok 1
        h.acquire(2, "b"); // ok 3
        h.release(1, "a");
        h.release(2, "b");
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![1, 3]);
        assert!(out.reason.is_some());
    }

    #[test]
    fn concurrent_acquires_may_be_ordered_either_way() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.invoke(2, "acquire").token("b");
        h.ok(2, "acquire").token("b");
        h.invoke(2, "release").token("b");
        h.ok(1, "acquire").token("a"); // returns after b's release began
        h.ok(2, "release").token("b");
        h.release(1, "a");
        assert_eq!(run(&h).valid, Validity::True);
    }

    #[test]
    fn a_failed_release_leaves_the_holder_holding() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // ok 1
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a");
        h.acquire(2, "b"); // ok 5
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![1, 5]);
    }

    #[test]
    fn an_info_acquire_may_never_have_happened() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.info(1, "acquire").token("a").error("timeout");
        h.acquire(2, "b");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
    }

    #[test]
    fn an_info_acquire_released_later_under_a_new_process_id_happened() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.info(1, "acquire").token("a").error("timeout");
        h.release(11, "a");
        h.acquire(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
        // Tokenless, as a client that never learnt its token records it.
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.info(1, "acquire").error("timeout");
        h.release(11, "lost");
        assert_eq!(run(&h).valid, Validity::True);
    }

    #[test]
    fn an_info_release_may_have_happened() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a");
        h.info(1, "release").token("a").error("timeout");
        h.acquire(2, "b");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
        // ... but not before it was invoked.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b"); // ok 3
        h.invoke(1, "release").token("a");
        h.info(1, "release").token("a");
        assert_eq!(run(&h).valid, Validity::False);
    }

    #[test]
    fn a_crashed_holder_lets_the_lock_go() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "read");
        h.info(1, "read").error("crashed");
        h.crash(1).token("a");
        h.acquire(2, "b");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
        // Under an earlier id of the same worker, named by the crash's token.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "write");
        h.info(1, "write").error("timeout");
        h.crash(11).token("a");
        h.acquire(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
    }

    #[test]
    fn a_grant_before_the_crash_is_still_a_second_holder() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // ok 1
        h.acquire(2, "b"); // ok 3
        h.crash(1).token("a");
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![1, 3]);
    }

    #[test]
    fn a_crash_with_no_hold_changes_nothing() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // ok 1
        h.invoke(3, "acquire").token("c");
        h.crash(3); // died waiting: its acquire never completes
        h.acquire(2, "b"); // ok 5: 1 still holds
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![1, 5]);
    }

    #[test]
    fn a_release_by_a_non_holder_is_invalid() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // ok 1
        h.release(2, "b"); // ok 3
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![1, 3]);
        let mut h = Hist::new();
        h.release(2, "b"); // ok 1: nobody holds
        assert_eq!(run(&h).witness, vec![1]);
    }

    #[test]
    fn an_exhausted_budget_is_unknown() {
        let mut h = Hist::new();
        for _ in 0..10 {
            h.acquire(1, "a");
            h.release(1, "a");
        }
        let out = check(
            &h.build(),
            Budget {
                max_states: 5,
                max_time: Duration::from_secs(10),
            },
        );
        assert_eq!(out.valid, Validity::Unknown);
        assert!(out.reason.unwrap().contains("states"));
    }

    #[test]
    fn a_long_valid_history_checks_quickly() {
        // 5 workers contending: each round one acquires, the others fail,
        // and now and then a release times out (info) or an acquire does.
        let mut h = Hist::new();
        let mut next_proc = [0u64, 1, 2, 3, 4];
        let mut ops = 0;
        let mut round = 0u64;
        while ops < 20_000 {
            round += 1;
            let w = (round % 5) as usize;
            let tok = format!("t{round}");
            let p = next_proc[w];
            h.invoke(p, "acquire").token(&tok);
            for (o, &q) in next_proc.iter().enumerate() {
                if o != w {
                    h.invoke(q, "acquire").token(&format!("f{round}-{o}"));
                }
            }
            h.ok(p, "acquire").token(&tok);
            for (o, &q) in next_proc.iter().enumerate() {
                if o != w {
                    h.fail(q, "acquire").token(&format!("f{round}-{o}"));
                }
            }
            h.invoke(p, "release").token(&tok);
            if round.is_multiple_of(97) {
                h.info(p, "release").token(&tok);
                next_proc[w] += 5;
            } else {
                h.ok(p, "release").token(&tok);
            }
            if round.is_multiple_of(89) {
                let q = next_proc[(w + 1) % 5];
                h.invoke(q, "acquire").token(&format!("i{round}"));
                h.info(q, "acquire").token(&format!("i{round}"));
                next_proc[(w + 1) % 5] += 5;
            }
            ops += 7;
        }
        let started = Instant::now();
        let out = run(&h);
        assert_eq!(out.valid, Validity::True, "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    /// Definition-based oracle: tries every subset of the uncertain ops in
    /// every order that respects real time (a before b when a completed
    /// before b was invoked).
    fn oracle(p: &Prepared) -> bool {
        fn go(p: &Prepared, placed: &mut Vec<bool>, holder: Option<usize>) -> bool {
            if (0..p.ops.len()).all(|i| placed[i] || !p.ops[i].certain()) {
                return true;
            }
            for i in 0..p.ops.len() {
                if placed[i] {
                    continue;
                }
                let ready = (0..p.ops.len())
                    .all(|j| placed[j] || p.ops[j].ret.is_none_or(|r| r >= p.ops[i].invoke));
                if !ready {
                    continue;
                }
                if let Some(next) = p.step(holder, &p.ops[i]) {
                    placed[i] = true;
                    let ok = go(p, placed, next);
                    placed[i] = false;
                    if ok {
                        return true;
                    }
                }
            }
            false
        }
        go(p, &mut vec![false; p.ops.len()], None)
    }

    #[derive(Clone, Debug)]
    struct Step {
        worker: usize,
        release: bool,
        token: Option<u8>,
        outcome: u8, // 0 ok, 1 fail, 2 info
        gap: u64,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            (
                0..4usize,
                any::<bool>(),
                prop::option::weighted(0.85, 0..3u8),
                0..3u8,
                0..3u64,
            )
                .prop_map(|(worker, release, token, outcome, gap)| Step {
                    worker,
                    release,
                    token,
                    outcome,
                    gap,
                }),
            0..36,
        )
    }

    /// Each step completes the worker's op in flight, or invokes a new one
    /// (at most 12 ops, so up to 36 steps); ops still in flight at the end never complete.
    fn history(steps: &[Step]) -> History {
        let mut events = Vec::new();
        let mut time = 0;
        let mut proc_of = [0u64, 1, 2, 3];
        let mut in_flight: [Option<(&str, Option<String>)>; 4] = Default::default();
        let mut ops = 0;
        for s in steps {
            time += s.gap * 10;
            let p = Process::Client(proc_of[s.worker]);
            let mut e = match in_flight[s.worker].take() {
                Some((f, token)) => {
                    let kind = [OpType::Ok, OpType::Fail, OpType::Info][s.outcome as usize];
                    if kind == OpType::Info {
                        proc_of[s.worker] += 4;
                    }
                    let mut e = crate::history::Event::new(time, p, kind, f);
                    e.token = token;
                    e
                }
                None if ops < 12 => {
                    ops += 1;
                    let f = if s.release { f::RELEASE } else { f::ACQUIRE };
                    let token = s.token.map(|t| format!("t{t}"));
                    in_flight[s.worker] = Some((f, token.clone()));
                    let mut e = crate::history::Event::new(time, p, OpType::Invoke, f);
                    e.token = token;
                    e
                }
                None => continue,
            };
            e.index = events.len() as u64;
            events.push(e);
        }
        History::new(events)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn agrees_with_a_brute_force_oracle(steps in steps()) {
            let h = history(&steps);
            let out = check(&h, Budget::default());
            prop_assume!(out.valid != Validity::Unknown);
            let expected = oracle(&prepare(&h));
            prop_assert_eq!(out.valid == Validity::True, expected, "{:?}", out);
            prop_assert_eq!(out.witness.is_empty(), expected);
        }
    }
}
