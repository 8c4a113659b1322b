//! Searching a long history in pieces, so a streamed check holds only the
//! lock events since the last cut rather than all of them.
//!
//! A cut goes where nothing reaches across it: no lock op in flight, every
//! hold granted before it ended by a release that completed before it, and
//! time moving on at the cut (ops at the same instant are concurrent). The
//! prefix is then searched on its own. If it cannot be ordered, neither can
//! the history: every op in it completed before the cut and every later op
//! began after it. If every order that explains it leaves the lock free
//! ([`Search::settles_free`]), the rest starts from a free lock, whatever
//! the prefix did, and the prefix is let go. Otherwise there is no cut there.
//!
//! What the prefix leaves loose are its uncertain ops with no deadline (and
//! its crashes): they may take effect at any later time. Its orphans, the
//! tokens its releases carry and none of its acquires does, are read as
//! such only while no later acquire carries one: they are watched too. Cutting drops them,
//! which is sound while their processes and tokens never act again, as in
//! lockstorm's own histories: taken later, an acquire that nobody releases
//! only blocks, and a release has nothing of theirs to release. So those
//! processes and tokens are watched, and a cut is only made where none
//! appears in what is already kept after it. If one appears later, or a
//! piece reaches back before its start (a release of a token no acquire in
//! it carries, a refusal `not-held` of a hold granted before it), the pieces
//! cannot decide: [`Streamed::finish`] says why, and the history must
//! be checked whole.

use super::kept::{Does, Kept, LockEvent, NONE};
use super::search::{Search, Settled};
use super::{completions, finding, prepare, Budget, Outcome, NIL};
use crate::finding::Finding;
use crate::history::{Event, OpType};
use rustc_hash::{FxHashMap, FxHashSet};
use std::time::Duration;

/// How many kept events between tries at a cut, by default: some 2 MB of
/// them, and a prefix whose search takes a few milliseconds.
pub(super) const EVERY: usize = 1 << 16;

/// How many of the latest places a try looks at before waiting for more.
const TRIES: usize = 3;

pub(super) struct Streamed {
    kept: Kept,
    /// Try a cut each time this many more events are kept; 0: never cut
    /// (the history is in memory anyway).
    every: usize,
    next_try: usize,
    /// A cut was made: what is kept now starts from a free lock.
    cuts: usize,
    /// States the searches of the pieces let go visited.
    states: usize,
    /// A piece that cannot be ordered: the verdict, and nothing more is kept.
    invalid: Option<Outcome>,
    unstreamable: Option<String>,
}

impl Streamed {
    pub(super) fn new(kept: Kept, every: usize) -> Self {
        Streamed {
            kept,
            every,
            next_try: every,
            cuts: 0,
            states: 0,
            invalid: None,
            unstreamable: None,
        }
    }

    pub(super) fn stream(&mut self, every: usize) {
        self.every = every;
        self.next_try = self.kept.events.len() + every;
    }

    pub(super) fn keep(&mut self, e: &Event) {
        if self.invalid.is_some() || self.unstreamable.is_some() {
            return;
        }
        self.kept.keep(e);
        if self.cuts > 0 {
            if let Some(again) = self.kept.seen_again.take() {
                return self.give_up(format!("{again} acted again after a cut took it for gone"));
            }
        }
        if self.every > 0 && self.kept.events.len() >= self.next_try {
            self.try_cut();
        }
    }

    fn give_up(&mut self, why: String) {
        self.unstreamable = Some(why);
        self.kept = Kept::new(self.kept.dialect());
    }

    fn try_cut(&mut self) {
        let counts = self.kept.counts();
        let events = &self.kept.events;
        let refused = refused_invokes(events, &completions(events, counts.0));
        for pos in places(events, counts.0, self.every / 4, &refused) {
            let events = &self.kept.events;
            let prepared = prepare(counts, &without_refused(events, pos, &refused));
            if self.cuts > 0 {
                if let Some(why) = prepared.reaches_back {
                    return self.give_up(format!("{why} (after a cut)"));
                }
            }
            if acts_after(events, &prepared.loose, pos)
                || carried_after(events, &prepared.orphan_tokens, pos)
            {
                continue;
            }
            let loose = prepared.loose.clone();
            let orphans = prepared.orphan_tokens.clone();
            let budget = Budget {
                max_states: 4 * pos + 100_000,
                max_time: Duration::from_secs(5),
            };
            match Search::new(prepared, budget).settles_free() {
                Settled::Open => continue,
                Settled::Invalid(mut out) => {
                    out.states += self.states;
                    self.invalid = Some(out);
                    self.kept = Kept::new(self.kept.dialect());
                    return;
                }
                Settled::Free(states) => {
                    self.states += states;
                    self.cuts += 1;
                    self.kept.cut(pos, &loose, &orphans);
                    self.next_try = self.kept.events.len() + self.every;
                    return;
                }
            }
        }
        self.next_try = self.kept.events.len() + self.every / 4;
    }

    /// What the search finds, or why the pieces cannot decide.
    pub(super) fn finish(mut self) -> Result<Finding, String> {
        if let Some(why) = self.unstreamable {
            return Err(why);
        }
        if let Some(out) = self.invalid.take() {
            return Ok(self.pieces(finding(out)));
        }
        let prepared = prepare(self.kept.counts(), &self.kept.events);
        if let (true, Some(why)) = (self.cuts > 0, prepared.reaches_back) {
            return Err(format!("{why} (after a cut)"));
        }
        let mut out = Search::new(prepared, Budget::default()).run();
        out.states += self.states;
        Ok(self.pieces(finding(out)))
    }

    /// Says in the report how many pieces were searched, when more than one.
    fn pieces(&self, mut found: Finding) -> Finding {
        if self.cuts > 0 {
            let pieces = serde_json::json!(self.cuts + 1);
            found.report.details.insert("pieces".into(), pieces);
        }
        found
    }
}

/// For each kept event that invokes an op refused (plain `fail`) at a
/// completion also kept, that completion's position; `NIL` otherwise. Such
/// an op never happened, and may be in flight across a cut (a contended
/// lock's refused acquires always are).
fn refused_invokes(events: &[LockEvent], completion_of: &[u32]) -> Vec<u32> {
    let refused = |c: &LockEvent| c.kind == OpType::Fail && !c.lost && !c.lapses;
    (0..events.len())
        .map(|pos| match completion_of[pos] {
            c if c != NIL && refused(&events[c as usize]) => c,
            _ => NIL,
        })
        .collect()
}

/// The events before `pos`, with the invocations of refused ops whose
/// refusal comes at or after it made inert (a completion with no
/// invocation, which the search leaves out): the prefix as it is once the
/// refusal is known. Its refusal, after the cut, pairs with nothing.
fn without_refused<'a>(
    events: &'a [LockEvent],
    pos: usize,
    refused: &[u32],
) -> std::borrow::Cow<'a, [LockEvent]> {
    let straddles = |i: usize| refused[i] != NIL && refused[i] as usize >= pos;
    if !(0..pos).any(straddles) {
        return std::borrow::Cow::Borrowed(&events[..pos]);
    }
    let mut prefix = events[..pos].to_vec();
    for (i, e) in prefix.iter_mut().enumerate() {
        if straddles(i) {
            e.kind = OpType::Fail;
        }
    }
    std::borrow::Cow::Owned(prefix)
}

/// The latest few places a cut may go (see the module doc), latest first,
/// leaving at least `after` events kept past each. An op in flight there
/// that is `refused` does not keep a place from being one.
fn places(events: &[LockEvent], processes: usize, after: usize, refused: &[u32]) -> Vec<usize> {
    let mut in_flight: Vec<Option<(Does, bool)>> = vec![None; processes];
    let mut pending = 0usize;
    // Holds granted (or maybe granted) and not yet ended, by token, else
    // by process.
    let mut holds: FxHashMap<(bool, u32), u32> = FxHashMap::default();
    let mut open = 0usize;
    let mut found = Vec::new();
    let last = events.len().saturating_sub(after);
    // Where each process is seen last among the kept events.
    let mut last_seen = vec![0; processes];
    for (pos, e) in events.iter().enumerate() {
        last_seen[e.process as usize] = pos;
    }
    for (pos, e) in events.iter().enumerate().take(last + 1) {
        let quiet = pending == 0 && open == 0;
        if pos > 0 && quiet && e.time > events[pos - 1].time {
            found.push(pos);
        }
        let slot = &mut in_flight[e.process as usize];
        if e.does == Does::Crash {
            if e.dead != NONE {
                let dead = &mut in_flight[e.dead as usize];
                pending -= usize::from(dead.take().is_some_and(|(_, counted)| counted));
            }
            continue;
        }
        if e.kind == OpType::Invoke {
            let counted = refused[pos] == NIL;
            if let Some((_, was)) = slot.replace((e.does, counted)) {
                pending -= usize::from(was);
            }
            pending += usize::from(counted);
            continue;
        }
        let Some((does, counted)) = *slot else {
            continue;
        };
        if does != e.does {
            continue;
        }
        *slot = None;
        pending -= usize::from(counted);
        let key = match e.token {
            NONE => (false, e.process),
            t => (true, t),
        };
        match (e.does, e.kind) {
            // An acquire whose reply was lost, by a worker that goes on
            // under a new id, is loose instead: a cut after it waits until
            // its process and token are seen no more (`acts_after`), so it
            // does not keep every later place from being a cut. One whose
            // process acts again may be released by it: open.
            (Does::Acquire, OpType::Info) if last_seen[e.process as usize] == pos => {}
            (Does::Acquire, OpType::Ok | OpType::Info) => {
                *holds.entry(key).or_default() += 1;
                open += 1;
            }
            // A plain refusal leaves the holder holding (Knossos's `fail`).
            (Does::Release, OpType::Fail) if !e.lost => {}
            (Does::Release, _) => {
                if let Some(n) = holds.get_mut(&key).filter(|n| **n > 0) {
                    *n -= 1;
                    open -= 1;
                }
            }
            _ => {}
        }
    }
    found.into_iter().rev().take(TRIES).collect()
}

/// Whether a process or token of an op loose before `pos` (positions in
/// `loose`) appears at or after it.
fn acts_after(events: &[LockEvent], loose: &[u32], pos: usize) -> bool {
    let mut processes = FxHashSet::default();
    let mut tokens = FxHashSet::default();
    for &at in loose {
        let e = &events[at as usize];
        processes.insert(e.process);
        if e.dead != NONE {
            processes.insert(e.dead);
        }
        if e.token != NONE {
            tokens.insert(e.token);
        }
    }
    events[pos..].iter().any(|e| {
        processes.contains(&e.process)
            || (e.dead != NONE && processes.contains(&e.dead))
            || (e.token != NONE && tokens.contains(&e.token))
    })
}

/// Whether a token in `tokens` (the prefix's orphans) appears at or after
/// `pos`: then it was no orphan, and the prefix may have read it wrong.
fn carried_after(events: &[LockEvent], tokens: &[u32], pos: usize) -> bool {
    !tokens.is_empty()
        && events[pos..]
            .iter()
            .any(|e| tokens.binary_search(&e.token).is_ok())
}
