//! The timeline's "key in Redis" rows: who really held the lock key on each
//! lock node, from the observer's events (`key-set` to `key-expired`,
//! `key-deleted` or the next `key-set`). A history without them (a run
//! before the observer, a Jepsen history) has no such rows.

use super::shared::Rows;
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

/// The nodes the observer watched, by name, and each node's spans of
/// ownership, in time order.
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
        // A node killed (by a fault, or dying by itself) loses what it held
        // in memory: its row shows nothing from then until a key is set
        // there again, rather than the last key seen.
        let killed =
            e.node_died() || (e.is_nemesis() && matches!(e.f.as_str(), "kill" | "start-kill"));
        if killed {
            let died = e
                .node
                .as_deref()
                .and_then(|n| nodes.iter().position(|x| x == n));
            if let Some((node, (start, owner))) =
                died.and_then(|node| Some((node, open.remove(&node)?)))
            {
                spans.push(KeySpan {
                    node,
                    start,
                    end: e.time,
                    owner,
                });
            }
            continue;
        }
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
    // Rows in the nodes' own order (n1, n2, …), not the order first seen.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| (nodes[i].len(), nodes[i].clone()));
    let row: Vec<usize> = (0..nodes.len())
        .map(|i| order.iter().position(|&o| o == i).unwrap_or(i))
        .collect();
    for span in &mut spans {
        span.node = row[span.node];
    }
    let nodes = order.iter().map(|&i| nodes[i].clone()).collect();
    (nodes, spans)
}

/// A long run's key spans cut down to at most `cap` bars: each node's spans
/// less than a gap apart merge (the gap doubling from one pixel), and a
/// merged bar keeps its owner only if every span in it had the same one.
/// Returns the bars and the gap used (px), 0 when nothing had to merge.
pub fn merge_keys(spans: Vec<KeySpan>, ns_per_px: f64, cap: usize) -> (Vec<KeySpan>, u64) {
    if spans.len() <= cap {
        return (spans, 0);
    }
    let mut by_node = spans;
    by_node.sort_by_key(|k| (k.node, k.start));
    let mut gap_px = 1;
    loop {
        let gap = (gap_px as f64 * ns_per_px) as u64;
        let mut merged: Vec<KeySpan> = Vec::new();
        for k in &by_node {
            match merged.last_mut() {
                Some(last) if last.node == k.node && k.start <= last.end.saturating_add(gap) => {
                    last.end = last.end.max(k.end);
                    if last.owner != k.owner {
                        last.owner = None;
                    }
                }
                _ => merged.push(k.clone()),
            }
        }
        if merged.len() <= cap {
            return (merged, gap_px);
        }
        gap_px *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_runs_keys_merge_into_few_bars_keeping_only_a_shared_owner() {
        // 3000 spans on one node, 10 ns long, 90 ns apart, owners 0 and 1 in turn.
        let spans: Vec<KeySpan> = (0..3_000u64)
            .map(|i| KeySpan {
                node: 0,
                start: i * 100,
                end: i * 100 + 10,
                owner: Some((i % 2) as usize),
            })
            .collect();
        let (bars, gap) = merge_keys(spans.clone(), 30.0, 2_000);
        assert!(
            bars.len() <= 2_000 && gap > 0,
            "{} bars, gap {gap}",
            bars.len()
        );
        assert!(
            bars.iter().all(|b| b.owner.is_none()),
            "mixed owners are not one colour"
        );
        assert_eq!(
            (bars[0].start, bars.last().unwrap().end),
            (0, 2_999 * 100 + 10)
        );
        let few = spans[..10].to_vec();
        assert_eq!(merge_keys(few.clone(), 30.0, 2_000), (few, 0));
    }

    #[test]
    fn key_rows_follow_the_nodes_names_not_the_order_first_seen() {
        use checker::history::key as k;
        let event = |t: u64, node: &str| {
            checker::Event::new(t, checker::Process::observer(), OpType::Info, k::SET)
                .with_token("a")
                .with_node(node)
        };
        let history = History::new(vec![event(1, "n10"), event(2, "n2"), event(3, "n1")]);
        let rows = Rows::new(&history, 1);
        let (nodes, spans) = key_spans(&history, &rows, 10);
        assert_eq!(nodes, ["n1", "n2", "n10"]);
        let by_row: Vec<(usize, u64)> = spans.iter().map(|s| (s.node, s.start)).collect();
        assert!(
            by_row.contains(&(2, 1)) && by_row.contains(&(0, 3)),
            "{by_row:?}"
        );
    }

    #[test]
    fn a_killed_nodes_key_row_ends_where_it_died() {
        use checker::history::key as k;
        let set = checker::Event::new(1, checker::Process::observer(), OpType::Info, k::SET)
            .with_token("a")
            .with_node("n1");
        let kill = checker::Event::new(5, checker::Process::nemesis(), OpType::Info, "kill")
            .with_node("n1");
        let history = History::new(vec![set, kill]);
        let (_, spans) = key_spans(&history, &Rows::new(&history, 1), 10);
        let ends: Vec<(u64, u64)> = spans.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(ends, [(1, 5)], "not to the end of the run");
    }
}
