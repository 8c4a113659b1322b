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
//! A release that fails `not-held` is a lease that ran out under its
//! releaser: read as `info` (see `kept::lease_aware`).
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
//! Zobrist hash, the holder folded in, so a memo entry is 16 bytes whatever
//! the history's size ([`search`]).
//! Uncertain ops that can no longer matter are pruned: an uncertain acquire
//! once no `ok` release could release it, an uncertain release once neither
//! the holder nor any remaining acquire could give it something to release.
//! Either way any valid completion using the op has one without it.
//! This is what keeps lost replies cheap (the `lose-reply` fault; see
//! `generate::contended_history`): an acquire whose reply was lost, its
//! worker gone on under a new id, is never released, so it is pruned when
//! the search first meets it. Kept, it would be a candidate at every later
//! moment the lock is free, and 20 k lock ops with a fifth of the acquires
//! lost would exhaust the budget. Leaving it out matches the real lock too:
//! the model has no TTL, so taken, it would hold the lock for good; a lost
//! grant whose key really lapsed at its TTL is, to every certain op, one
//! that never happened.
//!
//! Fed: the events are kept as they go by, in time order and compactly
//! ([`kept`]), then paired and searched at the end, so a streamed check
//! holds 32 bytes per lock event rather than the events themselves.

use crate::finding::{Anomaly, CheckerReport, Finding, Validity, Witness};
use crate::history::{Event, History, OpType};
use crate::{anomaly, Whole};
use kept::{Does, Kept, NONE};
use rustc_hash::FxHashMap;
use search::Search;
use std::time::Duration;

mod kept;
mod search;

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
    /// When the latest of those events happened.
    pub witness_time: Option<u64>,
    pub reason: Option<String>,
    /// Distinct states visited.
    pub states: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Acquire,
    Release,
}

/// One lock operation, ready for the search: 32 bytes, as there may be
/// millions.
#[derive(Clone, Debug)]
struct Op {
    invoke: u64,
    /// Time of an `ok` op's completion; `u64::MAX` = may happen at any
    /// time after `invoke`. For a `soft` op, the moment by which it took
    /// effect, if it did at all.
    done: u64,
    /// The event index that names this op in a witness.
    index: u64,
    owner: u32,
    kind: Kind,
    /// It may not have happened, but if it did, then by `done`: a release
    /// refused `not-held` after an acquire whose outcome is unknown (if
    /// that hold existed, it had ended by the refusal).
    soft: bool,
}

impl Op {
    fn certain(&self) -> bool {
        self.done != u64::MAX && !self.soft
    }

    /// When it must have taken effect by, if at all: a certain op's
    /// return, or a soft op's deadline.
    fn by(&self) -> Option<u64> {
        (self.done != u64::MAX).then(|| self.done.max(self.invoke))
    }

    /// When a certain op returned (never before its invocation).
    fn ret(&self) -> Option<u64> {
        self.certain().then(|| self.done.max(self.invoke))
    }

    /// When the event named by `index` happened.
    fn at(&self) -> u64 {
        if self.certain() {
            self.done
        } else {
            self.invoke
        }
    }
}

/// No owner, no holder.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct OwnerInfo {
    /// Owner of a tokenless uncertain acquire: its real token is unknown.
    wild: bool,
    /// For a wild owner: the owner id of its process (tokenless releases).
    proc_owner: u32,
    /// For a process's owner: the wild owner of the same process, if any.
    wild_twin: u32,
    /// A token that no acquire carries: it may release a wild holder.
    orphan: bool,
}

impl Default for OwnerInfo {
    fn default() -> Self {
        OwnerInfo {
            wild: false,
            proc_owner: NIL,
            wild_twin: NIL,
            orphan: false,
        }
    }
}

#[derive(Debug, Default)]
struct Prepared {
    ops: Vec<Op>,
    owners: Vec<OwnerInfo>,
}

impl Prepared {
    /// Whether a release by `o` releases `holder`.
    fn releases(&self, holder: u32, o: u32) -> bool {
        holder == o || {
            let h = &self.owners[holder as usize];
            h.wild && (self.owners[o as usize].orphan || h.proc_owner == o)
        }
    }

    /// The model's step: the next holder (`NIL`: free), or `None` if `op`
    /// cannot take effect with `holder` holding.
    fn step(&self, holder: u32, op: &Op) -> Option<u32> {
        match op.kind {
            Kind::Acquire if holder == NIL => Some(op.owner),
            Kind::Release if holder != NIL && self.releases(holder, op.owner) => Some(NIL),
            _ => None,
        }
    }
}

/// Who an op acts for, by interned token or process.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum OwnerKey {
    Token(u32),
    Process(u32),
    Wild(u32),
}

/// Pairs invocations with completions and resolves owners. Failed ops and
/// completions without an invocation are left out. Pairing follows
/// [`crate::ops::InFlight`]'s rule: a completion belongs to its process's
/// op in flight if it does the same.
fn prepare(kept: Kept) -> Prepared {
    // Only the ids are needed now: the interning tables go first.
    let (processes, tokens, events) = kept.into_ids();
    let mut completion_of = vec![NIL; events.len()];
    let mut in_flight: Vec<Option<(Does, u32)>> = vec![None; processes];
    for (pos, e) in events.iter().enumerate() {
        let slot = &mut in_flight[e.process as usize];
        if e.kind == OpType::Invoke {
            *slot = Some((e.does, pos as u32));
        } else if let Some((does, invoke)) = *slot {
            if does == e.does {
                completion_of[invoke as usize] = pos as u32;
                *slot = None;
            }
        }
    }
    drop(in_flight);

    let mut ids: FxHashMap<OwnerKey, u32> = FxHashMap::default();
    let mut owners: Vec<OwnerInfo> = Vec::new();
    let mut intern = |key: OwnerKey, owners: &mut Vec<OwnerInfo>| -> u32 {
        *ids.entry(key).or_insert_with(|| {
            owners.push(OwnerInfo::default());
            u32::try_from(owners.len() - 1).expect("fewer than 4 G owners")
        })
    };
    let mut ops = Vec::new();
    let mut acquire_tokens = vec![false; tokens];
    let mut release_tokens: Vec<(u32, u32)> = Vec::new();
    // Per process, the owners of its acquires so far: what a crash releases.
    let mut acquired: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    // Per owner, when its latest acquire was invoked, and whether it was
    // granted (`ok`): where a lost hold's release may have taken effect
    // from, and whether there was a hold at all.
    let mut hold_from: FxHashMap<u32, (u64, bool)> = FxHashMap::default();
    for (pos, e) in events.iter().enumerate() {
        if e.dead != NONE {
            let mut held = acquired.remove(&e.dead).unwrap_or_default();
            held.push(intern(OwnerKey::Process(e.dead), &mut owners));
            if e.token != NONE {
                held.push(intern(OwnerKey::Token(e.token), &mut owners));
            }
            held.sort_unstable();
            held.dedup();
            ops.extend(held.into_iter().map(|owner| Op {
                kind: Kind::Release,
                owner,
                invoke: e.time,
                done: u64::MAX,
                index: e.index,
                soft: false,
            }));
            continue;
        }
        let kind = match (e.kind, e.does) {
            (OpType::Invoke, Does::Acquire) => Kind::Acquire,
            (OpType::Invoke, Does::Release) => Kind::Release,
            _ => continue,
        };
        let completion = Some(completion_of[pos])
            .filter(|&c| c != NIL)
            .map(|c| &events[c as usize]);
        let (done, index) = match completion {
            // A lost hold: it ended by the refusal (certain once its owner
            // is known to have held, below).
            Some(c) if c.kind == OpType::Fail && c.lost => (c.time, c.index),
            Some(c) if c.kind == OpType::Fail => continue,
            Some(c) if c.kind == OpType::Ok => (c.time, c.index),
            _ => (u64::MAX, e.index),
        };
        let lost = completion.is_some_and(|c| c.lost);
        let token = completion
            .map(|c| c.token)
            .filter(|&t| t != NONE)
            .unwrap_or(e.token);
        let owner = match token {
            NONE if kind == Kind::Acquire && done == u64::MAX => {
                let id = intern(OwnerKey::Wild(e.process), &mut owners);
                let proc_owner = intern(OwnerKey::Process(e.process), &mut owners);
                owners[id as usize].wild = true;
                owners[id as usize].proc_owner = proc_owner;
                owners[proc_owner as usize].wild_twin = id;
                id
            }
            NONE => intern(OwnerKey::Process(e.process), &mut owners),
            t => {
                let id = intern(OwnerKey::Token(t), &mut owners);
                match kind {
                    Kind::Acquire => acquire_tokens[t as usize] = true,
                    Kind::Release => release_tokens.push((id, t)),
                }
                id
            }
        };
        if kind == Kind::Acquire {
            acquired.entry(e.process).or_default().push(owner);
            hold_from.insert(owner, (e.time, done != u64::MAX));
        }
        let (invoke, index, soft) = match (lost, hold_from.get(&owner)) {
            // A granted hold ended, certainly, between its acquire and the
            // refusal.
            (true, Some(&(from, true))) => (from.min(e.time), index, false),
            // Its acquire's outcome unknown, or none: if there was a hold,
            // it ended by the refusal; if not, there was nothing to end.
            (true, _) => (e.time, e.index, true),
            (false, _) => (e.time, index, false),
        };
        ops.push(Op {
            kind,
            owner,
            invoke,
            done,
            index,
            soft,
        });
    }
    for (id, t) in release_tokens {
        owners[id as usize].orphan = !acquire_tokens[t as usize];
    }
    Prepared { ops, owners }
}

/// The lock operations of `history`, in time order, ready for the search.
fn prepared(history: &History) -> Prepared {
    let mut kept = Kept::new(true);
    history.in_time_order().for_each(|e| kept.keep(e));
    prepare(kept)
}

/// Checks `history` for linearizability against the owner-aware mutex.
pub fn check(history: &History, budget: Budget) -> Outcome {
    Search::new(prepared(history), budget).run()
}

/// The checker as the registry runs it: fed every event in time order,
/// keeping the lock events, then searching them within the default budget.
pub(crate) struct Linear(Kept);

impl Linear {
    pub(crate) fn new(settings: &crate::Settings) -> Self {
        Linear(Kept::new(!settings.knossos_fail))
    }
}

impl Whole for Linear {
    fn keep(&mut self, e: &Event) {
        self.0.keep(e);
    }

    fn finish(self: Box<Self>) -> Finding {
        finding(Search::new(prepare(self.0), Budget::default()).run())
    }
}

/// The anomaly, the checker's report, and why it gave up if it did.
fn finding(outcome: Outcome) -> Finding {
    let mut nonlinear = Anomaly::default();
    if outcome.valid == Validity::False {
        nonlinear.record(Witness {
            indices: outcome.witness.clone(),
            time: outcome.witness_time.unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{f, Process};
    use crate::testing::Hist;
    use proptest::prelude::*;
    use std::time::Instant;

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
        // When the later of the two happened.
        assert_eq!(out.witness_time, Some(3 * crate::testing::STEP));
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
    fn a_release_refused_as_not_held_is_a_lease_that_ran_out_during_it() {
        // Frozen inside its release past the TTL: another is granted, then
        // the release finds the key gone. The lease worked as designed.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a");
        h.acquire(2, "b");
        h.fail(1, "release").token("a").error("not-held");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
        // A lease that ran out before the release began: the lock service
        // behaved as a mutex whose holds expire (the refusal says this one
        // did), so the order fits; its holder believed it held while
        // another was granted, which is `lock-overlap`'s to report.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b"); // ok 3
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        assert_eq!(run(&h).valid, Validity::True);
        let results = crate::check(&h.build(), crate::Promise::MutualExclusion);
        assert_eq!(results.anomalies["lock-overlap"].count, 1);
        // Read as Knossos reads a `fail` (a Jepsen history), the release did
        // not happen, and the second grant fits no order.
        let settings = crate::Settings::new(crate::Promise::MutualExclusion).knossos_fail();
        let results = crate::check(&h.build(), settings);
        assert_eq!(results.anomalies["nonlinearizable"].count, 1);
        // Refused for any other reason, the release did not happen.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a");
        h.acquire(2, "b");
        h.fail(1, "release").token("a").error("connection-refused");
        assert_eq!(run(&h).valid, Validity::False);
    }

    /// After an acquire whose outcome is unknown, the same process's
    /// release refused `not-held` may mean there never was a hold: it
    /// forces nothing (a release that may have happened), while another
    /// holds the lock throughout.
    #[test]
    fn a_not_held_release_after_an_info_acquire_forces_no_hold() {
        let mut h = Hist::new();
        h.acquire(2, "b");
        h.invoke(1, "acquire").token("a");
        h.info(1, "acquire").token("a");
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
        // Had it been granted, its release says its hold ended by then.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        h.acquire(2, "b");
        h.release(2, "b");
        assert_eq!(run(&h).valid, Validity::True);
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
    fn a_lost_reply_acquire_that_nothing_releases_did_not_take_effect() {
        // `lose-reply`: acquires whose replies were lost, their workers gone
        // on under new ids, never released, and the lock granted to others
        // after each. Taken, either would hold the lock for good (the model
        // has no TTL), so each must be judged not taken.
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.invoke(2, "acquire").token("b");
        h.info(1, "acquire").token("a").error("timeout"); // 1 goes on as 11
        h.ok(2, "acquire").token("b");
        h.invoke(3, "acquire").token("c");
        h.release(2, "b");
        h.info(3, "acquire").token("c").error("timeout"); // 3 goes on as 13
        h.acquire(11, "d");
        h.release(11, "d");
        h.acquire(13, "e");
        let out = run(&h);
        assert_eq!(out.valid, Validity::True, "{out:?}");
    }

    #[test]
    fn a_lost_reply_acquire_whose_token_is_released_took_effect_and_can_overlap() {
        // The release of its token under the worker's new id proves the
        // lost reply's acquire took effect, so it is not pruned as not
        // taken; and it held while b did.
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.info(1, "acquire").token("a").error("timeout"); // goes on as 11
        h.acquire(2, "b"); // ok 3
        h.release(11, "a"); // ok 5: a held while b did
        h.release(2, "b");
        let out = run(&h);
        assert_eq!(out.valid, Validity::False, "{out:?}");
        assert_eq!(out.witness, vec![3, 5]);
    }

    #[test]
    fn a_lost_reply_acquire_whose_token_is_released_must_be_judged_taken() {
        // Only a taking effect, between b's release and its own, explains
        // the release of a; c, never released, did not take effect.
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.acquire(2, "b");
        h.info(1, "acquire").token("a").error("timeout"); // goes on as 11
        h.release(2, "b");
        h.invoke(3, "acquire").token("c");
        h.info(3, "acquire").token("c").error("timeout");
        h.release(11, "a");
        h.acquire(12, "d");
        h.release(12, "d");
        let out = run(&h);
        assert_eq!(out.valid, Validity::True, "{out:?}");
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
        fn go(p: &Prepared, placed: &mut Vec<bool>, holder: u32) -> bool {
            if (0..p.ops.len()).all(|i| placed[i] || !p.ops[i].certain()) {
                return true;
            }
            for i in 0..p.ops.len() {
                if placed[i] {
                    continue;
                }
                let ready = (0..p.ops.len())
                    .all(|j| placed[j] || p.ops[j].ret().is_none_or(|r| r >= p.ops[i].invoke));
                // A soft op goes before every op invoked after its deadline.
                let in_time = !p.ops[i].soft
                    || (0..p.ops.len()).all(|j| !placed[j] || p.ops[j].invoke <= p.ops[i].done);
                if !ready || !in_time {
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
        go(p, &mut vec![false; p.ops.len()], NIL)
    }

    #[derive(Clone, Debug)]
    struct Step {
        /// After an `info`, the worker keeps its process id (another
        /// generator's shape: its next op says what became of it) rather
        /// than moving to a new one (Jepsen's convention).
        keep_id: bool,
        worker: usize,
        release: bool,
        token: Option<u8>,
        outcome: u8, // 0 ok, 1 fail, 2 info, 3 fail not-held (a lost hold, for a release)
        gap: u64,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        prop::collection::vec(
            (
                0..4usize,
                any::<bool>(),
                prop::option::weighted(0.85, 0..3u8),
                0..4u8,
                0..3u64,
                any::<bool>(),
            )
                .prop_map(|(worker, release, token, outcome, gap, keep_id)| Step {
                    keep_id,
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
                    let kind =
                        [OpType::Ok, OpType::Fail, OpType::Info, OpType::Fail][s.outcome as usize];
                    if kind == OpType::Info && !s.keep_id {
                        proc_of[s.worker] += 4;
                    }
                    let mut e = crate::history::Event::new(time, p, kind, f);
                    e.token = token;
                    if s.outcome == 3 {
                        e.error = Some(crate::history::error::NOT_HELD.into());
                    }
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
            let expected = oracle(&prepared(&h));
            prop_assert_eq!(out.valid == Validity::True, expected, "{:?}", out);
            prop_assert_eq!(out.witness.is_empty(), expected);
        }
    }
}
