//! What the timeline shows, decided apart from how it is drawn: which rows,
//! which holds (a large run merges neighbours), where the ✗ marks go.

use super::keys::{key_spans, merge_keys, KeySpan};
use super::marks::{marks, Mark};
use super::shared::{end_time, Rows};
use checker::{History, Hold, Process, Results};
use std::collections::{HashMap, HashSet};

/// Past this many bars the SVG gets slow to open and the bars blur into one.
pub const MAX_HOLDS: usize = 2_000;

pub struct Scene {
    pub rows: Rows,
    /// The holds to draw one by one: all of them, or in a large run only
    /// those in anomalies.
    pub holds: Vec<Hold>,
    /// In a large run, the other holds, merged where they nearly touch.
    pub spans: Vec<Span>,
    /// How many holds the history has, drawn or not.
    pub total: usize,
    /// `start_index` of every hold that overlaps another: found from all
    /// the holds, not from the checker's examples (which keep the first
    /// few), so a long run's later overlaps are coloured too.
    pub overlapping: HashSet<u64>,
    /// Every unsafe action (the unsafe row's ✗), and every lost update.
    pub unsafe_actions: Vec<Mark>,
    pub lost_updates: Vec<Mark>,
    /// The lock nodes the observer watched, and who held the key on each.
    pub key_nodes: Vec<String>,
    pub keys: Vec<KeySpan>,
    /// What the reader must know that the picture does not show.
    pub notes: Vec<String>,
    /// The lock's TTL in ns, where known (see [`super::Setup`]).
    pub lease: Option<u64>,
    /// Fenced configs: which token the storage held as the highest, from
    /// when to when. The storage is the one place that knows who really
    /// holds the right to write.
    pub fences: Vec<FenceSpan>,
    /// Time and row of every worker that died (a `crash` event).
    pub crashes: Vec<(u64, usize)>,
    /// When the lock was stuck (`deadlock`, from the results).
    pub stuck: Vec<(u64, u64)>,
}

/// The storage's highest accepted fence over `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceSpan {
    pub start: u64,
    pub end: u64,
    pub fence: u64,
}

/// Spans of the highest fence the storage accepted (a read or write `ok`
/// carrying it, or carried by its invoke), in time order.
pub fn accepted_fences(history: &History) -> Vec<FenceSpan> {
    let mut invoked: HashMap<&Process, Option<u64>> = HashMap::new();
    let mut spans: Vec<FenceSpan> = Vec::new();
    for e in history.in_time_order() {
        let data_op = e.f == checker::history::f::READ || e.f == checker::history::f::WRITE;
        if !data_op || !e.process.is_client() {
            continue;
        }
        match e.kind {
            checker::OpType::Invoke => {
                invoked.insert(&e.process, e.fence);
            }
            checker::OpType::Ok => {
                let fence = e.fence.or(invoked.remove(&e.process).flatten());
                let highest = spans.last().map(|s| s.fence);
                if let Some(fence) = fence.filter(|&f| highest.is_none_or(|h| f > h)) {
                    if let Some(last) = spans.last_mut() {
                        last.end = e.time;
                    }
                    spans.push(FenceSpan {
                        start: e.time,
                        end: e.time,
                        fence,
                    });
                }
            }
            _ => {
                invoked.remove(&e.process);
            }
        }
    }
    if let Some(last) = spans.last_mut() {
        last.end = end_time(history);
    }
    spans
}

impl Scene {
    /// `width_px`: how wide the time axis is drawn, which decides which
    /// holds of a large run would blur into one bar anyway.
    pub fn new(history: &History, results: &Results, workers: u64, width_px: u32) -> Self {
        let rows = Rows::new(history, workers);
        let (unsafe_actions, lost_updates) = marks(history, results, &rows);
        let witnesses: HashSet<u64> = results
            .anomalies
            .values()
            .flat_map(|a| a.examples.iter().flatten().copied())
            .collect();
        // However large the run, every hold an anomaly names is drawn
        // alone, as is the hold each ✗ was made under.
        let in_anomaly = |h: &Hold| {
            witnesses.contains(&h.start_index)
                || h.end_index.is_some_and(|i| witnesses.contains(&i))
                || unsafe_actions.iter().any(|m| {
                    m.worker.is_some()
                        && rows.of(&h.process) == m.worker
                        && h.start <= m.time
                        && m.time <= h.end
                })
        };
        let mut holds = checker::holds(history);
        let overlapping = overlapping(&holds);
        let total = holds.len();
        let mut notes = Vec::new();
        let mut spans = Vec::new();
        if total > MAX_HOLDS {
            let (must, rest): (Vec<Hold>, Vec<Hold>) = holds.into_iter().partition(in_anomaly);
            let ns_per_px = end_time(history) as f64 / f64::from(width_px.max(1));
            let gap_px;
            (spans, gap_px) = merge(
                &rest,
                &rows,
                ns_per_px,
                MAX_HOLDS.saturating_sub(must.len()),
            );
            notes.push(format!(
                "{} holds in anomalies drawn one by one; the other {} merged into {} bars where less than {gap_px} px apart",
                must.len(),
                rest.len(),
                spans.len()
            ));
            holds = must;
        }
        if history.truncated {
            notes.push("the history is truncated: its last line was cut off".into());
        }
        let mut fences = accepted_fences(history);
        if fences.len() > MAX_HOLDS {
            notes.push(format!(
                "the storage's fence row is left out: {} changes would blur",
                fences.len()
            ));
            fences.clear();
        }
        let crashes = history
            .events
            .iter()
            .filter_map(|e| Some((e.time, rows.of(&e.crashed()?)?)))
            .collect();
        let (key_nodes, keys) = key_spans(history, &rows, end_time(history));
        let ns_per_px = end_time(history) as f64 / f64::from(width_px.max(1));
        let (keys, key_gap) = merge_keys(keys, ns_per_px, MAX_HOLDS);
        if key_gap > 0 {
            notes.push(format!(
                "the key rows merge stretches less than {key_gap} px apart (grey: more than one owner)"
            ));
        }
        Scene {
            key_nodes,
            keys,
            lost_updates,
            crashes,
            stuck: results.deadlocks(),
            rows,
            holds,
            total,
            spans,
            overlapping,
            unsafe_actions,
            notes,
            lease: None,
            fences,
        }
    }
}

/// The `start_index` of every hold that shares an instant with a hold of
/// another lock (the checker's `lock-overlap`, all of them). A sweep in
/// start order keeps only the holds still open, so the cost follows the
/// concurrency, not the run's length.
pub fn overlapping(holds: &[Hold]) -> HashSet<u64> {
    let mut by_start: Vec<&Hold> = holds.iter().collect();
    by_start.sort_by_key(|h| (h.start, h.start_index));
    let mut open: Vec<&Hold> = Vec::new();
    let mut found = HashSet::new();
    for h in by_start {
        open.retain(|o| o.end > h.start);
        for o in &open {
            if !o.same_lock(h) {
                found.insert(o.start_index);
                found.insert(h.start_index);
            }
        }
        open.push(h);
    }
    found
}

/// Holds of one row drawn as one bar.
pub struct Span {
    pub row: usize,
    pub start: u64,
    pub end: u64,
}

/// Merges each row's holds that are less than a gap apart, doubling the gap
/// (from one pixel) until at most `cap` bars remain. Unlike sampling, this
/// loses nothing visible at one pixel, and nothing periodic can alias.
pub(super) fn merge(holds: &[Hold], rows: &Rows, ns_per_px: f64, cap: usize) -> (Vec<Span>, u64) {
    let mut by_row: Vec<Vec<(u64, u64)>> = vec![Vec::new(); rows.len()];
    for h in holds {
        if let Some(row) = rows.of(&h.process) {
            by_row[row].push((h.start, h.end));
        }
    }
    by_row.iter_mut().for_each(|r| r.sort_unstable());
    let mut gap_px = 1;
    loop {
        let gap = (gap_px as f64 * ns_per_px) as u64;
        let mut spans: Vec<Span> = Vec::new();
        for (row, intervals) in by_row.iter().enumerate() {
            for &(start, end) in intervals {
                match spans.last_mut() {
                    Some(last) if last.row == row && start <= last.end.saturating_add(gap) => {
                        last.end = last.end.max(end)
                    }
                    _ => spans.push(Span { row, start, end }),
                }
            }
        }
        if spans.len() <= cap.max(rows.len()) {
            return (spans, gap_px);
        }
        gap_px *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hold of worker 0 every `every` ns, each `len` ns long.
    fn periodic(n: u64, every: u64, len: u64) -> Vec<Hold> {
        (0..n)
            .map(|i| Hold {
                process: Process::Client(0),
                token: Some(i.to_string()),
                fence: None,
                start: i * every,
                start_index: i,
                end: i * every + len,
                end_index: None,
                released: true,
            })
            .collect()
    }

    #[test]
    fn merging_widens_the_gap_only_as_far_as_the_cap_needs() {
        let rows = Rows::new(&History::default(), 1);
        // 90 ns gaps: 1 px (30 ns) and 2 px leave 5000 bars, 4 px merges all.
        let (spans, gap_px) = merge(&periodic(5_000, 100, 10), &rows, 30.0, 2_000);
        assert_eq!((spans.len(), gap_px), (1, 4));
        assert_eq!((spans[0].start, spans[0].end), (0, 4_999 * 100 + 10));
        // Already under the cap: nothing merges that does not touch.
        let (spans, gap_px) = merge(&periodic(50, 100, 10), &rows, 30.0, 2_000);
        assert_eq!((spans.len(), gap_px), (50, 1));
    }

    #[test]
    fn rows_fold_a_worker_s_later_process_ids_into_its_row() {
        let rows = Rows::new(&History::default(), 3);
        assert_eq!(rows.of(&Process::Client(7)), Some(1));
        assert_eq!(rows.of(&Process::nemesis()), None);
        assert_eq!(rows.label(1), "worker 1");
    }
}
