//! Pairs each invocation with its completion.
//!
//! A process has at most one op in flight, so its next completion belongs to
//! its last invocation. Pairing follows file order: one worker's events reach
//! the harness in the order it sent them, so per process file order and time
//! order agree, and file order needs no sort.

use crate::history::{History, OpType, Process};
use std::collections::HashMap;

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
        let mut pairs = Pairs {
            invoke_of: vec![None; n],
            completion_of: vec![None; n],
            unmatched_completions: 0,
        };
        let mut in_flight: HashMap<&Process, usize> = HashMap::new();
        for (pos, e) in history.events.iter().enumerate() {
            if e.kind == OpType::Invoke {
                // A second invoke without a completion abandons the first:
                // the history is malformed there, and the newer op is the one
                // a following completion can belong to.
                in_flight.insert(&e.process, pos);
                continue;
            }
            let matched = match in_flight.get(&e.process) {
                Some(&inv) if history.events[inv].f == e.f => {
                    in_flight.remove(&e.process);
                    pairs.invoke_of[pos] = Some(inv);
                    pairs.completion_of[inv] = Some(pos);
                    true
                }
                _ => false,
            };
            // Nemesis and harness events may legitimately stand alone.
            if !matched && e.process.is_client() {
                pairs.unmatched_completions += 1;
            }
        }
        pairs
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
    use crate::testing::Hist;

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
