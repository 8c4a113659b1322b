//! What the pictures share: what they need to know of the run that the
//! history does not say ([`Setup`]), what they read off a history (its
//! faults, its completed ops, the end of its time axis, its rows), a sample
//! of many items, and their colours. It imports none of the pictures.

use checker::history::fault;
use checker::Pairs;
use checker::{History, OpType, Process};
use plotters::style::RGBColor;
use std::collections::HashMap;

/// What the pictures need to know of the run that the history does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// The run's worker count (`options.workers` in `run.json`), to put a
    /// worker's ops back on one row after an `info` moved it to process id
    /// `p + workers`. 0 when unknown: each process id gets its own row.
    pub workers: u64,
    /// The lock's TTL, where the config has a lock key: a hold that lasts
    /// longer than this after its acquire `ok` outlived the key for certain,
    /// and the timeline shows that part washed out.
    pub lease: Option<std::time::Duration>,
}

impl From<u64> for Setup {
    fn from(workers: u64) -> Self {
        Setup {
            workers,
            lease: None,
        }
    }
}

pub(super) const OK_COLOR: RGBColor = RGBColor(46, 160, 67);
pub(super) const FAIL_COLOR: RGBColor = RGBColor(232, 106, 26);
pub(super) const INFO_COLOR: RGBColor = RGBColor(70, 90, 200);
pub(super) const FAULT_COLOR: RGBColor = RGBColor(160, 120, 200);
pub(super) const FAULT_ALPHA: f64 = 0.18;
pub(super) const FAULT_TEXT: RGBColor = RGBColor(100, 60, 150);

/// A nemesis fault, from its `start-<name>` to its `stop-<name>` event.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Fault {
    pub name: String,
    pub start: u64,
    /// The end of the history when the run stopped before the fault did.
    pub end: u64,
}

pub(super) fn faults(history: &History) -> Vec<Fault> {
    let end_of_history = end_time(history);
    let mut open: HashMap<&str, u64> = HashMap::new();
    let mut faults = Vec::new();
    for e in history.by_time().into_iter().filter(|e| e.is_nemesis()) {
        if let Some(name) = fault::started(&e.f) {
            open.entry(name).or_insert(e.time);
        } else if let Some(name) = fault::stopped(&e.f) {
            if let Some(start) = open.remove(name) {
                faults.push(Fault {
                    name: name.to_owned(),
                    start,
                    end: e.time,
                });
            }
        }
    }
    faults.extend(open.into_iter().map(|(name, start)| Fault {
        name: name.to_owned(),
        start,
        end: end_of_history,
    }));
    faults.sort_by_key(|f| f.start);
    faults
}

/// A completed client operation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Op {
    pub invoked: u64,
    pub completed: u64,
    pub outcome: OpType,
}

/// Client ops with both an invocation and a completion, in completion order.
pub(super) fn ops(history: &History) -> Vec<Op> {
    let pairs = Pairs::new(history);
    let mut ops: Vec<Op> = history
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.process.is_client() && e.kind != OpType::Invoke)
        .filter_map(|(pos, e)| {
            let invoke = &history.events[pairs.invoke_of(pos)?];
            Some(Op {
                invoked: invoke.time,
                completed: e.time.max(invoke.time),
                outcome: e.kind,
            })
        })
        .collect();
    ops.sort_by_key(|op| op.completed);
    ops
}

/// The right edge of every time axis: the last event, and at least 1 ms so
/// an empty or instantaneous history still has a drawable range.
pub(super) fn end_time(history: &History) -> u64 {
    history.time_span().map_or(0, |(_, max)| max).max(1_000_000)
}

pub(super) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub(super) fn outcome_style(outcome: OpType) -> (&'static str, RGBColor) {
    match outcome {
        OpType::Ok => ("ok", OK_COLOR),
        OpType::Fail => ("fail", FAIL_COLOR),
        _ => ("info", INFO_COLOR),
    }
}

/// At most `cap` items spread evenly over `items`: one from each of `cap`
/// equal windows, at a pseudo-random place in it, so a periodic workload
/// (acquire, read, write, release, ...) cannot alias into one kind of op.
pub(super) fn sample<T>(items: Vec<T>, cap: usize) -> Vec<T> {
    let (n, k) = (items.len(), cap.min(items.len()));
    if k == n {
        return items;
    }
    if k == 0 {
        return Vec::new();
    }
    let pick = |w: usize| {
        let (lo, hi) = (w * n / k, (w + 1) * n / k);
        lo + (mix(w as u64) % (hi - lo) as u64) as usize
    };
    let mut next = (0, pick(0));
    let mut kept = Vec::with_capacity(k);
    for (i, item) in items.into_iter().enumerate() {
        if next.0 < k && i == next.1 {
            kept.push(item);
            next.0 += 1;
            next.1 = if next.0 < k { pick(next.0) } else { n };
        }
    }
    kept
}

/// SplitMix64's finaliser: a cheap, deterministic scramble.
pub(super) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Maps process ids to picture rows: one per worker, since a worker that
/// saw an `info` carries on as process `p + workers`.
pub struct Rows {
    workers: u64,
    /// When the worker count is unknown: every client process id, sorted.
    ids: Vec<u64>,
}

impl Rows {
    pub(super) fn new(history: &History, workers: u64) -> Self {
        let mut ids = Vec::new();
        if workers == 0 {
            ids = history
                .events
                .iter()
                .filter_map(|e| match e.process {
                    Process::Client(p) => Some(p),
                    Process::Named(_) => None,
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
        }
        Rows { workers, ids }
    }

    pub fn len(&self) -> usize {
        if self.workers > 0 {
            self.workers as usize
        } else {
            self.ids.len()
        }
    }

    pub fn of(&self, process: &Process) -> Option<usize> {
        let Process::Client(p) = *process else {
            return None;
        };
        if self.workers > 0 {
            Some((p % self.workers) as usize)
        } else {
            self.ids.binary_search(&p).ok()
        }
    }

    pub fn label(&self, row: usize) -> String {
        if self.workers > 0 {
            format!("worker {row}")
        } else {
            format!("process {}", self.ids[row])
        }
    }
}
