//! What the search keeps of each event it reads, while the history streams
//! past: 32 bytes, with processes and tokens interned, instead of a whole
//! [`Event`] (some 260 bytes with its strings). A 10 M-event history has
//! about 6 M lock events, so this is most of a streamed check's memory.

use crate::history::{error, f, Event, OpType, Process};
use rustc_hash::FxHashMap;

/// No token, or not a crash.
pub const NONE: u32 = u32::MAX;

/// What a kept event does: the two lock ops, or a process's death.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Does {
    Acquire,
    Release,
    Crash,
}

/// One kept event.
#[derive(Clone, Copy, Debug)]
pub struct LockEvent {
    pub time: u64,
    pub index: u64,
    /// Interned [`Process`] (see [`Kept::processes`]).
    pub process: u32,
    /// Interned token, or [`NONE`].
    pub token: u32,
    /// For a crash: the interned process that died; [`NONE`] otherwise
    /// (a crash event that names no process is kept for its pairing only).
    pub dead: u32,
    pub kind: OpType,
    pub does: Does,
    /// A release refused `not-held` in a history that reads it as a lost
    /// hold (see [`Kept::new`]).
    pub lost: bool,
}

/// The kept events, in the order they were fed, and the interning tables.
/// Tokens are only ever compared, so their text is kept once, as a key.
#[derive(Default)]
pub struct Kept {
    pub events: Vec<LockEvent>,
    processes: FxHashMap<Process, u32>,
    tokens: FxHashMap<Box<str>, u32>,
    /// Whether a release refused `not-held` is a lost hold (lockstorm's
    /// histories) rather than a release that did not happen (Knossos's).
    lost_on_not_held: bool,
}

impl Kept {
    pub fn new(lost_on_not_held: bool) -> Self {
        Kept {
            lost_on_not_held,
            ..Kept::default()
        }
    }

    /// Keeps `e` if the search reads it: client lock ops and crashes.
    pub fn keep(&mut self, e: &Event) {
        let does = match e.f.as_str() {
            f::ACQUIRE if e.process.is_client() => Does::Acquire,
            f::RELEASE if e.process.is_client() => Does::Release,
            f::CRASH => Does::Crash,
            _ => return,
        };
        let dead = match does {
            Does::Crash => e.crashed().map_or(NONE, |p| self.process(&p)),
            _ => NONE,
        };
        let kept = LockEvent {
            time: e.time,
            index: e.index,
            process: self.process(&e.process),
            token: e.token.as_deref().map_or(NONE, |t| self.token(t)),
            dead,
            kind: e.kind,
            does,
            lost: self.lost_on_not_held && lost_hold(e),
        };
        self.events.push(kept);
    }

    /// How many distinct processes and tokens were seen (interned ids are
    /// below these), and the events, without the interning tables.
    pub fn into_ids(self) -> (usize, usize, Vec<LockEvent>) {
        (self.processes.len(), self.tokens.len(), self.events)
    }

    fn process(&mut self, p: &Process) -> u32 {
        if let Some(&id) = self.processes.get(p) {
            return id;
        }
        let id = next_id(self.processes.len());
        self.processes.insert(p.clone(), id);
        id
    }

    fn token(&mut self, t: &str) -> u32 {
        if let Some(&id) = self.tokens.get(t) {
            return id;
        }
        let id = next_id(self.tokens.len());
        self.tokens.insert(t.into(), id);
        id
    }
}

/// A release that failed `not-held`: the lock's own node said the key was
/// no longer ours when the release ran, so the hold ended (its lease ran
/// out, or the key was taken) at some moment between its acquire and that
/// answer, possibly after the release was sent (a releaser frozen
/// mid-release). `prepare` makes it a release certain to have happened in
/// that interval: the lease working as designed, not a holder that still
/// holds, and nothing left to guess. Any other failed release did not
/// happen (Knossos's `fail`), and its holder still holds.
fn lost_hold(e: &Event) -> bool {
    let not_held = e.error.as_deref().map(error::kind) == Some(error::NOT_HELD);
    e.kind == OpType::Fail && e.f == f::RELEASE && not_held
}

fn next_id(len: usize) -> u32 {
    u32::try_from(len)
        .ok()
        .filter(|&id| id != NONE)
        .expect("fewer than 4 G distinct processes and tokens")
}
