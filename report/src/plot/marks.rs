//! The timeline's "unsafe" row: a ✗ at every unsafe action and a mark at
//! every lost update, from every occurrence's witness time in the results
//! (not only the examples), placed by the event that witnessed it.

use super::shared::Rows;
use checker::anomaly::{LOST_UPDATE, UNSAFE_ACTION};
use checker::history::{f, fault};
use checker::{Event, History, OpType, Results};
use std::collections::HashMap;

/// One mark: when, whose (the worker row), and the fence its op carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub time: u64,
    pub worker: Option<usize>,
    pub fence: Option<u64>,
}

/// The unsafe actions and the lost updates, in time order.
pub fn marks(history: &History, results: &Results, rows: &Rows) -> (Vec<Mark>, Vec<Mark>) {
    // A witness time is its event's: a data op's ok, or the stop of a fault
    // that held a write back in the network.
    let mut at: HashMap<u64, &Event> = HashMap::new();
    let mut fences: HashMap<&checker::Process, Option<u64>> = HashMap::new();
    let mut fence_of: HashMap<u64, Option<u64>> = HashMap::new();
    for e in history.in_time_order() {
        let data = e.f == f::READ || e.f == f::WRITE;
        if data && e.process.is_client() && e.kind == OpType::Invoke {
            fences.insert(&e.process, e.fence);
        }
        if data && e.process.is_client() && e.kind == OpType::Ok {
            at.insert(e.time, e);
            fence_of.insert(
                e.index,
                e.fence.or(fences.get(&e.process).copied().flatten()),
            );
        }
        if e.is_nemesis() && e.value.get(fault::DELIVERED_WRITE).is_some() {
            at.insert(e.time, e);
        }
    }
    let place = |time: u64| {
        let e = at.get(&time);
        let worker = e.and_then(|e| match e.process.is_client() {
            true => rows.of(&e.process),
            false => {
                let target = e.value.get("target").and_then(|t| t.as_str())?;
                let index: usize = target.strip_prefix("worker-")?.parse().ok()?;
                (index < rows.len()).then_some(index)
            }
        });
        let fence = e.and_then(|e| fence_of.get(&e.index).copied().flatten());
        Mark {
            time,
            worker,
            fence,
        }
    };
    let of = |name: &str| -> Vec<Mark> {
        let Some(a) = results.anomalies.get(name) else {
            return Vec::new();
        };
        let mut times = a.times.clone();
        if times.is_empty() {
            // Results stored before every occurrence's time was kept: the
            // examples' first witnesses.
            let by_index: HashMap<u64, &Event> =
                history.events.iter().map(|e| (e.index, e)).collect();
            let witnessed = |e: &&&Event| at.get(&e.time).is_some_and(|w| w.index == e.index);
            times = a
                .examples
                .iter()
                .filter_map(|ex| {
                    let events = ex.iter().filter_map(|i| by_index.get(i));
                    events.filter(witnessed).map(|e| e.time).max()
                })
                .collect();
        }
        times.sort_unstable();
        times.dedup();
        times.into_iter().map(&place).collect()
    };
    (of(UNSAFE_ACTION), of(LOST_UPDATE))
}
