//! What a matrix shows while its cells run: in a terminal, a bar per
//! running cell (its time and live tally) above the lines of those done;
//! otherwise a line per finished run on stdout, and every few seconds one
//! line on stderr naming each running cell and how far it is.

use crate::progress::{interactive, Tick};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Board {
    /// Bars, in a terminal.
    multi: Option<MultiProgress>,
    state: Mutex<State>,
}

struct State {
    /// Running cells by their number in the plan: title, limit, last tick, bar.
    running: BTreeMap<usize, Cell>,
    /// When the last plain status line went out.
    said: Instant,
}

struct Cell {
    title: String,
    limit_s: u64,
    tick: Tick,
    bar: Option<ProgressBar>,
}

/// How often the plain status line goes out.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

impl Board {
    pub fn new() -> Self {
        Board {
            multi: interactive().then(MultiProgress::new),
            state: Mutex::new(State {
                running: BTreeMap::new(),
                said: Instant::now(),
            }),
        }
    }

    /// Cell `n` (its run's number in the plan) has started.
    pub fn start(&self, n: usize, title: &str, limit_s: u64) {
        let bar = self.multi.as_ref().map(|multi| {
            let bar = multi.add(ProgressBar::new(limit_s.max(1)));
            let style =
                ProgressStyle::with_template("{prefix} [{bar:20.cyan/blue}] {pos}/{len} s  {msg}")
                    .expect("a valid template");
            bar.set_style(style.progress_chars("=> "));
            bar.set_prefix(title.to_string());
            bar
        });
        let cell = Cell {
            title: title.to_string(),
            limit_s,
            tick: Tick::default(),
            bar,
        };
        self.lock().running.insert(n, cell);
    }

    pub fn tick(&self, n: usize, tick: Tick) {
        let mut state = self.lock();
        if let Some(cell) = state.running.get_mut(&n) {
            if let Some(bar) = &cell.bar {
                bar.set_position(tick.elapsed_s);
                bar.set_message(tick.tally.clone());
            }
            cell.tick = tick;
        }
        if self.multi.is_none() && state.said.elapsed() >= PLAIN_EVERY {
            state.said = Instant::now();
            let running: Vec<String> = state
                .running
                .values()
                .map(|c| {
                    format!(
                        "{} {}/{} s, {}",
                        c.title, c.tick.elapsed_s, c.limit_s, c.tick.tally
                    )
                })
                .collect();
            // A closed or full stderr must not end the matrix.
            let _ = writeln!(
                std::io::stderr().lock(),
                "lockstorm: running {}",
                running.join("; ")
            );
        }
    }

    /// Cell `n` has ended: its bar goes, `line` says how it went.
    pub fn finish(&self, n: usize, line: &str) {
        let cell = self.lock().running.remove(&n);
        if let Some(bar) = cell.and_then(|c| c.bar) {
            bar.finish_and_clear();
            if let Some(multi) = &self.multi {
                multi.remove(&bar);
            }
        }
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(line);
            }
            // Progress lines: a reader that has gone must not stop the matrix.
            None => {
                let _ = writeln!(std::io::stdout(), "{line}");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("board lock poisoned")
    }
}
