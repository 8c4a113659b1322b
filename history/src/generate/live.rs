//! Histories whose workers go on after a timeout under the same process id,
//! as most clients and other harnesses record them: an acquire whose reply
//! was lost ends `info`, and the same worker releases next (`ok` if the
//! grant had taken effect, `fail not-held` if not). With leases that run out
//! mid-hold, holders that crash, and release replies lost as well.
//!
//! A simulation of a correct lock with a TTL: every acquire and release
//! takes effect at one instant inside its op, so every checker must find
//! the history linearizable. A lease that ran out shows only in its
//! holder's `not-held` refusal, so that answer is never lost. Written from the shape's description, not
//! fitted to the search, so it tests what the search was not tuned on.

use super::{emit, Rng, MS, TTL};
use crate::{error, f, Event, History, OpType, Process};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The shape of a [`live_history`]; rates are per mille.
#[derive(Clone, Copy, Debug)]
pub struct Live {
    pub processes: u64,
    /// Lock ops to invoke; holders still release at the end.
    pub lock_ops: u64,
    /// Acquires whose reply is lost: `info`, and the worker releases next.
    pub info_acquire: u64,
    /// Releases whose reply is lost: `info`, and the worker goes on.
    pub info_release: u64,
    /// Holds that outlive their lease: released after the TTL, `not-held`.
    pub expiry: u64,
    /// Holders that crash (a `crash` event); their key lives to its TTL and
    /// the worker goes on under a new process id.
    pub crash: u64,
    /// Whether ops carry tokens; without, an owner is its process.
    pub tokens: bool,
}

impl Live {
    /// The shape: 20 workers, a fifth of the acquires `info`.
    pub fn lost_acquires(lock_ops: u64, tokens: bool) -> Self {
        Live {
            processes: 20,
            lock_ops,
            info_acquire: 200,
            info_release: 0,
            expiry: 0,
            crash: 0,
            tokens,
        }
    }
}

/// What a worker does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Next {
    Acquire,
    ApplyAcquire,
    /// The acquire's answer reaches the worker: granted, and lost.
    AcquireReply(bool, bool),
    Release,
    ApplyRelease,
    /// The release's answer: released, and lost.
    ReleaseReply(bool, bool),
    Crash,
}

/// How long a lost reply keeps the worker waiting.
const TIMEOUT: u64 = 1_000 * MS;

/// The lock as its server sees it.
#[derive(Default)]
struct Lock {
    /// The holding worker and its cycle, and when its lease runs out.
    holder: Option<((usize, u64), u64)>,
}

impl Lock {
    fn free(&self, now: u64) -> bool {
        self.holder.is_none_or(|(_, until)| now >= until)
    }
}

/// A seeded history of [`Live`]'s shape.
pub fn live_history(seed: u64, shape: Live) -> History {
    let mut rng = Rng(seed);
    let n = shape.processes as usize;
    let mut events: Vec<Event> = Vec::new();
    let mut ids: Vec<u64> = (0..shape.processes).collect();
    let mut cycles = vec![0u64; n];
    // Whether the worker's latest acquire was granted, known or not.
    let mut was_granted = vec![false; n];
    let mut queue: BinaryHeap<Reverse<(u64, usize, Next)>> = BinaryHeap::new();
    for w in 0..n {
        queue.push(Reverse((1 + rng.next() % MS, w, Next::Acquire)));
    }
    let mut lock = Lock::default();
    let mut lock_ops = 0u64;
    while let Some(Reverse((now, w, next))) = queue.pop() {
        let p = ids[w];
        let me = (w, cycles[w]);
        let token = shape.tokens.then(|| format!("{p}-{}", cycles[w]));
        let trip = rng.between(50_000, 500_000);
        let (then, after) = match next {
            Next::Acquire if lock_ops >= shape.lock_ops => continue,
            Next::Acquire => {
                lock_ops += 1;
                emit(&mut events, now, p, OpType::Invoke, f::ACQUIRE).token = token;
                (Next::ApplyAcquire, trip / 2)
            }
            Next::ApplyAcquire => {
                let granted = lock.free(now);
                if granted {
                    lock.holder = Some((me, now + TTL));
                }
                was_granted[w] = granted;
                let lost = rng.chance(shape.info_acquire);
                let wait = if lost { TIMEOUT } else { trip / 2 };
                (Next::AcquireReply(granted, lost), wait)
            }
            Next::AcquireReply(granted, lost) => {
                let e = answer(&mut events, now, p, f::ACQUIRE, granted, lost);
                e.token = token;
                match e.kind {
                    // Not knowing, it releases what it may hold.
                    OpType::Info => (Next::Release, rng.between(MS, 300 * MS)),
                    OpType::Fail => {
                        cycles[w] += 1;
                        (Next::Acquire, rng.between(10 * MS, 300 * MS))
                    }
                    _ if rng.chance(shape.crash) => (Next::Crash, rng.between(10 * MS, 200 * MS)),
                    _ if rng.chance(shape.expiry) => {
                        (Next::Release, TTL + rng.between(MS, 500 * MS))
                    }
                    _ => (Next::Release, rng.between(150 * MS, 250 * MS)),
                }
            }
            Next::Release => {
                lock_ops += 1;
                emit(&mut events, now, p, OpType::Invoke, f::RELEASE).token = token;
                (Next::ApplyRelease, trip / 2)
            }
            Next::ApplyRelease => {
                let held = lock.holder.is_some_and(|(h, _)| h == me) && !lock.free(now);
                if held {
                    lock.holder = None;
                }
                // A lease that ran out shows only in this refusal: lost,
                // nothing would say so, and no model without a TTL could
                // explain the next grant.
                let ran_out = !held && was_granted[w];
                let lost = !ran_out && rng.chance(shape.info_release);
                let wait = if lost { TIMEOUT } else { trip / 2 };
                (Next::ReleaseReply(held, lost), wait)
            }
            Next::ReleaseReply(released, lost) => {
                answer(&mut events, now, p, f::RELEASE, released, lost).token = token;
                cycles[w] += 1;
                (Next::Acquire, rng.between(10 * MS, 300 * MS))
            }
            Next::Crash => {
                // The key lives on to its TTL; the worker is replaced.
                let mut e = Event::new(now, Process::harness(), OpType::Info, f::CRASH);
                e.index = events.len() as u64;
                e.value = serde_json::json!({ "process": p });
                e.token = token;
                events.push(e);
                ids[w] += shape.processes;
                cycles[w] = 0;
                (Next::Acquire, rng.between(100 * MS, 300 * MS))
            }
        };
        queue.push(Reverse((now + after.max(1), w, then)));
    }
    History::new(events)
}

/// The completion of worker `p`'s op: done (`ok`), refused (`fail`, with the
/// op's refusal), or its reply lost (`info`, a timeout).
fn answer<'a>(
    events: &'a mut Vec<Event>,
    now: u64,
    p: u64,
    op: &str,
    done: bool,
    lost: bool,
) -> &'a mut Event {
    let (kind, err) = match (done, lost) {
        (_, true) => (OpType::Info, Some(error::TIMEOUT)),
        (true, false) => (OpType::Ok, None),
        (false, false) if op == f::ACQUIRE => (OpType::Fail, Some(error::LOCK_BUSY)),
        (false, false) => (OpType::Fail, Some(error::NOT_HELD)),
    };
    let e = emit(events, now, p, kind, op);
    e.error = err.map(Into::into);
    e
}

/// The same history with one refused acquire turned `ok` inside another
/// worker's certain hold (granted, and released `ok` after it): two holders
/// at once, which every reading of the history must call a violation.
/// `None` if the history has no such acquire.
pub fn with_overlap(h: &History) -> Option<History> {
    let ev = &h.events;
    // Certain holds: (granted at, released from) per token-or-process.
    let owner = |e: &Event| {
        e.token
            .clone()
            .unwrap_or_else(|| format!("{:?}", e.process))
    };
    let mut holds: Vec<(u64, u64)> = Vec::new();
    let mut granted: std::collections::HashMap<String, u64> = Default::default();
    for (i, e) in ev.iter().enumerate() {
        match (e.f.as_str(), e.kind) {
            (f::ACQUIRE, OpType::Ok) => {
                granted.insert(owner(e), e.time);
            }
            (f::RELEASE, OpType::Invoke) => {
                let ok = ev[i + 1..]
                    .iter()
                    .find(|c| c.process == e.process && c.f == f::RELEASE)
                    .is_some_and(|c| c.kind == OpType::Ok);
                if let (true, Some(from)) = (ok, granted.remove(&owner(e))) {
                    holds.push((from, e.time));
                }
            }
            _ => {}
        }
    }
    // A certain hold's span is its own: sorted by start, a refusal's
    // holder is the last hold that began before the refused acquire did.
    holds.sort_unstable();
    let mut invoked: std::collections::HashMap<&Process, u64> = Default::default();
    let refused = (0..ev.len()).find(|&i| {
        let e = &ev[i];
        if e.kind == OpType::Invoke {
            invoked.insert(&e.process, e.time);
            return false;
        }
        let Some(&from) = invoked.get(&e.process) else {
            return false;
        };
        let before = holds.partition_point(|&(a, _)| a < from);
        let inside = before > 0 && e.time < holds[before - 1].1;
        e.f == f::ACQUIRE && e.kind == OpType::Fail && inside
    })?;
    let mut events = ev.clone();
    events[refused].kind = OpType::Ok;
    events[refused].error = None;
    Some(History::new(events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(tokens: bool) -> Live {
        Live {
            processes: 5,
            lock_ops: 2_000,
            info_acquire: 200,
            info_release: 100,
            expiry: 50,
            crash: 50,
            tokens,
        }
    }

    #[test]
    fn it_is_seeded_and_has_every_outcome_it_promises() {
        let h = live_history(1, shape(true));
        assert_eq!(h, live_history(1, shape(true)));
        assert_ne!(h, live_history(2, shape(true)));
        let count = |f: &str, kind: OpType, err: Option<&str>| {
            h.events
                .iter()
                .filter(|e| e.f == f && e.kind == kind && e.error.as_deref() == err)
                .count()
        };
        assert!(count(f::ACQUIRE, OpType::Info, Some(error::TIMEOUT)) > 100);
        assert!(count(f::RELEASE, OpType::Info, Some(error::TIMEOUT)) > 20);
        assert!(count(f::RELEASE, OpType::Fail, Some(error::NOT_HELD)) > 20);
        assert!(count(f::CRASH, OpType::Info, None) > 2);
        assert!(count(f::RELEASE, OpType::Ok, None) > 100);
        assert!(h.events.windows(2).all(|w| w[0].time <= w[1].time));
    }

    #[test]
    fn a_worker_keeps_its_id_after_a_lost_reply_and_releases_next() {
        let h = live_history(3, shape(false));
        assert!(h.events.iter().all(|e| e.token.is_none()));
        let lost = h
            .events
            .iter()
            .position(|e| e.f == f::ACQUIRE && e.kind == OpType::Info)
            .expect("a lost reply");
        let p = &h.events[lost].process;
        let next = h.events[lost + 1..].iter().find(|e| &e.process == p);
        assert_eq!(
            next.map(|e| (e.f.as_str(), e.kind)),
            Some((f::RELEASE, OpType::Invoke))
        );
    }

    #[test]
    fn an_overlap_turns_a_refusal_inside_a_certain_hold_into_a_grant() {
        let h = live_history(1, shape(true));
        let bad = with_overlap(&h).expect("a refusal inside a hold");
        let changed: Vec<usize> = (0..h.events.len())
            .filter(|&i| h.events[i] != bad.events[i])
            .collect();
        assert_eq!(changed.len(), 1);
        assert_eq!(bad.events[changed[0]].kind, OpType::Ok);
    }
}
