//! `nonlinearizable`: is the lock history linearizable as an owner-aware mutex?
//!
//! Model: the state is the holder (`None` = free). `acquire` by owner `o`
//! succeeds only when free and makes `o` the holder; `release` by `o`
//! succeeds only when `o` holds, and frees the lock. An op's owner is its
//! lock token (from the completion, else the invocation), else its process.
//!
//! Ops: `ok` happened once between invocation and completion; `fail` did not
//! happen (so a holder whose release fails still holds, as in Knossos);
//! `info` or no completion may have happened at any time after invocation,
//! unless its process went on under the same id (other tools' workers do,
//! after a timeout): then it took effect, if at all, by the process's next
//! answered op, whose request followed it ([`kept_id_deadlines`]).
//! A release that fails `not-held` in lockstorm's own histories is a hold
//! that ended (its lease ran out) between its acquire and the refusal
//! (see `kept::lost_hold`); in a Jepsen history it did not happen. One
//! refused for any other reason leaves the key to its TTL: an uncertain
//! release from the refusal on (`kept::lapses`), as a crash's; a grant to
//! another before the refusal still fits no order.
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
//! visited (settled set, holder): the ops linearized or lifted (pruned, or
//! past a soft op's deadline), since what is left to order and who holds
//! is all a state's future depends on; so the branches that took an
//! uncertain op and those that left it out meet again. The set is kept as
//! a 128-bit Zobrist hash, the holder folded in, so a memo entry is 16
//! bytes whatever the history's size ([`search`]).
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
//! ([`kept`]), then paired and searched at the end. A streamed check
//! searches settled prefixes as it goes and lets them go ([`stream`]), so
//! it holds only the lock events since the last cut.

use crate::finding::{Anomaly, CheckerReport, Finding, Validity, Witness};
use crate::history::{Event, History, OpType};
use crate::meaning::Dialect;
use crate::{anomaly, Whole};
use kept::{Does, Kept, LockEvent, NONE};
use rustc_hash::{FxHashMap, FxHashSet};
use search::Search;
use std::time::Duration;
use stream::Streamed;

mod kept;
mod search;
mod stream;

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "nonlinearizable";

/// Limits of one search; exceeding either gives [`Validity::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Distinct (settled set, holder) states visited; bounds memory.
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
    /// Positions (in the events prepared) of the invocations of uncertain
    /// ops with no deadline, and of crashes: what may still act after the
    /// last event.
    loose: Vec<u32>,
    /// Why these events may depend on ops before the first of them, if
    /// they may: a release whose token no acquire here carries.
    reaches_back: Option<&'static str>,
    /// Tokens that releases carry and no acquire here does: orphans here,
    /// which a later acquire of one of them would make them not be.
    orphan_tokens: Vec<u32>,
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
fn prepare((processes, tokens): (usize, usize), events: &[LockEvent]) -> Prepared {
    let completion_of = completions(events, processes);
    let deadline = kept_id_deadlines(events, &completion_of, processes);
    let mut p = Preparing::new(tokens);
    p.tangled = tangled(events, &completion_of, &deadline);
    for (pos, e) in events.iter().enumerate() {
        if e.dead != NONE {
            p.crash(pos, e);
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
        p.lock_op(
            pos,
            e,
            kind,
            completion,
            deadline.get(&(pos as u32)).copied(),
        );
    }
    p.finish()
}

/// Whom a lock op acts for, before owners are resolved: its token (the
/// completion's, else the invocation's), else its process.
fn acts_for(e: &LockEvent, completion: Option<&LockEvent>) -> (bool, u32) {
    match completion.map(|c| c.token).filter(|&t| t != NONE) {
        Some(t) => (true, t),
        None if e.token != NONE => (true, e.token),
        None => (false, e.process),
    }
}

/// Who has two lock ops at once (one invoked before the other may have
/// taken effect): a token shared by processes, an op sent while an
/// uncertain one was open. Their ops' order is not their invocations', so
/// a refusal `not-held` of theirs cannot tell which hold it speaks of.
fn tangled(
    events: &[LockEvent],
    completion_of: &[u32],
    deadline: &FxHashMap<u32, u64>,
) -> FxHashSet<(bool, u32)> {
    let mut busy_until: FxHashMap<(bool, u32), u64> = FxHashMap::default();
    let mut tangled = FxHashSet::default();
    for (pos, e) in events.iter().enumerate() {
        if e.kind != OpType::Invoke || e.does == Does::Crash {
            continue;
        }
        let completion = Some(completion_of[pos])
            .filter(|&c| c != NIL)
            .map(|c| &events[c as usize]);
        // An unanswered op whose process went on under the same id took
        // effect, if at all, before that process's next: still in order.
        let until = match completion {
            Some(c) if c.kind != OpType::Info => c.time,
            _ if deadline.contains_key(&(pos as u32)) => e.time,
            _ => u64::MAX,
        };
        let key = acts_for(e, completion);
        let until = until.max(e.time);
        match busy_until.get_mut(&key) {
            Some(busy) => {
                if *busy >= e.time {
                    tangled.insert(key);
                }
                *busy = (*busy).max(until);
            }
            None => {
                busy_until.insert(key, until);
            }
        }
    }
    tangled
}

/// For each invocation (by position), the position of its completion, or
/// `NIL`.
fn completions(events: &[LockEvent], processes: usize) -> Vec<u32> {
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
    completion_of
}

/// [`prepare`]'s state as it goes through the events.
#[derive(Default)]
struct Preparing {
    ids: FxHashMap<OwnerKey, u32>,
    owners: Vec<OwnerInfo>,
    ops: Vec<Op>,
    loose: Vec<u32>,
    reaches_back: Option<&'static str>,
    /// Per token, whether an acquire carries it.
    acquire_tokens: Vec<bool>,
    /// The owners of releases by token, with their token.
    /// The owners of releases by token, with their token, and whether the
    /// release may not have happened.
    release_tokens: Vec<(u32, u32, bool)>,
    /// Per process, the owners of its acquires so far: what a crash releases.
    acquired: FxHashMap<u32, Vec<u32>>,
    /// The tokens of `orphan` owners (interned as the events have them).
    orphan_tokens: Vec<u32>,
    /// Who has two lock ops at once (see [`tangled`]).
    tangled: FxHashSet<(bool, u32)>,
    /// Per owner (keyed by who releases it), when its latest acquire that
    /// was not refused was invoked.
    acquired_from: FxHashMap<u32, u64>,
    /// Ops (positions in `ops`) of refusals `not-held` by an owner with
    /// no hold before: each ends nothing unless its owner is an orphan.
    unheld_refusals: Vec<u32>,
    /// Per owner (keyed by who releases it), its latest hold: what a
    /// refusal `not-held` says ended, if anything.
    holds: FxHashMap<u32, Hold>,
}

/// An owner's latest hold, as its ops so far tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Granted by an acquire invoked at this time, and not known to have
    /// ended: a refusal `not-held` ends it, certainly, by the refusal.
    Open(u64),
    /// Asked for at this time, with no answer: if it was granted, a
    /// refusal ends it by the refusal.
    Maybe(u64),
    /// Released, or ended by an earlier refusal: a refusal says nothing.
    Ended,
}

impl Preparing {
    fn new(tokens: usize) -> Self {
        Preparing {
            acquire_tokens: vec![false; tokens],
            ..Preparing::default()
        }
    }

    fn intern(&mut self, key: OwnerKey) -> u32 {
        let owners = &mut self.owners;
        *self.ids.entry(key).or_insert_with(|| {
            owners.push(OwnerInfo::default());
            u32::try_from(owners.len() - 1).expect("fewer than 4 G owners")
        })
    }

    /// The crash at `pos`: an uncertain release of every lock its dead
    /// process may hold.
    fn crash(&mut self, pos: usize, e: &LockEvent) {
        let mut held = self.acquired.remove(&e.dead).unwrap_or_default();
        held.push(self.intern(OwnerKey::Process(e.dead)));
        if e.token != NONE {
            held.push(self.intern(OwnerKey::Token(e.token)));
        }
        held.sort_unstable();
        held.dedup();
        self.loose.push(pos as u32);
        self.ops.extend(held.into_iter().map(|owner| Op {
            kind: Kind::Release,
            owner,
            invoke: e.time,
            done: u64::MAX,
            index: e.index,
            soft: false,
        }));
    }

    /// The lock op invoked at `pos` (`e`), with its completion if any and
    /// its kept-id deadline if any. A refused op is left out.
    fn lock_op(
        &mut self,
        pos: usize,
        e: &LockEvent,
        kind: Kind,
        completion: Option<&LockEvent>,
        deadline: Option<u64>,
    ) {
        let (done, index) = match completion {
            // A lost hold: it ended by the refusal (certain once its owner
            // is known to have held, below).
            Some(c) if c.kind == OpType::Fail && c.lost => (c.time, c.index),
            // Refused otherwise, in lockstorm's histories: its key lapses
            // at some moment after, as an uncertain release would.
            Some(c) if c.kind == OpType::Fail && c.lapses => (u64::MAX, e.index),
            Some(c) if c.kind == OpType::Fail => return self.refused(kind, e, c),
            Some(c) if c.kind == OpType::Ok => (c.time, c.index),
            _ => (u64::MAX, e.index),
        };
        let lost = completion.is_some_and(|c| c.lost);
        let tangled = lost && self.tangled.contains(&acts_for(e, completion));
        // A refused release's key lapses after the refusal, not before.
        let lapse_from = completion.filter(|c| c.lapses).map(|c| c.time);
        let token = completion
            .map(|c| c.token)
            .filter(|&t| t != NONE)
            .unwrap_or(e.token);
        // A refusal is as uncertain as an info here: it may end a hold, if
        // there was one, and never needs one.
        let owner = self.owner(kind, token, e.process, done == u64::MAX || lost);
        let (invoke, index, soft) = match (kind, lost) {
            (Kind::Acquire, _) => {
                self.acquired.entry(e.process).or_default().push(owner);
                self.hold_begins(owner, e.time, done != u64::MAX);
                (e.time, index, false)
            }
            // Its owner's ops overlap: the hold it speaks of, if any, began
            // by the owner's latest acquire, and ended by the refusal.
            (Kind::Release, true) if tangled => {
                let from = self.acquired_from.get(&owner).copied();
                self.holds.insert(owner, Hold::Ended);
                (from.unwrap_or(e.time).min(e.time), e.index, true)
            }
            (Kind::Release, true) => match self.holds.insert(owner, Hold::Ended) {
                // A granted hold ended, certainly, between its acquire and
                // the refusal.
                Some(Hold::Open(from)) => (from.min(e.time), index, false),
                // If that acquire was granted, its hold ended by the refusal.
                Some(Hold::Maybe(from)) => (from.min(e.time), e.index, true),
                // Its hold had already ended: the refusal says nothing new.
                Some(Hold::Ended) => return,
                // No hold of its owner's before it: nothing to end, unless
                // its token is one no acquire carries, which a wild acquire
                // may have (kept for now, dropped at `finish` otherwise).
                // (A hold granted before a piece ended before its cut, which
                // leaves the lock free: no reaching back for this.)
                None => {
                    self.unheld_refusals.push(self.ops.len() as u32);
                    (e.time, e.index, true)
                }
            },
            (Kind::Release, false) => {
                if done != u64::MAX {
                    self.holds.insert(owner, Hold::Ended);
                }
                (lapse_from.unwrap_or(e.time), index, false)
            }
        };
        // An uncertain op whose process went on under the same id: if it
        // took effect, it did so by its process's next answered op.
        let (done, soft) = match deadline {
            Some(by) if done == u64::MAX => (by, true),
            _ => (done, soft),
        };
        if done == u64::MAX {
            self.loose.push(pos as u32);
        }
        self.ops.push(Op {
            kind,
            owner,
            invoke,
            done,
            index,
            soft,
        });
    }

    /// A refused op: it did not happen. A refused acquire tells that its
    /// owner was granted nothing, so a refusal `not-held` after it, with no
    /// grant between, ends nothing (and reaches back to no earlier piece).
    fn refused(&mut self, kind: Kind, e: &LockEvent, c: &LockEvent) {
        if kind == Kind::Acquire {
            let token = if c.token != NONE { c.token } else { e.token };
            let owner = self.owner(kind, token, e.process, false);
            self.holds.entry(owner).or_insert(Hold::Ended);
        }
    }

    /// An acquire by `owner` invoked at `at`, granted or maybe: the hold a
    /// later refusal `not-held` of its releaser speaks of. A certain hold
    /// not yet ended stays the one an uncertain acquire cannot replace.
    fn hold_begins(&mut self, owner: u32, at: u64, granted: bool) {
        // Keyed by who releases it: a wild hold, by its process.
        let info = self.owners[owner as usize];
        let releaser = if info.wild { info.proc_owner } else { owner };
        self.acquired_from.insert(releaser, at);
        let hold = self.holds.entry(releaser).or_insert(Hold::Ended);
        *hold = match (*hold, granted) {
            (_, true) => Hold::Open(at),
            (Hold::Open(from), false) => Hold::Open(from),
            (_, false) => Hold::Maybe(at),
        };
    }

    /// Who a `kind` op by `process` with `token` acts for; `uncertain`: it
    /// may not have happened. A tokenless uncertain acquire is its
    /// process's wild owner.
    fn owner(&mut self, kind: Kind, token: u32, process: u32, uncertain: bool) -> u32 {
        match token {
            NONE if kind == Kind::Acquire && uncertain => {
                let id = self.intern(OwnerKey::Wild(process));
                let proc_owner = self.intern(OwnerKey::Process(process));
                self.owners[id as usize].wild = true;
                self.owners[id as usize].proc_owner = proc_owner;
                self.owners[proc_owner as usize].wild_twin = id;
                id
            }
            NONE => self.intern(OwnerKey::Process(process)),
            t => {
                let id = self.intern(OwnerKey::Token(t));
                match kind {
                    Kind::Acquire => self.acquire_tokens[t as usize] = true,
                    Kind::Release => self.release_tokens.push((id, t, uncertain)),
                }
                id
            }
        }
    }

    /// Marks the orphan tokens, now that every acquire is known, and drops
    /// the refusals that end nothing.
    fn finish(mut self) -> Prepared {
        for (id, t, uncertain) in std::mem::take(&mut self.release_tokens) {
            let orphan = !self.acquire_tokens[t as usize];
            self.owners[id as usize].orphan = orphan;
            if orphan {
                self.orphan_tokens.push(t);
            }
            // A certain release of no acquire's token released a hold from
            // before these events (an uncertain one, or a refusal, may have
            // released a wild hold among them).
            if orphan && !uncertain {
                self.reaches_back = Some("a release of a token no acquire since carries");
            }
        }
        self.orphan_tokens.sort_unstable();
        self.orphan_tokens.dedup();
        let unheld = std::mem::take(&mut self.unheld_refusals);
        let owners = &self.owners;
        let ends_nothing = |i: &u32| !owners[self.ops[*i as usize].owner as usize].orphan;
        let drop: Vec<u32> = unheld.into_iter().filter(ends_nothing).collect();
        if !drop.is_empty() {
            let mut next = drop.iter().peekable();
            let mut i = 0u32;
            self.ops.retain(|_| {
                let keep = next.next_if_eq(&&i).is_none();
                i += 1;
                keep
            });
        }
        Prepared {
            ops: self.ops,
            owners: self.owners,
            loose: self.loose,
            reaches_back: self.reaches_back,
            orphan_tokens: self.orphan_tokens,
        }
    }
}

/// For each uncertain lock invocation (by position) whose process goes on
/// under the same id: when that process's next answered (`ok` or `fail`)
/// op completed. A process's requests reach the lock in order, so the
/// uncertain op took effect, if at all, before that answer. Jepsen never
/// reuses a process id after `info`, and lockstorm neither, so this only
/// reads other tools' histories, whose workers go on after a timeout.
fn kept_id_deadlines(
    events: &[LockEvent],
    completion_of: &[u32],
    processes: usize,
) -> FxHashMap<u32, u64> {
    let mut next_answer = vec![u64::MAX; processes];
    let mut deadline = FxHashMap::default();
    for (pos, e) in events.iter().enumerate().rev() {
        if e.kind != OpType::Invoke || e.does == Does::Crash {
            // A crash ends the process: nothing after it answers for it.
            if e.dead != NONE {
                next_answer[e.dead as usize] = u64::MAX;
            }
            continue;
        }
        let answer = Some(completion_of[pos])
            .filter(|&c| c != NIL)
            .map(|c| &events[c as usize])
            .filter(|c| c.kind != OpType::Info);
        let slot = &mut next_answer[e.process as usize];
        match answer {
            Some(c) => *slot = c.time,
            None if *slot != u64::MAX => {
                deadline.insert(pos as u32, *slot);
            }
            None => {}
        }
    }
    deadline
}

/// The lock operations of `history`, in time order, ready for the search.
fn prepared(history: &History) -> Prepared {
    let mut kept = Kept::new(Dialect::Lockstorm);
    history.in_time_order().for_each(|e| kept.keep(e));
    prepare(kept.counts(), &kept.events)
}

/// Checks `history` for linearizability against the owner-aware mutex.
pub fn check(history: &History, budget: Budget) -> Outcome {
    Search::new(prepared(history), budget).run()
}

/// The checker as the registry runs it: fed every event in time order,
/// keeping the lock events, then searching them within the default budget;
/// in pieces when streamed ([`stream`]).
pub(crate) struct Linear(Streamed);

impl Linear {
    pub(crate) fn new(settings: &crate::Settings) -> Self {
        Linear(Streamed::new(Kept::new(settings.dialect), 0))
    }
}

impl Whole for Linear {
    fn keep(&mut self, e: &Event) {
        self.0.keep(e);
    }

    fn forget_settled(&mut self) {
        self.0.stream(stream::EVERY);
    }

    fn finish(self: Box<Self>) -> Finding {
        // Never cut, so never short of what it let go of.
        self.0.finish().expect("whole")
    }

    fn finish_streamed(self: Box<Self>) -> Result<Finding, String> {
        self.0
            .finish()
            .map_err(|why| format!("{NAME}: could not decide in pieces: {why}"))
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
mod tests;
