//! Pure checkers for lockstorm histories. Knows nothing of Redis, tokio or I/O
//! beyond reading a history from any `BufRead`.
//!
//! [`check`] runs every checker and combines their findings into the
//! `results.json` verdict (docs/formats.md, "results.json");
//! [`check_jsonl`] and [`check_edn`] do the same for a history streamed
//! from a file (lockstorm's JSONL, Jepsen's EDN). The public API is what
//! this page lists: the history format ([`history`]), the results types,
//! the anomaly names ([`anomaly`], and [`anomalies`] in the order a reader
//! scans for them), and the one pass ([`OnePass`] fed through [`Pairing`])
//! for a live tally. The checkers themselves are private modules.
//!
//! This page also holds what every checker implements (`OnEvent` and
//! `Checker`, or `Whole` for a whole-history check); the checkers, each a
//! private module, import it from here, and are listed once, in the
//! registry (`registry.rs`, `CHECKERS`), each with the anomalies it reports
//! and how it is fed. Adding one is its module, its anomalies' names in
//! [`anomaly`], and its line there.

#![forbid(unsafe_code)]

// The data contract: the history format, and histories to test with,
// from the crate of their own (`checker::history` stays the one path).
pub use history;
pub use history::{edn, generate};

mod availability;
mod bounds;
mod cause;
mod check;
mod counter;
mod crashes;
mod deadlock;
mod demand;
mod exposure;
mod faults;
mod feed;
mod fence;
mod finding;
mod holds;
mod linear;
pub mod meaning;
mod mutex;
mod observed;
mod ops;
mod pass;
mod registry;
mod settings;
mod stats;
mod strike;
mod verdict;

// Checking a history, and what it gives back (the `results.json` contract).
pub use availability::Availability;
pub use cause::Incident;
pub use check::{check, check_edn, check_jsonl, StreamStats, Window};
pub use counter::CounterReport;
pub use exposure::Exposure;
pub use finding::{Anomaly, CheckerReport, Validity, Witness};
pub use history::edn::{from_edn, read_edn};
pub use history::{Event, History, OpType, Process};
pub use observed::{KEY_LOST, LEASE_EXPIRED};
pub use registry::{anomalies, anomaly_kind, AnomalyKind, Breaks};
pub use settings::{Promise, Settings, UnknownPromise};
pub use stats::{median, AcquiringStrikes, Stats};
pub use strike::Point;
pub use verdict::Results;

// Feeding checkers as events arrive (the harness's live tally).
pub use feed::{Pairing, Reorder};
pub use pass::OnePass;

// What the pictures draw: lock holds, ops paired with their completions.
pub use holds::{holds, Hold};
pub use ops::Pairs;

// The linearizability search on its own, with its budget (benchmarks).
pub use linear::{check as check_linearizability, Budget};

use finding::Finding;

/// A checker fed events one at a time, in time order (stateright's
/// `on_invoke`/`on_return` in one call). `invoke` is the matching invocation
/// when `e` completes an op; [`Pairing`] finds it. Checkers keep only
/// what is still open, so a history can be checked as it streams past.
pub trait OnEvent {
    fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>);
}

/// What a completion's checkers need of its invocation: kept per op in
/// flight without copying the event's strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invoked {
    pub time: u64,
    pub index: u64,
    pub fence: Option<u64>,
}

/// An event-fed checker in the registry: fed like any [`OnEvent`], then
/// asked what it found. `Send` because the harness's live tally feeds one
/// from its async tasks.
pub(crate) trait Checker: OnEvent + Send {
    /// How often `anomaly` occurred so far, for a live tally; `None` when
    /// the count is only known at the end (or `anomaly` is not this
    /// checker's).
    fn so_far(&self, _anomaly: &str) -> Option<u64> {
        None
    }

    fn finish(self: Box<Self>) -> Finding;
}

/// A whole-history checker: fed each event in time order, it keeps what
/// it reads, then decides from all of it.
pub(crate) trait Whole {
    fn keep(&mut self, e: &Event);

    /// Asked by a streamed check, before the first event: decide what it
    /// can as the events go by and let go of it, rather than keep it all.
    fn forget_settled(&mut self) {}

    fn finish(self: Box<Self>) -> Finding;

    /// [`Whole::finish`] after a streamed check, or why what it let go of
    /// leaves it unable to decide: the history must then be checked whole.
    fn finish_streamed(self: Box<Self>) -> Result<Finding, String> {
        Ok(self.finish())
    }
}

/// Anomaly names: the keys of `results.json`'s `anomalies` (contract). What
/// each means is in docs/formats.md, "Anomalies"; which checker
/// reports it, in the registry (`registry.rs`).
pub mod anomaly {
    pub const LOCK_OVERLAP: &str = "lock-overlap";
    pub const UNSAFE_ACTION: &str = "unsafe-action";
    pub const LOST_UPDATE: &str = "lost-update";
    pub const STALE_FENCE_ACCEPTED: &str = "stale-fence-accepted";
    pub const FOREIGN_RELEASE: &str = "foreign-release";
    pub const NONLINEARIZABLE: &str = "nonlinearizable";
    pub const DEADLOCK: &str = "deadlock";
}
