//! Pairs each invocation with its completion: [`InFlight`] holds the rule,
//! [`Pairs`] applies it to a whole history (the streaming checkers apply it
//! event by event, in [`crate::feed::Pairing`]).
//!
//! A process has at most one op in flight, so its next completion belongs to
//! its last invocation. Pairing follows file order: one worker's events reach
//! the harness in the order it sent them, so per process file order and time
//! order agree, and file order needs no sort.

use crate::history::{Event, History, OpType, Process};
use rustc_hash::FxHashMap;

/// Each process's op in flight, and the one rule every pairing follows: a
/// completion belongs to its process's op in flight if it has the same `f`.
pub struct InFlight<T> {
    ops: FxHashMap<Process, (u64, T)>,
    unmatched: usize,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight {
            ops: FxHashMap::default(),
            unmatched: 0,
        }
    }
}

impl<T> InFlight<T> {
    pub fn invoke(&mut self, e: &Event, op: T) {
        // A second invoke without a completion abandons the first: the
        // history is malformed there, and the newer op is the one a
        // following completion can belong to.
        self.ops.insert(e.process.clone(), (f_key(&e.f), op));
    }

    /// The op `e` completes, if any.
    pub fn complete(&mut self, e: &Event) -> Option<T> {
        let op = match self.ops.get(&e.process) {
            Some((f, _)) if *f == f_key(&e.f) => self.ops.remove(&e.process).map(|(_, op)| op),
            _ => None,
        };
        // Nemesis and harness events may legitimately stand alone.
        if op.is_none() && e.process.is_client() {
            self.unmatched += 1;
        }
        op
    }

    /// Client completions with no invocation before them.
    pub fn unmatched(&self) -> usize {
        self.unmatched
    }
}

/// A cheap stand-in for `f`: the common names by number, others by hash.
fn f_key(f: &str) -> u64 {
    use crate::history::f;
    match f {
        f::ACQUIRE => 0,
        f::RELEASE => 1,
        f::READ => 2,
        f::WRITE => 3,
        other => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            other.hash(&mut h);
            h.finish() | 1 << 63
        }
    }
}

/// Invocation ↔ completion links, as positions in `History::events`.
#[derive(Clone, Debug, Default)]
pub struct Pairs {
    invoke_of: Vec<Option<usize>>,
    completion_of: Vec<Option<usize>>,
    unmatched_completions: usize,
}

impl Pairs {
    pub fn new(history: &History) -> Self {
        let n = history.events.len();
        let mut invoke_of = vec![None; n];
        let mut completion_of = vec![None; n];
        let mut in_flight = InFlight::default();
        for (pos, e) in history.events.iter().enumerate() {
            if e.kind == OpType::Invoke {
                in_flight.invoke(e, pos);
            } else if let Some(inv) = in_flight.complete(e) {
                invoke_of[pos] = Some(inv);
                completion_of[inv] = Some(pos);
            }
        }
        Pairs {
            invoke_of,
            completion_of,
            unmatched_completions: in_flight.unmatched(),
        }
    }

    /// The invocation of the completion at `pos`.
    pub fn invoke_of(&self, pos: usize) -> Option<usize> {
        self.invoke_of.get(pos).copied().flatten()
    }

    /// The completion of the invocation at `pos`; `None` if the run ended first.
    pub fn completion_of(&self, pos: usize) -> Option<usize> {
        self.completion_of.get(pos).copied().flatten()
    }

    /// Client completions with no invocation before them: checkers that need
    /// an op's invoke time skip these, so the verdict notes how many there were.
    pub fn unmatched_completions(&self) -> usize {
        self.unmatched_completions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    #[test]
    fn pairs_each_process_own_ops_even_when_interleaved() {
        let mut h = Hist::new();
        h.invoke(1, "write");
        h.invoke(2, "read");
        h.ok(2, "read");
        h.ok(1, "write");
        h.invoke(1, "read"); // the run ended before it completed
        let pairs = Pairs::new(&h.build());
        assert_eq!(pairs.completion_of(0), Some(3));
        assert_eq!(pairs.invoke_of(2), Some(1));
        assert_eq!(pairs.completion_of(4), None);
        assert_eq!(pairs.unmatched_completions(), 0);
    }

    #[test]
    fn counts_client_completions_without_an_invoke() {
        let mut h = Hist::new();
        h.ok(1, "write");
        h.nemesis("start-pause");
        h.invoke(2, "read");
        h.ok(2, "write"); // wrong op name: not this invoke's completion
        let pairs = Pairs::new(&h.build());
        assert_eq!(pairs.unmatched_completions(), 2);
        assert_eq!(pairs.completion_of(2), None);
    }
}
