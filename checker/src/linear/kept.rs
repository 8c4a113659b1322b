//! What the search keeps of each event it reads, while the history streams
//! past: 32 bytes, with processes and tokens interned, instead of a whole
//! [`Event`] (some 260 bytes with its strings). A streamed check keeps
//! them only since the last cut (`stream.rs`), which moves a settled
//! prefix out with [`Kept::cut`].

use crate::history::{f, Event, OpType, Process};
use crate::meaning::{lock_reading, Dialect, Reading};
use rustc_hash::{FxHashMap, FxHashSet};

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
    /// A refused release that says the owner's open hold had ended by
    /// the refusal ([`Reading::HoldEndedBy`]).
    pub lost: bool,
    /// A refused release whose key stays until its lease runs out
    /// ([`Reading::LapsesAfter`]).
    pub lapses: bool,
}

/// The kept events, in the order they were fed, and the interning tables.
/// Tokens are only ever compared, so their text is kept once, as a key.
pub struct Kept {
    pub events: Vec<LockEvent>,
    processes: FxHashMap<Process, u32>,
    tokens: FxHashMap<Box<str>, u32>,
    /// Who wrote the history: how its refused releases read.
    dialect: Dialect,
    /// Processes and tokens of uncertain ops cut off with a settled
    /// prefix, assumed never to act again (see `stream.rs`).
    watched: Watched,
    /// The first watched process or token seen again.
    pub seen_again: Option<String>,
}

#[derive(Default)]
struct Watched {
    processes: FxHashSet<Process>,
    tokens: FxHashSet<Box<str>>,
}

impl Kept {
    pub fn new(dialect: Dialect) -> Self {
        Kept {
            events: Vec::new(),
            processes: FxHashMap::default(),
            tokens: FxHashMap::default(),
            dialect,
            watched: Watched::default(),
            seen_again: None,
        }
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
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
        let reading = match (does, e.kind) {
            (Does::Release, OpType::Fail) => Some(lock_reading(
                self.dialect,
                &e.f,
                Some(e.kind),
                e.error.as_deref(),
            )),
            _ => None,
        };
        let kept = LockEvent {
            time: e.time,
            index: e.index,
            process: self.process(&e.process),
            token: e.token.as_deref().map_or(NONE, |t| self.token(t)),
            dead,
            kind: e.kind,
            does,
            lost: reading == Some(Reading::HoldEndedBy),
            lapses: reading == Some(Reading::LapsesAfter),
        };
        self.events.push(kept);
    }

    /// How many distinct processes and tokens were seen: interned ids are
    /// below these.
    pub fn counts(&self) -> (usize, usize) {
        (self.processes.len(), self.tokens.len())
    }

    /// Moves the events before `pos` out, with the processes and tokens of
    /// `loose` (positions of theirs), and the tokens `orphans`, from then on
    /// watched: the rest is
    /// interned afresh, so the tables hold only what is still kept.
    pub fn cut(&mut self, pos: usize, loose: &[u32], orphans: &[u32]) {
        let process_of = invert(&self.processes);
        let token_of = invert(&self.tokens);
        for &t in orphans {
            self.watched.tokens.insert(token_of[t as usize].clone());
        }
        for &at in loose {
            let e = self.events[at as usize];
            let p = process_of[e.process as usize];
            self.watched.processes.insert(p.clone());
            if e.dead != NONE {
                let dead = process_of[e.dead as usize];
                self.watched.processes.insert(dead.clone());
            }
            if e.token != NONE {
                self.watched
                    .tokens
                    .insert(token_of[e.token as usize].clone());
            }
        }
        let rest = self.events.split_off(pos);
        let (processes, tokens) = (take(&mut self.processes), take(&mut self.tokens));
        let (process_of, token_of) = (invert(&processes), invert(&tokens));
        self.events = Vec::with_capacity(rest.len().max(1 << 12));
        for mut e in rest {
            e.process = self.process(process_of[e.process as usize]);
            if e.token != NONE {
                e.token = self.token(token_of[e.token as usize]);
            }
            if e.dead != NONE {
                e.dead = self.process(process_of[e.dead as usize]);
            }
            self.events.push(e);
        }
    }

    fn process(&mut self, p: &Process) -> u32 {
        if let Some(&id) = self.processes.get(p) {
            return id;
        }
        if self.seen_again.is_none() && self.watched.processes.contains(p) {
            self.seen_again = Some(format!("process {p}"));
        }
        let id = next_id(self.processes.len());
        self.processes.insert(p.clone(), id);
        id
    }

    fn token(&mut self, t: &str) -> u32 {
        if let Some(&id) = self.tokens.get(t) {
            return id;
        }
        if self.seen_again.is_none() && self.watched.tokens.contains(t) {
            self.seen_again = Some(format!("token {t}"));
        }
        let id = next_id(self.tokens.len());
        self.tokens.insert(t.into(), id);
        id
    }
}

fn take<K, V>(m: &mut FxHashMap<K, V>) -> FxHashMap<K, V> {
    std::mem::take(m)
}

/// Each interned id's key.
fn invert<K>(table: &FxHashMap<K, u32>) -> Vec<&K> {
    let mut by_id: Vec<Option<&K>> = vec![None; table.len()];
    for (k, &id) in table {
        by_id[id as usize] = Some(k);
    }
    by_id
        .into_iter()
        .map(|k| k.expect("ids are dense"))
        .collect()
}

fn next_id(len: usize) -> u32 {
    u32::try_from(len)
        .ok()
        .filter(|&id| id != NONE)
        .expect("fewer than 4 G distinct processes and tokens")
}
