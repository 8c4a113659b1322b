//! Histories of a correct lock, generated from a seed: workers take turns
//! (acquire → read → write → release) with some outcomes unknown, fencing
//! tokens rising with each grant. For
//! benchmarks and property tests; every checker must find nothing in them.
//!
//! [`valid_history`] is the plain shape (one contender a cycle, 2% of
//! releases `info` in the benchmarks); [`contended_history`] is many
//! workers contending at once, with lost replies on acquires;
//! [`live::live_history`] is workers that go on under the same process id
//! after a lost reply, with expiries and crashes mid-hold.

use crate::{error, f, Event, History, OpType, Process, ATTEMPT_SENT};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

pub mod live;

/// A small deterministic generator (SplitMix64), so this pure crate needs no
/// RNG dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// `cycles` lock cycles by `processes` workers, one holder at a time; while a
/// worker holds the lock the others' acquires fail. `info_per_mille` of the
/// releases are `info` (the worker then goes on under a new process id).
pub fn valid_history(seed: u64, processes: u64, cycles: u64, info_per_mille: u64) -> History {
    History::new(valid_events(seed, processes, cycles, info_per_mille).collect())
}

/// The events of [`valid_history`], one at a time in file order, without
/// holding the history: a history of any length streams out in little
/// memory (a cycle's events at most).
pub fn valid_events(seed: u64, processes: u64, cycles: u64, info_per_mille: u64) -> ValidEvents {
    ValidEvents {
        rng: Rng(seed),
        gaps: Rng(seed ^ 0x5EED),
        time: 0,
        written: 0,
        ids: (0..processes).collect(),
        counter: 0,
        cycle: 0,
        cycles,
        info_per_mille,
        pending: VecDeque::new(),
        ended: false,
    }
}

/// The iterator [`valid_events`] returns.
pub struct ValidEvents {
    rng: Rng,
    gaps: Rng,
    time: u64,
    written: u64,
    ids: Vec<u64>,
    counter: i64,
    cycle: u64,
    cycles: u64,
    info_per_mille: u64,
    /// The current cycle's events not yet handed out.
    pending: VecDeque<Event>,
    ended: bool,
}

impl ValidEvents {
    fn push(&mut self, p: u64, kind: OpType, op: &str) -> &mut Event {
        self.time += 1 + self.gaps.next() % 1_000;
        let mut e = Event::new(self.time, Process::Client(p), kind, op);
        e.index = self.written;
        self.written += 1;
        self.pending.push_back(e);
        self.pending.back_mut().expect("just pushed")
    }

    fn cycle(&mut self, cycle: u64) {
        let processes = self.ids.len() as u64;
        let w = (cycle % processes) as usize;
        let p = self.ids[w];
        let token = format!("{p}-{cycle}");
        // A contender tries and is refused while the holder works.
        let other = self.ids[(w + 1) % processes as usize];
        self.push(p, OpType::Invoke, f::ACQUIRE).token = Some(token.clone());
        let fence = Some(cycle + 1);
        let e = self.push(p, OpType::Ok, f::ACQUIRE);
        e.token = Some(token.clone());
        e.fence = fence;
        if processes > 1 {
            self.push(other, OpType::Invoke, f::ACQUIRE);
        }
        self.push(p, OpType::Invoke, f::READ).fence = fence;
        let counter = self.counter;
        let e = self.push(p, OpType::Ok, f::READ);
        e.value = counter.into();
        e.fence = fence;
        self.counter += 1;
        let counter = self.counter;
        for kind in [OpType::Invoke, OpType::Ok] {
            let e = self.push(p, kind, f::WRITE);
            e.value = counter.into();
            e.fence = fence;
        }
        self.push(p, OpType::Invoke, f::RELEASE).token = Some(token.clone());
        let outcome = if self.rng.chance(self.info_per_mille) {
            OpType::Info
        } else {
            OpType::Ok
        };
        self.push(p, outcome, f::RELEASE).token = Some(token);
        if processes > 1 {
            self.push(other, OpType::Fail, f::ACQUIRE).error = Some("lock-busy".into());
        }
        if outcome == OpType::Info {
            self.ids[w] += processes;
        }
    }

    /// The harness's final read of the counter.
    fn end(&mut self) {
        self.push(0, OpType::Invoke, f::READ).process = Process::harness();
        let counter = self.counter;
        let e = self.push(0, OpType::Ok, f::READ);
        e.process = Process::harness();
        e.value = counter.into();
    }
}

impl Iterator for ValidEvents {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if self.pending.is_empty() {
            if self.cycle < self.cycles {
                self.cycle += 1;
                self.cycle(self.cycle - 1);
            } else if !self.ended {
                self.ended = true;
                self.end();
            }
        }
        self.pending.pop_front()
    }
}

/// `h` with the first worker whose release reply was lost back at the end
/// under its old process id, taking the lock and releasing it: still a
/// correct lock's history, and one in which a worker that seemed gone acts
/// again (a streamed check cannot settle what it did before in pieces).
/// `None` if no release reply was lost.
pub fn with_lost_worker_back(h: &History) -> Option<History> {
    let lost = h
        .events
        .iter()
        .find(|e| e.f == f::RELEASE && e.kind == OpType::Info)?;
    let mut events = h.events.clone();
    let mut time = events.iter().map(|e| e.time).max().unwrap_or(0);
    for (kind, op) in [
        (OpType::Invoke, f::ACQUIRE),
        (OpType::Ok, f::ACQUIRE),
        (OpType::Invoke, f::RELEASE),
        (OpType::Ok, f::RELEASE),
    ] {
        time += 1_000;
        let mut e = Event::new(time, lost.process.clone(), kind, op);
        e.token = Some("back".into());
        e.index = events.len() as u64;
        events.push(e);
    }
    Some(History::new(events))
}

/// The shape of a [`contended_history`].
#[derive(Clone, Copy, Debug)]
pub struct Contended {
    pub processes: u64,
    /// Lock ops to invoke (acquires and releases); holders still release at
    /// the end, so a history may have a few more.
    pub lock_ops: u64,
    /// Of the acquires, how many per mille lose a reply and end `info`.
    pub info_acquire_per_mille: u64,
}

/// What a worker does next, at the time it is scheduled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Next {
    Acquire,
    /// One attempt reaches the lock: granted, refused, or its reply lost.
    Attempt,
    Acquired(Ended),
    Read,
    ReadDone,
    Write,
    WriteDone,
    Release,
    ApplyRelease,
    Released,
}

/// How an acquire op ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ended {
    /// Granted to the attempt sent at this time.
    Granted(u64),
    Refused,
    Lost,
}

/// One worker's acquire op in flight.
#[derive(Clone, Copy, Default)]
struct Acquiring {
    invoked: u64,
    attempts: u32,
    /// The attempt whose reply is lost, or 0 if none is.
    lost_at: u32,
}

const MS: u64 = 1_000_000;
const TTL: u64 = 2_000 * MS;
const ACQUIRE_TIMEOUT: u64 = 2 * TTL;

/// `shape.processes` workers contending for one lock at once, shaped like
/// lockstorm's worker loop with its default timing (TTL 2 s, work 200 ms,
/// acquire timeout 4 s): each acquire op retries a busy lock every 10–50 ms
/// within the op until granted or timed out, so an acquire spans many other
/// holds; a granted worker reads, works, writes and releases. Every attempt
/// and release takes effect at one instant inside its op, in a simulation of
/// the lock.
///
/// An acquire that loses a reply (the `lose-reply` fault) ends `info` (a
/// `timeout`) and its worker goes on under a new process id (Jepsen's
/// convention), never releasing its token. The lost attempt was refused, or,
/// if the lock was free, granted: then the key stays, held by nobody who
/// knows it, until its TTL runs out, and every attempt meanwhile is refused.
///
/// Valid by construction for every checker: in time order the certain ops
/// grant and release one holder at a time, and an `info` acquire may be
/// left out (the linearizability model has no TTL, but with no certain op
/// acting while a lost grant's key lives, leaving it out is the same).
pub fn contended_history(seed: u64, shape: Contended) -> History {
    let mut lock = Contention::new(seed, shape);
    // (time, worker, what): events come out in time order; the worker breaks
    // ties, so a seed always gives the same history.
    let mut queue: BinaryHeap<Reverse<(u64, usize, Next)>> = BinaryHeap::new();
    for w in 0..lock.ids.len() {
        queue.push(Reverse((1 + lock.rng.next() % MS, w, Next::Acquire)));
    }
    while let Some(Reverse((time, w, next))) = queue.pop() {
        // A round trip to the lock, in ns: drawn for every step, so the
        // draws after it stay where a seed puts them.
        let trip = lock.rng.between(50_000, 500_000);
        if next == Next::Acquire && lock.lock_ops >= shape.lock_ops {
            continue;
        }
        let (then, after) = lock.step(time, w, next, trip);
        queue.push(Reverse((time + after.max(1), w, then)));
    }
    lock.finish()
}

/// A [`contended_history`] being simulated: the workers, the lock and the
/// counter, and the events so far.
struct Contention {
    shape: Contended,
    rng: Rng,
    events: Vec<Event>,
    /// Per worker, its process id now and its cycle under that id.
    ids: Vec<u64>,
    cycles: Vec<u64>,
    acquiring: Vec<Acquiring>,
    holder: Option<usize>,
    /// A grant whose reply was lost holds the key until then.
    lost_key_until: u64,
    grants: u64,
    counter: i64,
    lock_ops: u64,
}

impl Contention {
    fn new(seed: u64, shape: Contended) -> Self {
        let n = shape.processes as usize;
        Contention {
            shape,
            rng: Rng(seed),
            events: Vec::new(),
            ids: (0..shape.processes).collect(),
            cycles: vec![0; n],
            acquiring: vec![Acquiring::default(); n],
            holder: None,
            lost_key_until: 0,
            grants: 0,
            counter: 0,
            lock_ops: 0,
        }
    }

    /// Worker `w`'s token for its current acquire.
    fn token(&self, w: usize) -> Option<String> {
        Some(format!("{}-{}", self.ids[w], self.cycles[w]))
    }

    /// Does worker `w`'s `next` at `time`: what it does after, and when
    /// (ns from now).
    fn step(&mut self, time: u64, w: usize, next: Next, trip: u64) -> (Next, u64) {
        let p = self.ids[w];
        let fence = Some(self.grants);
        match next {
            Next::Acquire => {
                self.lock_ops += 1;
                emit(&mut self.events, time, p, OpType::Invoke, f::ACQUIRE).token = self.token(w);
                let lost = self.rng.chance(self.shape.info_acquire_per_mille);
                self.acquiring[w] = Acquiring {
                    invoked: time,
                    attempts: 0,
                    lost_at: if lost {
                        1 + (self.rng.next() % 4) as u32
                    } else {
                        0
                    },
                };
                (Next::Attempt, trip / 2)
            }
            Next::Attempt => self.attempt(time, w, trip),
            Next::Acquired(ended) => self.acquired(time, w, ended, trip),
            Next::Read => {
                emit(&mut self.events, time, p, OpType::Invoke, f::READ).fence = fence;
                (Next::ReadDone, trip)
            }
            Next::ReadDone => {
                let e = emit(&mut self.events, time, p, OpType::Ok, f::READ);
                (e.fence, e.value) = (fence, self.counter.into());
                // The work under the lock.
                (Next::Write, self.rng.between(150 * MS, 250 * MS))
            }
            Next::Write | Next::WriteDone => {
                let kind = [OpType::Invoke, OpType::Ok][usize::from(next == Next::WriteDone)];
                let e = emit(&mut self.events, time, p, kind, f::WRITE);
                (e.fence, e.value) = (fence, (self.counter + 1).into());
                if next == Next::Write {
                    (Next::WriteDone, trip)
                } else {
                    self.counter += 1;
                    (Next::Release, trip / 10)
                }
            }
            Next::Release => {
                self.lock_ops += 1;
                emit(&mut self.events, time, p, OpType::Invoke, f::RELEASE).token = self.token(w);
                (Next::ApplyRelease, trip / 2)
            }
            Next::ApplyRelease => {
                self.holder = None;
                (Next::Released, trip / 2)
            }
            Next::Released => {
                emit(&mut self.events, time, p, OpType::Ok, f::RELEASE).token = self.token(w);
                self.cycles[w] += 1;
                (Next::Acquire, trip / 10)
            }
        }
    }

    /// One attempt of worker `w`'s acquire reaches the lock.
    fn attempt(&mut self, time: u64, w: usize, trip: u64) -> (Next, u64) {
        self.acquiring[w].attempts += 1;
        let a = self.acquiring[w];
        let free = self.holder.is_none() && time >= self.lost_key_until;
        // A doomed op loses the reply to its first attempt that is
        // granted, or to its `lost_at`th, whichever comes first.
        let lose = a.lost_at != 0 && (free || a.attempts == a.lost_at);
        let timed_out = time - a.invoked >= ACQUIRE_TIMEOUT;
        match (lose, free) {
            (true, true) => {
                self.lost_key_until = time + TTL;
                (Next::Acquired(Ended::Lost), trip)
            }
            (true, false) => (Next::Acquired(Ended::Lost), trip),
            (false, true) => {
                self.holder = Some(w);
                self.grants += 1;
                // Sent half a trip ago, but not before the op began.
                let sent = time.saturating_sub(trip / 2).max(a.invoked);
                (Next::Acquired(Ended::Granted(sent)), trip / 2)
            }
            (false, false) if timed_out => (Next::Acquired(Ended::Refused), trip / 2),
            (false, false) => (Next::Attempt, self.rng.between(10 * MS, 50 * MS)),
        }
    }

    /// Worker `w`'s acquire op completes as it `ended`.
    fn acquired(&mut self, time: u64, w: usize, ended: Ended, trip: u64) -> (Next, u64) {
        let kind = match ended {
            Ended::Granted(_) => OpType::Ok,
            Ended::Refused => OpType::Fail,
            Ended::Lost => OpType::Info,
        };
        let (token, fence) = (self.token(w), Some(self.grants));
        let e = emit(&mut self.events, time, self.ids[w], kind, f::ACQUIRE);
        e.token = token;
        match ended {
            Ended::Granted(sent) => {
                e.fence = fence;
                e.value = serde_json::json!({ ATTEMPT_SENT: sent });
                (Next::Read, trip)
            }
            Ended::Refused => {
                e.error = Some(error::LOCK_BUSY.into());
                self.cycles[w] += 1;
                (Next::Acquire, self.rng.between(10 * MS, 300 * MS))
            }
            Ended::Lost => {
                e.error = Some(error::TIMEOUT.into());
                self.ids[w] += self.shape.processes;
                self.cycles[w] = 0;
                (Next::Acquire, self.rng.between(10 * MS, 300 * MS))
            }
        }
    }

    /// The history: the events, and the harness's final read of the counter.
    fn finish(mut self) -> History {
        let end = self.events.last().map_or(0, |e| e.time);
        for (k, kind) in [OpType::Invoke, OpType::Ok].into_iter().enumerate() {
            let mut e = Event::new(end + 1 + k as u64, Process::harness(), kind, f::READ);
            e.index = self.events.len() as u64;
            if kind == OpType::Ok {
                e.value = self.counter.into();
            }
            self.events.push(e);
        }
        History::new(self.events)
    }
}

/// Appends client `p`'s event, numbered next, and hands it back to be filled in.
fn emit<'a>(
    events: &'a mut Vec<Event>,
    time: u64,
    p: u64,
    kind: OpType,
    op: &str,
) -> &'a mut Event {
    let mut e = Event::new(time, Process::Client(p), kind, op);
    e.index = events.len() as u64;
    events.push(e);
    events.last_mut().expect("just pushed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_history() {
        assert_eq!(valid_history(7, 3, 50, 100), valid_history(7, 3, 50, 100));
        assert_ne!(valid_history(7, 3, 50, 100), valid_history(8, 3, 50, 100));
    }

    #[test]
    fn a_contended_history_is_seeded_and_never_releases_a_lost_reply() {
        let shape = Contended {
            processes: 4,
            lock_ops: 400,
            info_acquire_per_mille: 200,
        };
        assert_eq!(contended_history(3, shape), contended_history(3, shape));
        assert_ne!(contended_history(3, shape), contended_history(4, shape));
        let h = contended_history(3, shape);
        let lost: Vec<usize> = (0..h.events.len())
            .filter(|&i| h.events[i].kind == OpType::Info)
            .collect();
        assert!(!lost.is_empty());
        for i in lost {
            // Its worker went on under a new id: the old one never acts
            // again, and nobody releases the token.
            let e = &h.events[i];
            let later = &h.events[i + 1..];
            assert!(later
                .iter()
                .all(|l| l.process != e.process && l.token != e.token));
        }
    }
}
