//! Mutual-exclusion anomalies found from lock holds: `lock-overlap`,
//! `unsafe-action` and `foreign-release`.
//!
//! An anomaly needs a certain order: ops are intervals, and B's grant counts
//! as after A's only when B could not have taken effect first (its winning
//! attempt was sent after A's `ok`: `attempt_sent`, or else its invoke).
//!
//! Fed events in time order (see [`crate::feed`]). Only the holds still open
//! are kept, each with the first other lock granted after it started, so
//! memory follows the concurrency (plus holds that never end), not the
//! history's length.
//!
//! The observer's events (`observed.rs`), when the history has them,
//! sharpen two findings: a read or write sent after its holder's key was
//! seen gone is an `unsafe-action` even when no one else was granted the
//! lock (an op counts once, whichever rule finds it: the grant rule first),
//! and each `lock-overlap` is labelled with how the first holder's key went.

use crate::finding::{Anomaly, CheckerReport, Finding, Witness, MAX_EXAMPLES};
use crate::history::fault::{started, stopped, DELIVERED_WRITE, PROCESS};
use crate::history::{f, Event, OpType, Process, CLIENT_TOKEN};
use crate::holds::Hold;
use crate::observed::Keys;
use crate::{anomaly, Checker, Invoked, OnEvent};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// The checker's key under `results.json`'s `checkers`.
pub const NAME: &str = "mutex";

/// Grants kept for writes the network held back: a held write lands within
/// one fault's hold, far fewer grants than this apart.
const RECENT_GRANTS: usize = 1024;

/// A release that may have deleted a lock granted while it was in flight.
struct Suspect {
    release_ok: u64,
    /// Start index of the lock granted during the release.
    granted: u64,
    /// When that lock was granted.
    granted_at: u64,
}

/// What the nemesis did, as far as a lost key could be its doing instead
/// of a release's: the workers it struck, and faults on the nodes.
#[derive(Default)]
struct Nemesis {
    /// (time, client process) of every strike on a worker.
    strikes: Vec<(u64, u64)>,
    /// Node faults (every fault that names no struck process) open now.
    open: usize,
    /// When a node fault last started or stopped.
    last_change: u64,
}

impl Nemesis {
    fn on_event(&mut self, e: &Event) {
        let struck = e.value.get(PROCESS).and_then(|p| p.as_u64());
        match (started(&e.f), stopped(&e.f), struck) {
            (Some(_), _, Some(p)) => self.strikes.push((e.time, p)),
            (Some(_), _, None) => (self.open, self.last_change) = (self.open + 1, e.time),
            (_, Some(_), None) => {
                (self.open, self.last_change) = (self.open.saturating_sub(1), e.time)
            }
            _ => {}
        }
    }

    /// Whether nothing but a release can have taken `holder`'s key between
    /// `from` and `to`: no node fault then, and no strike on the holder
    /// (a frozen holder outlives its lease).
    fn quiet(&self, holder: &Process, from: u64, to: u64) -> bool {
        let struck = |&(t, p): &(u64, u64)| *holder == Process::Client(p) && t >= from && t <= to;
        self.open == 0 && self.last_change < from && !self.strikes.iter().any(struck)
    }
}

/// A hold still open (not yet ended by a release invoke).
struct Open {
    hold: Hold,
    /// When its acquire op was invoked, or its granted attempt was sent if
    /// the event says: the grant happened between then and the `ok` (a
    /// client frozen mid-acquisition reports it late), so only a lock
    /// invoked after another's `ok` was certainly granted after it.
    invoked: u64,
    /// `(time, index)` of the first acquire `ok` of another lock certainly
    /// granted after this hold started: from then on its holder's reads and
    /// writes are unsafe.
    intruder: Option<(u64, u64)>,
    /// The token the lock key holds for this hold: the library's own for an
    /// adapter that shows it (`value.client_token`), else the hold's.
    key_token: Option<String>,
}

#[derive(Default)]
pub struct Mutex {
    open: Vec<Open>,
    /// Each process's latest hold, by start index: a process acts under it
    /// while it is open.
    latest: FxHashMap<Process, u64>,
    /// Per process, the intruding acquire-ok that makes its op in flight
    /// unsafe (a read or write) or foreign (a release), if it succeeds.
    pending: FxHashMap<Process, u64>,
    /// Per process, its release in flight: (invoke time, when the hold it
    /// ends was granted, that hold's key token).
    releasing: FxHashMap<Process, (u64, u64, Option<String>)>,
    /// Foreign releases waiting [`LATE_SET`] for the observer's report of
    /// what they deleted: `(own token, intruder's token, release invoke
    /// time, witness, until)`.
    deferred_foreign: Vec<DeferredForeign>,
    /// A release that succeeded after another lock was granted during it:
    /// it may have deleted that lock. Confirmed when a third lock is granted
    /// while that one is still held (its key was gone).
    suspects: Vec<Suspect>,
    nemesis: Nemesis,
    /// The lock key as the observer saw it (nothing without its events).
    keys: Keys,
    /// Per process, the observer event after which the token of the hold
    /// its read or write in flight acts under no longer owned the lock
    /// (when no grant already makes the op unsafe): unsafe if it succeeds.
    unowned: FxHashMap<Process, u64>,
    /// Ops that succeeded unowned by a loss reported before their hold's
    /// grant, waiting [`LATE_SET`] for the report of the winning set that
    /// would undo it: `(token, witness, until)`.
    deferred: Vec<(String, Witness, u64)>,
    /// The first hold's key token of each overlap not yet labelled: how many
    /// overlaps each is first in; and each kept example's.
    overlap_tokens: FxHashMap<String, u64>,
    example_tokens: Vec<Option<String>>,
    /// Each client process's latest write invoke: `(time, index, value)`.
    writes: FxHashMap<Process, (u64, u64, serde_json::Value)>,
    /// The latest grants, `(certainly after, time, index, process)`, for a
    /// write the network held back: it acted when it landed.
    grants: VecDeque<(u64, u64, u64, Process)>,
    /// Two holds at once; witness `[earlier acquire-ok, later acquire-ok]`.
    pub overlap: Anomaly,
    /// A read or write the storage accepted from a process after someone else
    /// acquired since its own acquisition, certainly before the op's invoke.
    /// Witness `[the op's ok, the other acquire-ok]`; for a write the network
    /// held back (a stop event's `delivered_write`), certainly before it
    /// landed: `[the write's invoke, the other acquire-ok, the stop event]`;
    /// for one sent after the observer saw its holder's key gone (and no
    /// grant since): `[the op's ok, the observer event]`.
    pub unsafe_action: Anomaly,
    /// A successful release while another lock, granted after the releaser's,
    /// was held: a compare-and-delete release fails then (`not-held`), a plain
    /// `DEL` does not. Witness `[release ok, the other acquire-ok]`.
    pub foreign_release: Anomaly,
}

/// A foreign release waiting for the observer: `(own token, intruder's
/// token, release invoke time, witness, until)`.
type DeferredForeign = (String, Option<String>, u64, Witness, u64);

/// Of `waiting`, drops those the observer has since `excused`, and takes
/// out those past their deadline (`parts`: the witness and the deadline;
/// all of them at the end, `now` being `None`), for the caller to record.
fn take_due<T>(
    waiting: &mut Vec<T>,
    now: Option<u64>,
    excused: impl Fn(&T) -> bool,
    parts: impl Fn(&T) -> (&Witness, u64),
) -> Vec<Witness> {
    let mut due = Vec::new();
    waiting.retain(|w| {
        if excused(w) {
            return false;
        }
        let (witness, until) = parts(w);
        match now {
            Some(now) if now <= until => true,
            _ => {
                due.push(witness.clone());
                false
            }
        }
    });
    due
}

/// How late the observer's report of a set may come after the set itself:
/// it stamps what it reads, after the node acted, and a busy machine delays
/// its reading. Far longer than a report takes, far shorter than a lease.
const LATE_SET: u64 = 2_000_000_000;

impl OnEvent for Mutex {
    fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>) {
        self.settle_deferred(Some(e.time));
        self.settle_foreign(Some(e.time));
        if e.process.is_observer() {
            self.keys.on_event(e);
            return;
        }
        if e.crashed().is_some() {
            // A dead process believes nothing: its holds end here.
            self.end_holds(e);
            return;
        }
        if e.is_nemesis() {
            self.nemesis.on_event(e);
            if let Some(value) = e
                .value
                .get(DELIVERED_WRITE)
                .filter(|_| stopped(&e.f).is_some())
            {
                self.delivered(e, value);
            }
            return;
        }
        if e.kind == OpType::Invoke && e.f == f::WRITE && e.process.is_client() {
            self.writes
                .insert(e.process.clone(), (e.time, e.index, e.value.clone()));
        }
        let data_op = e.f == f::READ || e.f == f::WRITE;
        match (e.kind, e.f.as_str()) {
            (OpType::Ok, f::ACQUIRE) => {
                let invoked = invoke.map_or(e.time, |i| i.time);
                self.acquired(e, e.attempt_sent().map_or(invoked, |s| s.max(invoked)))
            }
            (OpType::Invoke, f::RELEASE) => self.releasing(e),
            (OpType::Invoke, _) if data_op && e.process.is_client() => {
                // Certainly after: the intruder's ok came before this invoke.
                let intruder = self
                    .current(&e.process)
                    .and_then(|h| h.intruder)
                    .filter(|&(time, _)| time < e.time);
                let unowned = match intruder {
                    Some(_) => None,
                    None => self.unowned_at(&e.process, e.time),
                };
                match intruder {
                    Some((_, index)) => self.pending.insert(e.process.clone(), index),
                    None => self.pending.remove(&e.process),
                };
                match unowned {
                    Some(index) => self.unowned.insert(e.process.clone(), index),
                    None => self.unowned.remove(&e.process),
                };
            }
            (OpType::Ok, _) if data_op || e.f == f::RELEASE => {
                let in_flight = self.releasing.remove(&e.process);
                let unowned = self.unowned.remove(&e.process).filter(|_| data_op);
                if let Some(other) = self.pending.remove(&e.process) {
                    let witness = Witness {
                        indices: vec![e.index, other],
                        time: e.time,
                    };
                    match data_op {
                        true => self.unsafe_action.record(witness),
                        false => self.foreign(witness, other, in_flight),
                    }
                } else if let Some(gone) = unowned {
                    let witness = Witness {
                        indices: vec![e.index, gone],
                        time: e.time,
                    };
                    // A loss reported before the grant is void if the
                    // winning set's report follows: a library that retries
                    // with one value set the key again to win.
                    let token = self.current(&e.process).and_then(|o| o.key_token.clone());
                    match token.filter(|t| self.keys.gone_before_grant(t)) {
                        Some(token) => self.deferred.push((token, witness, e.time + LATE_SET)),
                        None => self.unsafe_action.record(witness),
                    }
                } else if let Some((invoked, mine, _)) = in_flight {
                    self.suspect(e, invoked, mine);
                }
            }
            (OpType::Fail | OpType::Info, _) => {
                self.pending.remove(&e.process);
                self.unowned.remove(&e.process);
                self.releasing.remove(&e.process);
            }
            _ => {}
        }
    }
}

impl Checker for Mutex {
    fn so_far(&self, anomaly: &str) -> Option<u64> {
        let found = match anomaly {
            anomaly::LOCK_OVERLAP => &self.overlap,
            anomaly::UNSAFE_ACTION => &self.unsafe_action,
            anomaly::FOREIGN_RELEASE => &self.foreign_release,
            _ => return None,
        };
        Some(found.count)
    }

    fn finish(mut self: Box<Self>) -> Finding {
        self.settle_deferred(None);
        self.settle_foreign(None);
        self.label_overlaps();
        let report = CheckerReport::from_anomalies([
            &self.overlap,
            &self.unsafe_action,
            &self.foreign_release,
        ]);
        Finding {
            report,
            anomalies: vec![
                (anomaly::LOCK_OVERLAP, self.overlap),
                (anomaly::UNSAFE_ACTION, self.unsafe_action),
                (anomaly::FOREIGN_RELEASE, self.foreign_release),
            ],
            notes: Vec::new(),
            not_asked: false,
        }
    }
}

impl Mutex {
    /// A release that succeeded after another lock (`intruder`, the index
    /// of its grant) was granted: it deleted that lock, unless the observer
    /// shows it deleted its own key and not the intruder's (two primaries,
    /// each with its own key, after a failover). With the observer's events
    /// it waits for that report; without them it is judged at once.
    fn foreign(
        &mut self,
        witness: Witness,
        intruder: u64,
        releasing: Option<(u64, u64, Option<String>)>,
    ) {
        let own = releasing
            .and_then(|(invoked, _, token)| Some((token?, invoked)))
            .filter(|_| self.keys.watched());
        let Some((own, since)) = own else {
            self.foreign_release.record(witness);
            return;
        };
        let theirs = self
            .open
            .iter()
            .find(|o| o.hold.start_index == intruder)
            .and_then(|o| o.key_token.clone());
        let until = witness.time + LATE_SET;
        self.deferred_foreign
            .push((own, theirs, since, witness, until));
    }

    /// Drops each deferred foreign release the observer saw delete its own
    /// key (and not the intruder's), and records the rest past their wait
    /// (all of them at the end, `now` being `None`).
    fn settle_foreign(&mut self, now: Option<u64>) {
        if self.deferred_foreign.is_empty() {
            return;
        }
        let keys = &self.keys;
        let own_only = |(own, theirs, since, _, _): &DeferredForeign| {
            keys.holder(own).is_some_and(|by| {
                keys.deleted_by(own, by, *since)
                    && !theirs
                        .as_deref()
                        .is_some_and(|t| keys.deleted_by(t, by, *since))
            })
        };
        let due = take_due(&mut self.deferred_foreign, now, own_only, |d| (&d.3, d.4));
        for witness in due {
            self.foreign_release.record(witness);
        }
    }

    /// Drops each deferred op whose token's key was since reported set
    /// again, and records those still unowned past their wait (all of them
    /// at the end, `now` being `None`).
    fn settle_deferred(&mut self, now: Option<u64>) {
        if self.deferred.is_empty() {
            return;
        }
        let keys = &self.keys;
        let set_again =
            |(token, _, _): &(String, Witness, u64)| keys.unowned_before(token, u64::MAX).is_none();
        let due = take_due(&mut self.deferred, now, set_again, |d| (&d.1, d.2));
        for witness in due {
            self.unsafe_action.record(witness);
        }
    }

    fn acquired(&mut self, e: &Event, invoked: u64) {
        // Open: its end is not known yet, and nothing here reads it.
        let new = Hold::granted(e, u64::MAX);
        self.confirm_suspects(&new, e);
        let mut firsts = Vec::new();
        for a in &mut self.open {
            if a.hold.same_lock(&new) {
                continue;
            }
            self.overlap.record(Witness {
                indices: vec![a.hold.start_index, e.index],
                time: e.time,
            });
            firsts.push(a.key_token.clone());
            if a.intruder.is_none() && invoked > a.hold.start {
                a.intruder = Some((e.time, e.index));
            }
        }
        self.latest.insert(e.process.clone(), e.index);
        if self.grants.len() == RECENT_GRANTS {
            self.grants.pop_front();
        }
        self.grants
            .push_back((invoked, e.time, e.index, e.process.clone()));
        for first in firsts {
            if let Some(token) = &first {
                *self.overlap_tokens.entry(token.clone()).or_default() += 1;
            }
            if self.example_tokens.len() < MAX_EXAMPLES {
                self.example_tokens.push(first);
            }
        }
        let client_token = e.value.get(CLIENT_TOKEN).and_then(|t| t.as_str());
        let key_token = client_token.map(String::from).or_else(|| new.token.clone());
        if let Some(token) = &key_token {
            self.keys.pin(token);
            self.keys
                .granted(token, e.attempt_sent().unwrap_or(invoked));
        }
        self.open.push(Open {
            key_token,
            hold: new,
            invoked,
            intruder: None,
        });
    }

    /// The observer event after which the token of the hold `p` acts under
    /// no longer owned the lock, if it came before `time`.
    fn unowned_at(&self, p: &Process, time: u64) -> Option<u64> {
        let token = self.current(p)?.key_token.as_deref()?;
        self.keys.unowned_before(token, time)
    }

    /// Labels each overlap with how its first holder's key went, as the
    /// observer saw it; a history without the observer's events gets none.
    fn label_overlaps(&mut self) {
        for (token, n) in &self.overlap_tokens {
            if let Some(label) = self.keys.label(token) {
                *self.overlap.labels.entry(label.into()).or_default() += n;
            }
        }
        if self.overlap.labels.is_empty() {
            return;
        }
        let label = |t: &Option<String>| Some(self.keys.label(t.as_deref()?)?.to_string());
        self.overlap.example_labels = self.example_tokens.iter().map(label).collect();
    }

    /// A write held back in the network landed now (`e`, a stop event) and
    /// the storage accepted it: unsafe if another process's lock was
    /// certainly granted after the write left and before it landed. The
    /// write is the latest one invoked with the value it carried.
    fn delivered(&mut self, e: &Event, value: &serde_json::Value) {
        let same = |v: &serde_json::Value| v == value;
        let write = self
            .writes
            .iter()
            .filter(|(_, (t, _, v))| *t <= e.time && same(v))
            .max_by_key(|(_, (t, _, _))| *t)
            .map(|(p, (t, i, _))| (p.clone(), *t, *i));
        let Some((writer, left, index)) = write else {
            return;
        };
        let intruder = self
            .grants
            .iter()
            .find(|(after, time, _, p)| *after > left && *time < e.time && *p != writer);
        if let Some((_, _, other, _)) = intruder {
            self.unsafe_action.record(Witness {
                indices: vec![index, *other, e.index],
                time: e.time,
            });
        }
    }

    /// Ends the holds this release is for: those with its token or, for a
    /// tokenless release, the process's own tokenless holds. First notes
    /// whether another lock granted after the released one is held now.
    fn releasing(&mut self, e: &Event) {
        let Some(mine) = self.open.iter().rev().find(|o| o.hold.ended_by(e)) else {
            self.pending.remove(&e.process);
            return;
        };
        let token = mine.key_token.clone();
        let mine = &mine.hold;
        self.releasing
            .insert(e.process.clone(), (e.time, mine.start, token));
        let other = self
            .open
            .iter()
            .find(|o| o.invoked > mine.start && !o.hold.same_lock(mine) && !o.hold.ended_by(e))
            .map(|o| o.hold.start_index);
        match other {
            Some(index) => self.pending.insert(e.process.clone(), index),
            None => self.pending.remove(&e.process),
        };
        self.end_holds(e);
    }

    /// Ends the holds `e` (a release invoke or a crash) ends.
    fn end_holds(&mut self, e: &Event) {
        let mut ended = Vec::new();
        self.open.retain(|o| {
            let end = o.hold.ended_by(e);
            if end {
                ended.extend(o.key_token.clone());
            }
            !end
        });
        for token in ended {
            self.settle(&token);
        }
    }

    /// A token whose hold ended: once the observer has seen its key go, the
    /// overlaps it was first in are labelled for good, and the observer may
    /// forget it (an example's token is kept for its label at the end). A
    /// key never seen at all by then (no observer) gets no label, ever.
    fn settle(&mut self, token: &str) {
        if let Some(&n) = self.overlap_tokens.get(token) {
            match self.keys.label(token) {
                None => {}
                Some(label) if self.keys.settled(token) => {
                    *self.overlap.labels.entry(label.into()).or_default() += n;
                }
                // Seen set, its fate not seen yet: labelled at the end.
                Some(_) => return,
            }
            self.overlap_tokens.remove(token);
        }
        if !self
            .example_tokens
            .iter()
            .any(|t| t.as_deref() == Some(token))
        {
            self.keys.unpin(token);
        }
    }

    /// A release ok with no other lock held at its invoke: if one certainly
    /// granted after the releaser's was reported while the release was in
    /// flight and is still held, the release may have deleted it (a plain
    /// `DEL` after a `GET`, say).
    fn suspect(&mut self, e: &Event, invoked: u64, mine: u64) {
        let granted = self
            .open
            .iter()
            .filter(|o| o.invoked > mine && o.hold.process != e.process)
            .map(|o| &o.hold)
            .find(|h| h.start > invoked);
        if let Some(h) = granted {
            self.suspects.push(Suspect {
                release_ok: e.index,
                granted: h.start_index,
                granted_at: h.start,
            });
        }
    }

    /// A lock granted while a suspect's lock is still held: that lock's key
    /// was gone, and when no fault can have taken it (no node fault, its
    /// holder not frozen or killed) the suspect release deleted it. A
    /// suspect is settled by the first lock granted after it, or dropped
    /// when its lock ends.
    fn confirm_suspects(&mut self, new: &Hold, e: &Event) {
        if self.suspects.is_empty() {
            return;
        }
        let open: Vec<(u64, Hold)> = self
            .open
            .iter()
            .map(|o| (o.hold.start_index, o.hold.clone()))
            .collect();
        self.suspects.retain(|s| {
            let Some((_, held)) = open.iter().find(|(i, _)| *i == s.granted) else {
                return false;
            };
            if held.same_lock(new) {
                return true;
            }
            if self.nemesis.quiet(&held.process, s.granted_at, e.time) {
                self.foreign_release.record(Witness {
                    indices: vec![s.release_ok, s.granted, e.index],
                    time: e.time,
                });
            }
            false
        });
    }

    /// The hold `p` acts under: its latest, if still open.
    fn current(&self, p: &Process) -> Option<&Open> {
        let latest = *self.latest.get(p)?;
        self.open.iter().find(|o| o.hold.start_index == latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::feed;
    use crate::history::build::Hist;
    use crate::history::{key, ATTEMPT_SENT};

    fn run(h: &Hist) -> (Anomaly, Anomaly, Anomaly) {
        let mut m: Mutex = feed(&h.build());
        m.settle_deferred(None);
        m.settle_foreign(None);
        (m.overlap, m.unsafe_action, m.foreign_release)
    }

    fn indices(a: &Anomaly) -> Vec<Vec<u64>> {
        a.examples.clone()
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
        assert!(!o.found() && !u.found() && !f.found(), "{o:?} {u:?} {f:?}");
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
        assert_eq!(o.first_time, Some(h.build().events[3].time));
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
        assert!(!o.found(), "{o:?}");
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
        assert_eq!(o.count, 50);
        assert!(o.examples.iter().all(|w| w[0] == 1));
    }

    #[test]
    fn the_same_token_seen_twice_is_not_an_overlap() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(1, "a"); // e.g. a retried acquire reporting the same lock
        h.release(1, "a");
        assert!(!run(&h).0.found());
    }

    #[test]
    fn a_crashed_holder_does_not_overlap_the_next_one() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.invoke(1, "read"); // 2
        h.info(1, "read").error("crashed");
        h.crash(1).token("a");
        h.acquire(2, "b");
        h.release(2, "b");
        let (o, u, f) = run(&h);
        assert!(!o.found() && !u.found() && !f.found(), "{o:?} {u:?} {f:?}");
    }

    #[test]
    fn an_overlap_before_the_crash_is_still_an_overlap() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.acquire(2, "b"); // 3
        h.crash(1).token("a");
        h.release(2, "b");
        assert_eq!(indices(&run(&h).0), vec![vec![1, 3]]);
    }

    #[test]
    fn a_crash_with_no_hold_changes_nothing() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.invoke(3, "acquire");
        h.crash(3); // died waiting
        h.acquire(2, "b"); // 5
        h.release(1, "a");
        assert_eq!(indices(&run(&h).0), vec![vec![1, 5]]);
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
        assert_eq!(u.first_time, Some(h.build().events[7].time));
    }

    #[test]
    fn a_write_held_in_the_network_acts_when_it_lands() {
        // 1's write leaves while it holds the lock, is held back, and lands
        // after 2 was granted the lock: the storage accepted a stale write.
        let history = |accepted_after_grant: bool| {
            let mut h = Hist::new();
            h.acquire(1, "a"); // 1
            h.invoke(1, "write").value(7); // 2: leaves in time
            h.info(1, "write").value(7).error("timeout"); // 3
            if !accepted_after_grant {
                h.nemesis("stop-delay")
                    .value(serde_json::json!({DELIVERED_WRITE: 7}));
            }
            h.acquire(2, "b"); // 5 (or 6)
            h.write(2, 8);
            if accepted_after_grant {
                h.nemesis("stop-delay")
                    .value(serde_json::json!({DELIVERED_WRITE: 7}));
            }
            h
        };
        let (_, u, _) = run(&history(true));
        assert_eq!(indices(&u), vec![vec![2, 5, 8]]);
        let (_, u, _) = run(&history(false));
        assert!(
            !u.found(),
            "it landed before anyone else had the lock: {u:?}"
        );
        // A stop event without the key (the storage refused the write, as a
        // fenced one does) says nothing landed.
        let mut h = history(true);
        h.nemesis("stop-delay")
            .value(serde_json::json!({"accepted": false}));
        let (_, u, _) = run(&h);
        assert_eq!(u.count, 1, "only the delivered one counts");
    }

    #[test]
    fn a_retried_acquire_counts_from_its_granted_attempt_not_its_invoke() {
        // 2 waits on a busy lock from before 1's grant; its attempt that won
        // was sent after it, so 1's write after that is unsafe. Without the
        // attempt's time, 2's grant might have come first.
        let history = |sent: Option<u64>| {
            let mut h = Hist::new();
            h.invoke(2, "acquire"); // 0, t=0: retrying on a busy lock
            h.acquire(1, "a"); // 1, 2: ok at t=20
            let value = sent.map(|t| serde_json::json!({ATTEMPT_SENT: t}));
            h.ok(2, "acquire").token("b").value(value); // 3: 1's lease ran out
            h.write(1, 1); // 4, 5
            run(&h).1
        };
        assert_eq!(indices(&history(Some(25))), vec![vec![5, 3]]);
        assert!(!history(None).found(), "invoked before 1's grant");
        assert!(!history(Some(15)).found(), "sent before 1's grant");
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
        assert!(!u.found(), "{u:?}");
        assert_eq!(o.count, 1, "the holds still overlap");
    }

    #[test]
    fn a_write_after_releasing_is_not_under_a_hold() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.release(1, "a");
        h.acquire(2, "b");
        h.write(1, 1);
        assert!(!run(&h).1.found());
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
        assert!(!run(&h).2.found());
    }

    #[test]
    fn releasing_after_the_other_holder_released_deletes_nothing_of_theirs() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b");
        h.release(2, "b");
        h.release(1, "a");
        assert!(!run(&h).2.found());
    }

    /// Two primaries after a failover, each with its own key: worker 1's
    /// release after worker 2's grant deleted worker 1's key on n1, as the
    /// observer saw, not worker 2's on n3. An overlap, no foreign release.
    #[test]
    fn a_release_the_observer_saw_delete_its_own_key_is_not_foreign() {
        let by = |w: &str| serde_json::json!({ "by": w });
        let mut h = Hist::new();
        h.acquire(1, "a"); // 0, 1
        h.key(key::SET, "n1", "a").value(by("worker-1")); // 2
        h.acquire(2, "b"); // 3, 4
        h.key(key::SET, "n3", "b").value(by("worker-2")); // 5
        h.release(1, "a"); // 6, 7
        h.key(key::DELETED, "n1", "a").value(by("worker-1")); // 8
        let (o, _, f) = run(&h);
        assert!(o.found(), "two holders at once");
        assert!(!f.found(), "{:?}", indices(&f));
        // The same release seen deleting worker 2's key (a DEL with no
        // token check) is foreign; so is one the observer says nothing of.
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.key(key::SET, "n1", "a").value(by("worker-1"));
        h.key(key::EXPIRED, "n1", "a");
        h.acquire(2, "b");
        h.key(key::SET, "n1", "b").value(by("worker-2"));
        h.release(1, "a"); // 7, 8
        h.key(key::DELETED, "n1", "b").value(by("worker-1"));
        assert_eq!(indices(&run(&h).2), vec![vec![8, 5]]);
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.key(key::SET, "n1", "a").value(by("worker-1"));
        h.acquire(2, "b");
        h.release(1, "a");
        assert!(run(&h).2.found(), "nothing seen: judged on the history");
    }

    #[test]
    fn a_release_that_deleted_a_lock_granted_during_it_is_caught_by_the_next_grant() {
        let mut h = Hist::new();
        h.acquire(1, "a"); // 0, 1
        h.invoke(1, "release").token("a"); // 2: GET saw "a", then paused
        h.acquire(2, "b"); // 3, 4: a's key expired meanwhile
        h.ok(1, "release").token("a"); // 5: the DEL took b's key
        h.acquire(3, "c"); // 6, 7: granted while b still holds
        let (o, _, f) = run(&h);
        assert_eq!(indices(&f), vec![vec![5, 4, 7]]);
        assert!(o.found(), "b and c overlap too");
    }

    #[test]
    fn a_release_during_which_a_lock_was_granted_but_not_lost_is_not_foreign() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a"); // deleted a's key at once; its reply was slow
        h.acquire(2, "b");
        h.ok(1, "release").token("a");
        h.release(2, "b"); // b kept its lock to the end
        h.acquire(3, "c");
        h.release(3, "c");
        let (o, _, f) = run(&h);
        assert!(!f.found() && !o.found(), "{f:?} {o:?}");
    }

    #[test]
    fn a_grant_reported_late_is_an_overlap_but_makes_nothing_else_unsafe() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a"); // frozen mid-acquisition
        h.acquire(0, "b"); // a's key expired meanwhile
        h.ok(1, "acquire").token("a"); // reported after b's grant
        h.write(0, 1);
        h.release(0, "b"); // b's own key: not foreign
        let (o, u, f) = run(&h);
        assert!(o.found(), "both believed they held it");
        assert!(!u.found() && !f.found(), "{u:?} {f:?}");
    }

    #[test]
    fn a_lock_lost_to_its_own_holders_pause_is_not_blamed_on_a_release() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a"); // deleted a's key; its reply was slow
        h.acquire(2, "b"); // granted before a's release ok was recorded
        h.ok(1, "release").token("a");
        h.nemesis("start-pause")
            .value(serde_json::json!({"process": 2, "at": "checked"}));
        h.acquire(3, "c"); // b's key expired under the pause
        let (o, _, f) = run(&h);
        assert!(o.found(), "b and c overlap");
        assert!(!f.found(), "{f:?}");
    }

    #[test]
    fn a_write_sent_after_the_holders_key_was_seen_gone_is_unsafe() {
        use crate::history::key;
        let history = |observed: bool, how: &str| {
            let mut h = Hist::new();
            h.acquire(1, "a"); // 1
            if observed {
                h.key(key::SET, "n1", "a");
                h.key(how, "n1", "a"); // 3: no one else acquires
            }
            h.write(1, 1); // ok at 5 (3 without the observer)
            h.release(1, "a");
            run(&h).1
        };
        assert_eq!(indices(&history(true, key::EXPIRED)), vec![vec![5, 3]]);
        assert_eq!(indices(&history(true, key::DELETED)), vec![vec![5, 3]]);
        assert!(!history(false, key::EXPIRED).found(), "nothing shows it");
    }

    #[test]
    fn a_key_seen_gone_only_after_the_write_was_sent_makes_it_not_unsafe() {
        use crate::history::key;
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.key(key::SET, "n1", "a");
        h.invoke(1, "write").value(1);
        h.key(key::EXPIRED, "n1", "a"); // while the write was in flight
        h.ok(1, "write").value(1);
        assert!(!run(&h).1.found());
    }

    #[test]
    fn a_redlock_retry_that_reuses_its_token_owns_the_lock_once_granted() {
        // Seen in a no-fault redlock run: the failed rounds of one acquire
        // set and then unlocked n3, n4 and n5 with the token the winning
        // round reused; the winning round's sets on n4 and n5 were reported
        // just after the grant. Its read is no unsafe action.
        use crate::history::key;
        let by = serde_json::json!({"by": "worker-1"});
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        for node in ["n3", "n4", "n5"] {
            h.key(key::SET, node, "a").value(by.clone());
            h.key(key::DELETED, node, "a").value(by.clone());
        }
        h.key(key::SET, "n1", "a").value(by.clone());
        h.key(key::SET, "n2", "a").value(by.clone());
        h.ok(1, "acquire").token("a");
        h.read(1, 0);
        h.key(key::SET, "n4", "a").value(by.clone());
        h.key(key::SET, "n5", "a").value(by.clone());
        h.write(1, 1);
        assert!(!run(&h).1.found(), "{:?}", run(&h).1);
        // Gone from a majority after the grant, it is unsafe again.
        h.key(key::EXPIRED, "n1", "a");
        h.key(key::EXPIRED, "n2", "a");
        h.key(key::EXPIRED, "n4", "a");
        h.write(1, 2);
        assert!(run(&h).1.found());
    }

    #[test]
    fn another_clients_delete_between_the_winning_set_and_the_grant_is_the_holds_loss() {
        use crate::history::key;
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.key(key::SET, "n1", "a")
            .value(serde_json::json!({"by": "worker-1"}));
        // A stale holder's plain DEL, before worker 1 records its grant.
        h.key(key::DELETED, "n1", "a")
            .value(serde_json::json!({"by": "worker-2"})); // 2
        h.ok(1, "acquire").token("a");
        h.write(1, 1); // ok at 5
        assert_eq!(indices(&run(&h).1), vec![vec![5, 2]]);
    }

    /// A library that retries with one value (node-redlock): its first
    /// set's reply lost, the key expired while it retried, then it set the
    /// key again and won; that set's report comes after the grant and the
    /// read. The loss before the grant is void, not an unsafe read.
    #[test]
    fn a_loss_before_the_grant_undone_by_the_winning_sets_late_report_is_no_unsafe_action() {
        use crate::history::key;
        let by = serde_json::json!({"by": "worker-1"});
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.key(key::SET, "n1", "v").value(by.clone());
        h.key(key::EXPIRED, "n1", "v");
        h.ok(1, "acquire")
            .value(serde_json::json!({"client_token": "v"}));
        h.read(1, 0);
        h.key(key::SET, "n1", "v").value(by.clone());
        h.write(1, 1);
        assert!(!run(&h).1.found(), "{:?}", run(&h).1);
        // With no set reported after the read, the loss stands, and is
        // recorded once the late report's wait is over.
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.key(key::SET, "n1", "v").value(by.clone());
        h.key(key::EXPIRED, "n1", "v"); // 2
        h.ok(1, "acquire")
            .value(serde_json::json!({"client_token": "v"}));
        h.read(1, 0); // ok at 5
        assert_eq!(indices(&run(&h).1), vec![vec![5, 2]]);
        let m: Mutex = feed(&h.build());
        assert_eq!(m.unsafe_action.count, 0, "recorded before its wait");
        h.sleep(LATE_SET + 1);
        h.nemesis("start-pause");
        let m: Mutex = feed(&h.build());
        assert_eq!(m.unsafe_action.count, 1, "not recorded after its wait");
    }

    #[test]
    fn a_write_unsafe_by_a_grant_and_by_the_observer_counts_once() {
        use crate::history::key;
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1
        h.key(key::SET, "n1", "a");
        h.key(key::EXPIRED, "n1", "a");
        h.acquire(2, "b"); // 5
        h.key(key::SET, "n1", "b");
        h.write(1, 1); // ok at 8
        let (_, u, _) = run(&h);
        assert_eq!(indices(&u), vec![vec![8, 5]], "the grant rule's witness");
    }

    #[test]
    fn an_adapters_key_holds_the_library_token() {
        use crate::history::key;
        let mut h = Hist::new();
        h.invoke(1, "acquire");
        h.ok(1, "acquire")
            .token("a")
            .value(serde_json::json!({CLIENT_TOKEN: "lib-a"}));
        h.key(key::SET, "n1", "lib-a");
        h.key(key::EXPIRED, "n1", "lib-a"); // 3
        h.write(1, 1); // ok at 5
        assert_eq!(indices(&run(&h).1), vec![vec![5, 3]]);
    }

    #[test]
    fn overlaps_are_labelled_by_how_the_first_holders_key_went() {
        use crate::history::key;
        use crate::observed::{KEY_LOST, LEASE_EXPIRED};
        let mut h = Hist::new();
        h.acquire(1, "a"); // 1, paused from here on
        h.key(key::SET, "n1", "a");
        h.key(key::EXPIRED, "n1", "a");
        h.acquire(2, "b"); // 5: a's lease expired under its live holder
        h.key(key::SET, "n1", "b"); // then n1 restarts empty: b's key is lost
        h.acquire(3, "c"); // 8
        h.key(key::SET, "n1", "c");
        h.acquire(4, "d"); // 11: c's key was never seen to go either
        let m: Mutex = feed(&h.build());
        let overlap = Box::new(m).finish().anomalies.remove(0).1;
        assert_eq!(
            overlap.examples,
            [[1, 5], [1, 8], [5, 8], [1, 11], [5, 11], [8, 11]]
        );
        let (lease, lost) = (Some(LEASE_EXPIRED.to_string()), Some(KEY_LOST.to_string()));
        assert_eq!(
            overlap.example_labels,
            [&lease, &lease, &lost, &lease, &lost, &lost].map(Clone::clone)
        );
        assert_eq!(
            overlap.labels,
            [(LEASE_EXPIRED.into(), 3), (KEY_LOST.into(), 3)].into()
        );
        // Without the observer: the same overlaps, no labels.
        let mut bare = h.build();
        bare.events.retain(|e| !e.process.is_observer());
        let m: Mutex = feed(&bare);
        let overlap = Box::new(m).finish().anomalies.remove(0).1;
        assert_eq!(overlap.count, 6);
        assert!(overlap.labels.is_empty() && overlap.example_labels.is_empty());
    }

    #[test]
    fn a_key_seen_gone_after_its_hold_ended_still_labels_the_overlap() {
        use crate::history::key;
        use crate::observed::LEASE_EXPIRED;
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.key(key::SET, "n1", "a");
        h.acquire(2, "b"); // before the observer's word on a's key came in
        h.release(1, "a"); // a's hold ends, its key's fate not yet seen
        h.key(key::EXPIRED, "n1", "a");
        h.key(key::SET, "n1", "b");
        h.release(2, "b"); // b's hold ends settled: in no overlap as first
        h.key(key::DELETED, "n1", "b");
        let m: Mutex = feed(&h.build());
        let overlap = Box::new(m).finish().anomalies.remove(0).1;
        assert_eq!(overlap.labels, [(LEASE_EXPIRED.into(), 1)].into());
        assert_eq!(overlap.example_labels, [Some(LEASE_EXPIRED.into())]);
    }

    #[test]
    fn released_holds_leave_nothing_behind_for_the_labels() {
        use crate::history::key;
        // Overlapping holds taking turns, as under no-lock; every other
        // round observed.
        let mut h = Hist::new();
        for i in 0..100 {
            let (a, b) = (format!("a{i}"), format!("b{i}"));
            h.acquire(1, &a);
            h.acquire(2, &b);
            if i % 2 == 0 {
                h.key(key::SET, "n1", &a);
                h.key(key::EXPIRED, "n1", &a);
            }
            h.release(1, &a);
            h.release(2, &b);
        }
        let m: Mutex = feed(&h.build());
        assert_eq!(m.overlap.count, 100);
        assert!(m.overlap_tokens.is_empty(), "{:?}", m.overlap_tokens);
        // Each observed token's life (forgotten past `KEPT`), and the
        // examples' tokens, pinned for their labels.
        assert_eq!(m.keys.remembered(), 50 + MAX_EXAMPLES);
        let overlap = Box::new(m).finish().anomalies.remove(0).1;
        assert_eq!(overlap.labels.values().sum::<u64>(), 50);
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
