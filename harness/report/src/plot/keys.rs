//! The timeline's "key in Redis" rows: who really held the lock key on each
//! lock node, from the observer's events (`key-set` to `key-expired`,
//! `key-deleted` or the next `key-set`). A history without them (a run
//! before the observer, a Jepsen history) has no such rows.

use super::scene::Rows;
use checker::history::{key, worker_name};
use checker::{Event, History, OpType};
use std::collections::HashMap;

/// One stretch in which a node held the key for one owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpan {
    /// Index into the node names.
    pub node: usize,
    pub start: u64,
    pub end: u64,
    /// The worker row of the owner, when the token (or `by`) names one.
    pub owner: Option<usize>,
}

/// The nodes the observer watched, in first-seen order, and each node's
/// spans of ownership, in time order.
pub fn key_spans(
    history: &History,
    rows: &Rows,
    end_of_history: u64,
) -> (Vec<String>, Vec<KeySpan>) {
    let granted: HashMap<&str, &Event> = history
        .events
        .iter()
        .filter(|e| e.f == checker::history::f::ACQUIRE && e.kind == OpType::Ok)
        .filter_map(|e| Some((e.token.as_deref()?, e)))
        .collect();
    let owner = |e: &Event| {
        let by_token = e
            .token
            .as_deref()
            .and_then(|t| granted.get(t))
            .and_then(|g| rows.of(&g.process));
        let by_name = e
            .value
            .get(key::BY)
            .and_then(|b| b.as_str())
            .and_then(|b| (0..rows.len()).find(|&r| worker_name(r) == b));
        by_token.or(by_name)
    };
    let mut nodes: Vec<String> = Vec::new();
    let mut open: HashMap<usize, (u64, Option<usize>)> = HashMap::new();
    let mut spans = Vec::new();
    for e in history.in_time_order() {
        if !e.process.is_observer() || !key::is_key_event(&e.f) {
            continue;
        }
        let name = e.node.clone().unwrap_or_else(|| "?".into());
        let node = match nodes.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                nodes.push(name);
                nodes.len() - 1
            }
        };
        if e.f == key::RENEWED && open.contains_key(&node) {
            continue;
        }
        if let Some((start, owner)) = open.remove(&node) {
            spans.push(KeySpan {
                node,
                start,
                end: e.time,
                owner,
            });
        }
        if e.f == key::SET || e.f == key::RENEWED {
            open.insert(node, (e.time, owner(e)));
        }
    }
    let mut rest: Vec<(usize, (u64, Option<usize>))> = open.into_iter().collect();
    rest.sort_unstable();
    for (node, (start, owner)) in rest {
        spans.push(KeySpan {
            node,
            start,
            end: end_of_history.max(start),
            owner,
        });
    }
    (nodes, spans)
}
