//! The search itself: Wing–Gong/Lowe just-in-time linearization (as in
//! porcupine) over the time-ordered call/return entries, with backtracking,
//! a memo of visited states and the pruning the module doc describes.
//!
//! Sized for millions of ops: links are `u32`, an op's Zobrist key is
//! computed when needed rather than stored, the ops pruned under each frame
//! share one stack, and a memo entry is one 128-bit key (the hash of the
//! set of ops linearized or lifted, with the holder's folded in: an op is
//! in it from either, and out of it again when `undo` puts it back).
//!
//! A soft op (it may not have happened, but if it did, then by a deadline)
//! has a deadline entry where a certain op has its return: reached with
//! the op not linearized, it lifts the op for the rest of the branch
//! instead of failing it. Every state that has linearized an op invoked
//! after that deadline has passed it, so the memo stays sound. Without the
//! lifted ops in the hash, each uncertain acquire answered by a refusal
//! (taken and ended, or left out) doubled the states of an invalid
//! history: tokenless workers that keep their id after a lost reply gave
//! up at 5 M states on 1 k ops.

use super::{Budget, Kind, Op, Outcome, Prepared, NIL};
use crate::finding::Validity;
use rustc_hash::FxHashSet;
use std::time::Instant;

#[derive(Clone, Copy)]
struct Entry {
    op: u32,
    call: bool,
    prev: u32,
    next: u32,
    /// The matching return entry of a call (NIL if the op has none).
    ret: u32,
}

struct Frame {
    op: u32,
    holder: u32,
    /// Where this frame's pruned entries start in `Search::pruned`: those
    /// lifted as dead while it was on top.
    pruned_from: u32,
}

/// What a search of a prefix says about cutting the history after it.
pub(super) enum Settled {
    /// Every order that explains the ops leaves the lock free (states seen).
    Free(usize),
    /// Some order leaves it held, or the search gave up.
    Open,
    Invalid(Outcome),
}

pub(super) struct Search {
    p: Prepared,
    budget: Budget,
    /// entries[0] is the head sentinel.
    entries: Vec<Entry>,
    call_of: Vec<u32>,
    /// Uncertain-or-ok acquires not yet linearized nor pruned, per owner.
    rem_acq: Vec<u32>,
    rem_wild_acq: usize,
    /// `ok` releases not yet linearized, per owner, and those by orphans.
    rem_ok_rel: Vec<u32>,
    rem_orphan_ok_rel: usize,
    /// Entries lifted as dead, frame by frame (those below the first
    /// frame's were pruned with nothing linearized and stay lifted).
    pruned: Vec<u32>,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Op `i`'s Zobrist key: the linearized set's hash is the xor of its ops'.
fn zobrist(i: u32) -> u128 {
    let i = u64::from(i);
    (u128::from(splitmix(2 * i)) << 64) | u128::from(splitmix(2 * i + 1))
}

/// The memo key of a state: the set's hash with the holder's key folded in,
/// drawn from inputs no op's key uses (theirs are below 2^33).
fn state(hash: u128, holder: u32) -> u128 {
    if holder == NIL {
        return hash;
    }
    let h = u64::from(holder) | 1 << 63;
    hash ^ (u128::from(splitmix(h)) << 64 | u128::from(splitmix(h ^ 1 << 62)))
}

/// The search gave up, saying why.
fn unknown(why: String, states: usize) -> Outcome {
    Outcome {
        valid: Validity::Unknown,
        witness: Vec::new(),
        witness_time: None,
        reason: Some(why),
        states,
    }
}

/// An order explains every op.
fn valid(states: usize) -> Outcome {
    Outcome {
        valid: Validity::True,
        witness: Vec::new(),
        witness_time: None,
        reason: None,
        states,
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n)
        .ok()
        .filter(|&n| n != NIL)
        .expect("fewer than 4 G lock ops")
}

impl Search {
    pub(super) fn new(p: Prepared, budget: Budget) -> Self {
        // Entries in order of (time, returns after calls at equal times, op):
        // an op that returns at t is concurrent with one invoked at t. Calls
        // and returns are each sorted, then merged.
        let n = to_u32(p.ops.len());
        let mut calls: Vec<u32> = (0..n).collect();
        calls.sort_by_key(|&i| (p.ops[i as usize].invoke, i));
        // Returns: a certain op's, and a soft op's deadline (an entry that
        // lifts it, where a return would fail the branch).
        let mut rets: Vec<u32> = (0..n)
            .filter(|&i| p.ops[i as usize].by().is_some())
            .collect();
        rets.sort_by_key(|&i| (p.ops[i as usize].by(), i));
        let total = calls.len() + rets.len();
        let mut entries = Vec::with_capacity(total + 1);
        entries.push(Entry {
            op: NIL,
            call: false,
            prev: NIL,
            next: if total == 0 { NIL } else { 1 },
            ret: NIL,
        });
        let mut call_of = vec![NIL; calls.len()];
        let (mut c, mut r) = (calls.into_iter().peekable(), rets.into_iter().peekable());
        while entries.len() <= total {
            let call_first = match (c.peek(), r.peek()) {
                (Some(&ci), Some(&ri)) => {
                    Some(p.ops[ci as usize].invoke) <= p.ops[ri as usize].by()
                }
                (call, _) => call.is_some(),
            };
            let (op, call) = match call_first {
                true => (c.next().expect("peeked"), true),
                false => (r.next().expect("peeked"), false),
            };
            let id = to_u32(entries.len());
            entries.push(Entry {
                op,
                call,
                prev: id - 1,
                next: if entries.len() < total { id + 1 } else { NIL },
                ret: NIL,
            });
            match call {
                true => call_of[op as usize] = id,
                false => entries[call_of[op as usize] as usize].ret = id,
            }
        }
        let owners = p.owners.len();
        let mut s = Search {
            rem_acq: vec![0; owners],
            rem_wild_acq: 0,
            rem_ok_rel: vec![0; owners],
            rem_orphan_ok_rel: 0,
            pruned: Vec::new(),
            p,
            budget,
            entries,
            call_of,
        };
        for i in 0..n {
            s.count(i, true);
        }
        s
    }

    /// Adds (`up`) or takes one from the remaining-op counters for op `i`.
    fn count(&mut self, i: u32, up: bool) {
        let op = &self.p.ops[i as usize];
        let o = op.owner as usize;
        let info = self.p.owners[o];
        let step = |c: &mut u32| *c = if up { *c + 1 } else { *c - 1 };
        let step_total = |c: &mut usize| *c = if up { *c + 1 } else { *c - 1 };
        match op.kind {
            Kind::Acquire => {
                step(&mut self.rem_acq[o]);
                if info.wild {
                    step_total(&mut self.rem_wild_acq);
                }
            }
            Kind::Release if op.certain() => {
                step(&mut self.rem_ok_rel[o]);
                if info.orphan {
                    step_total(&mut self.rem_orphan_ok_rel);
                }
            }
            Kind::Release => {}
        }
    }

    /// Whether uncertain op `i` can no longer matter (see the module doc).
    fn dead(&self, i: u32, holder: u32) -> bool {
        let op = &self.p.ops[i as usize];
        let o = op.owner;
        let info = self.p.owners[o as usize];
        match op.kind {
            Kind::Acquire => {
                let by_proc =
                    info.proc_owner != NIL && self.rem_ok_rel[info.proc_owner as usize] > 0;
                self.rem_ok_rel[o as usize] == 0
                    && !(info.wild && (by_proc || self.rem_orphan_ok_rel > 0))
            }
            Kind::Release => {
                if holder != NIL && self.p.releases(holder, o) || self.rem_acq[o as usize] > 0 {
                    return false;
                }
                // Wild acquires this release could release: any, for an
                // orphan; its process's own (at most one wild owner), else.
                let twin = info.wild_twin;
                !(self.rem_wild_acq > 0
                    && (info.orphan || twin != NIL && self.rem_acq[twin as usize] > 0))
            }
        }
    }

    fn lift(&mut self, e: u32) {
        let Entry { prev, next, .. } = self.entries[e as usize];
        self.entries[prev as usize].next = next;
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }

    fn unlift(&mut self, e: u32) {
        let Entry { prev, next, .. } = self.entries[e as usize];
        self.entries[prev as usize].next = e;
        if next != NIL {
            self.entries[next as usize].prev = e;
        }
    }

    fn lift_op(&mut self, call: u32) {
        self.lift(call);
        let ret = self.entries[call as usize].ret;
        if ret != NIL {
            self.lift(ret);
        }
    }

    fn unlift_op(&mut self, call: u32) {
        let ret = self.entries[call as usize].ret;
        if ret != NIL {
            self.unlift(ret);
        }
        self.unlift(call);
    }

    pub(super) fn run(self) -> Outcome {
        self.explore(false).0
    }

    /// Whether every order that explains these ops leaves the lock free:
    /// the search goes on past each order it finds, until it finds one that
    /// leaves the lock held or has seen every state.
    pub(super) fn settles_free(self) -> Settled {
        match self.explore(true) {
            (out, _) if out.valid == Validity::False => Settled::Invalid(out),
            (out, false) if out.valid == Validity::True => Settled::Free(out.states),
            _ => Settled::Open,
        }
    }

    /// The search; with `exhaust`, it goes on past a valid order that
    /// leaves the lock free, and says whether one left it held.
    fn explore(mut self, exhaust: bool) -> (Outcome, bool) {
        let started = Instant::now();
        let mut memo: FxHashSet<u128> = FxHashSet::default();
        let mut stack: Vec<Frame> = Vec::new();
        let mut holder: u32 = NIL;
        let mut hash: u128 = 0;
        // Furthest failure: (return entry's time, stuck op, op that set the holder).
        let mut worst: Option<(u64, u32, Option<u32>)> = None;
        let mut found = false;
        let mut steps: u64 = 0;
        let mut e = self.entries[0].next;
        loop {
            steps += 1;
            if steps & 1023 == 0 && started.elapsed() > self.budget.max_time {
                let why = format!(
                    "gave up after {:?} ({} states)",
                    self.budget.max_time,
                    memo.len()
                );
                return (unknown(why, memo.len()), false);
            }
            if e == NIL {
                // No return entry left: every `ok` op is linearized.
                if !exhaust || holder != NIL {
                    return (valid(memo.len()), holder != NIL);
                }
                found = true;
                let Some(frame) = stack.pop() else {
                    return (valid(memo.len()), false);
                };
                holder = frame.holder;
                e = self.undo(frame, &mut hash);
                continue;
            }
            let entry = self.entries[e as usize];
            let i = entry.op;
            if entry.call {
                if !self.p.ops[i as usize].certain() && self.dead(i, holder) {
                    hash ^= zobrist(i);
                    e = self.prune(e, entry);
                    continue;
                }
                if let Some(next_holder) = self.p.step(holder, &self.p.ops[i as usize]) {
                    let next_hash = hash ^ zobrist(i);
                    if memo.insert(state(next_hash, next_holder)) {
                        if memo.len() > self.budget.max_states {
                            let why = format!("gave up after {} states", self.budget.max_states);
                            return (unknown(why, memo.len()), false);
                        }
                        stack.push(Frame {
                            op: i,
                            holder,
                            pruned_from: to_u32(self.pruned.len()),
                        });
                        self.lift_op(e);
                        self.count(i, false);
                        holder = next_holder;
                        hash = next_hash;
                        e = self.entries[0].next;
                        continue;
                    }
                }
                e = entry.next;
                continue;
            }
            // A soft op's deadline passed with it not linearized: it did
            // not happen (in this branch), and cannot any more.
            if self.p.ops[i as usize].soft {
                hash ^= zobrist(i);
                self.prune_op(self.call_of[i as usize], i);
                e = entry.next;
                continue;
            }
            // The return of an op not yet linearized: this branch fails.
            let time = self.p.ops[i as usize].ret().unwrap_or(u64::MAX);
            if worst.is_none_or(|(t, _, _)| time > t) {
                worst = Some((time, i, self.setter(&stack, holder)));
            }
            let Some(frame) = stack.pop() else {
                if found {
                    return (valid(memo.len()), false);
                }
                let (_, stuck, setter) = worst.expect("a failure was recorded");
                return (self.invalid(stuck, setter, memo.len()), false);
            };
            holder = frame.holder;
            e = self.undo(frame, &mut hash);
        }
    }

    /// Lifts uncertain op `i`, whose call entry is `call`, as dead for the
    /// rest of the branch.
    #[inline]
    fn prune_op(&mut self, call: u32, i: u32) {
        self.lift_op(call);
        self.count(i, false);
        self.pruned.push(call);
    }

    /// Prunes the op of call entry `e` (`entry`): the entry to go on from,
    /// past its own deadline entry if that came next, lifted with it.
    #[inline]
    fn prune(&mut self, e: u32, entry: Entry) -> u32 {
        self.prune_op(e, entry.op);
        match entry.next == entry.ret && entry.ret != NIL {
            true => self.entries[entry.ret as usize].next,
            false => entry.next,
        }
    }

    /// The op that set `holder`, if one holds: the latest acquire in the
    /// order so far.
    fn setter(&self, stack: &[Frame], holder: u32) -> Option<u32> {
        (holder != NIL)
            .then(|| {
                stack
                    .iter()
                    .rev()
                    .find(|f| self.p.ops[f.op as usize].kind == Kind::Acquire)
                    .map(|f| f.op)
            })
            .flatten()
    }

    /// Takes `frame`'s op back out of the order, with what was pruned
    /// above it, and out of `hash`; the search goes on from the entry after
    /// its call.
    fn undo(&mut self, frame: Frame, hash: &mut u128) -> u32 {
        while self.pruned.len() > frame.pruned_from as usize {
            let p = self.pruned.pop().expect("above the frame's start");
            self.unlift_op(p);
            let op = self.entries[p as usize].op;
            *hash ^= zobrist(op);
            self.count(op, true);
        }
        *hash ^= zobrist(frame.op);
        let call = self.call_of[frame.op as usize];
        self.unlift_op(call);
        self.count(frame.op, true);
        self.entries[call as usize].next
    }

    /// No order explains op `stuck`'s completion: the witness is it and the
    /// acquire that set the holder it found, if any.
    fn invalid(&self, stuck: u32, setter: Option<u32>, states: usize) -> Outcome {
        let named: Vec<&Op> = [Some(stuck), setter]
            .into_iter()
            .flatten()
            .map(|o| &self.p.ops[o as usize])
            .collect();
        let mut witness: Vec<u64> = named.iter().map(|o| o.index).collect();
        witness.sort_unstable();
        witness.dedup();
        let op = &self.p.ops[stuck as usize];
        Outcome {
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
            witness_time: named.iter().map(|o| o.at()).max(),
            states,
        }
    }
}
