//! What a run is doing while it runs: a progress bar in a terminal, a plain
//! line every few seconds otherwise (CI logs, pipes, tests), or, for a run
//! that is a matrix's cell, a [`Tick`] a second handed to the sink the cell
//! set, for the matrix to show beside the other cells.
//!
//! Anomalies "so far" come from the linear checkers fed as events arrive,
//! put back into time order within a window as long as the longest pause (a
//! paused worker delivers its events late), so the tally lags by that much.
//! A live hint: the verdict is computed from the stored history at the end.

use checker::history::{Event, OpType};
use checker::{OnePass, Pairing, Reorder};
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

/// The live tally, fed every event the journal writes.
pub struct Tally {
    reorder: Reorder,
    pairing: Pairing,
    pass: OnePass,
    ops: u64,
}

impl Tally {
    pub fn new(window: Duration) -> Self {
        Tally {
            reorder: Reorder::new(window.as_nanos() as u64),
            pairing: Pairing::default(),
            pass: OnePass::default(),
            ops: 0,
        }
    }

    pub fn on_event(&mut self, e: &Event) {
        if e.kind == OpType::Invoke && e.process.is_client() {
            self.ops += 1;
        }
        let (pairing, pass) = (&mut self.pairing, &mut self.pass);
        self.reorder.push(e.clone(), |e| pairing.feed(&e, pass));
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            ops: self.ops,
            anomalies: self
                .pass
                .so_far()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub ops: u64,
    pub anomalies: Vec<(&'static str, u64)>,
}

impl std::fmt::Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ops, ", self.ops)?;
        if self.anomalies.is_empty() {
            return f.write_str("no anomaly so far");
        }
        let found: Vec<String> = self
            .anomalies
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        write!(f, "so far: {}", found.join(", "))
    }
}

/// A bar only for a person watching: not under CI, not into a pipe.
pub fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

/// Set once by a matrix's cell: where its progress goes instead of stderr.
static TICKS_TO: OnceLock<fn(Tick)> = OnceLock::new();

/// From now on this process's runs hand a [`Tick`] a second to `sink`.
pub fn report_ticks_to(sink: fn(Tick)) {
    let _ = TICKS_TO.set(sink);
}

/// Where a cell's run is, as the matrix shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    pub elapsed_s: u64,
    /// The live tally ([`Snapshot`]'s line).
    pub tally: String,
}

/// Waits `limit`, showing progress from `snapshot` as it goes.
pub async fn wait(title: &str, limit: Duration, snapshot: impl Fn() -> Snapshot) {
    let start = tokio::time::Instant::now();
    let deadline = start + limit;
    if let Some(sink) = TICKS_TO.get() {
        while tokio::time::Instant::now() < deadline {
            sink(Tick {
                elapsed_s: start.elapsed().as_secs(),
                tally: snapshot().to_string(),
            });
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + TICK_TO_MATRIX))
                .await;
        }
        return;
    }
    if interactive() {
        // Cleared also when the wait is cut short by a signal (dropped).
        let bar = ProgressBar::new(limit.as_secs().max(1)).with_finish(ProgressFinish::AndClear);
        let style = ProgressStyle::with_template(
            "{prefix} {elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} s  {msg}",
        )
        .expect("a valid template");
        bar.set_style(style.progress_chars("=> "));
        bar.set_prefix(title.to_string());
        while tokio::time::Instant::now() < deadline {
            bar.set_position(start.elapsed().as_secs());
            bar.set_message(snapshot().to_string());
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + TICK)).await;
        }
        bar.finish_and_clear();
        return;
    }
    let mut next = start + PLAIN_EVERY;
    while next < deadline {
        tokio::time::sleep_until(next).await;
        let s = start.elapsed().as_secs();
        // A closed or full stderr must not end the run.
        let _ = writeln!(
            std::io::stderr().lock(),
            "lockstorm: {title}: {s}/{} s, {}",
            limit.as_secs(),
            snapshot()
        );
        next += PLAIN_EVERY;
    }
    tokio::time::sleep_until(deadline).await;
}

const TICK: Duration = Duration::from_millis(200);
const TICK_TO_MATRIX: Duration = Duration::from_secs(1);
const PLAIN_EVERY: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use checker::history::Process;

    fn event(time: u64, p: u64, kind: OpType, op: &str, token: &str) -> Event {
        let mut e = Event::new(time, Process::Client(p), kind, op);
        e.token = Some(token.into());
        e
    }

    #[test]
    fn the_tally_counts_ops_and_overlaps_as_they_arrive() {
        let mut t = Tally::new(Duration::ZERO);
        assert_eq!(t.snapshot().to_string(), "0 ops, no anomaly so far");
        for (p, token) in [(1, "a"), (2, "b")] {
            t.on_event(&event(p * 10, p, OpType::Invoke, "acquire", token));
            t.on_event(&event(p * 10 + 1, p, OpType::Ok, "acquire", token));
        }
        // Released once a later event shows nothing earlier can still come.
        t.on_event(&event(100, 3, OpType::Invoke, "read", "c"));
        let s = t.snapshot();
        assert_eq!(s.ops, 3);
        assert_eq!(s.anomalies, vec![("lock-overlap", 1)]);
        assert_eq!(s.to_string(), "3 ops, so far: lock-overlap 1");
    }
}
