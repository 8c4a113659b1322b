//! The whole check `lockstorm check` runs, timed on three shapes of a
//! correct lock's history at 1 M and 10 M events, each with its own peak
//! RSS (docs/benchmarks.md, "Three shapes at 1 M and 10 M"):
//!
//! ```sh
//! cargo run --release -p checker --example shapes [-- [EVENTS ...] [--shapes a,b,c] [--no-gen]]
//! ```
//!
//! EVENTS default to `1000000 10000000`; the shapes are
//!
//! - `bench`: the benchmarks' generator (`checker::generate::valid_events`,
//!   as `generate EVENTS` writes it: 5 workers taking turns, 2% of releases
//!   `info`), as JSONL;
//! - `lost-reply`: the outside simulator (`checker/tests/outside/sim.rs`),
//!   20 clients with tokens, 0.5% of acquires losing their reply, the
//!   client going on under a new process id, the other shapes at
//!   `Config::new`'s rates; as JSONL;
//! - `edn-retired`: the same clients tokenless, without slow releases
//!   (`Config::knossos`: Jepsen's reading has no leases), as Jepsen EDN.
//!
//! Each figure is a child process of its own (`shapes one SHAPE EVENTS`),
//! so its peak RSS (`VmHWM`) is that check's alone. The child streams the
//! history's text out of its generator straight into the checker (no file,
//! no history held), with the settings and reorder window of `lockstorm
//! check` (`harness/src/check.rs`), and, as it does, checks again with a
//! window as wide as the lateness found if events came late. Where the
//! harness would read the file whole and check it in memory
//! (`StreamStats::whole_needed`, or events later than the window), the
//! child says so and stops: that figure misses the memory goal.
//!
//! Wall time includes generating and rendering the text, which the child
//! does on the same thread; a second child (`shapes gen SHAPE EVENTS`)
//! times that alone for the `gen s` column (`--no-gen` leaves it out).
//!
//! `shapes text SHAPE EVENTS > FILE` writes a shape's text, for timing
//! `lockstorm check` itself on it.
//!
//! Exits 1 if any verdict is not VALID (or a child failed).

#[path = "../tests/outside/sim.rs"]
mod sim;

use checker::{Event, Promise, Results, Settings, StreamStats, Validity, Window};
use std::io::{self, BufRead, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// `lockstorm check`'s reorder window: 120 s of history time...
const REORDER_WINDOW_NS: u64 = 120_000_000_000;

/// ...and at most 65 536 events waiting, on the first pass.
const FIRST_WINDOW: Window = Window {
    ns: REORDER_WINDOW_NS,
    events: 1 << 16,
};

/// The seed of every shape (the issue's number).
const SEED: u64 = 59;

/// The goals of issue 59.
const GOAL_RSS_MB: f64 = 150.0;
const GOAL_RSS_AT: u64 = 10_000_000;
const GOAL_RATE: f64 = 1_000_000.0;

/// How a child's note says the harness would read the history whole.
const WHOLE: &str = "whole needed";

const SHAPES: [&str; 3] = ["bench", "lost-reply", "edn-retired"];

fn usage() -> ! {
    eprintln!("usage: shapes [EVENTS ...] [--shapes bench,lost-reply,edn-retired] [--no-gen]");
    eprintln!("       shapes one|gen|text SHAPE EVENTS");
    std::process::exit(254);
}

fn number(s: &str) -> u64 {
    s.replace('_', "").parse().unwrap_or_else(|_| usage())
}

// ---------------------------------------------------------------- the child

/// A history's text rendered as it is read: a `BufRead` over items, a
/// chunk of lines at a time.
struct Rendered<I, F> {
    items: I,
    render: F,
    buf: Vec<u8>,
    pos: usize,
}

impl<I: Iterator, F: FnMut(&mut Vec<u8>, I::Item)> Read for Rendered<I, F> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<I: Iterator, F: FnMut(&mut Vec<u8>, I::Item)> BufRead for Rendered<I, F> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            while self.buf.len() < 1 << 16 {
                let Some(item) = self.items.next() else { break };
                (self.render)(&mut self.buf, item);
            }
        }
        Ok(&self.buf[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }
}

/// One line of JSONL, as the `generate` example writes it.
fn jsonl_line(out: &mut Vec<u8>, e: Event) {
    serde_json::to_writer(&mut *out, &e).expect("an event serialises");
    out.push(b'\n');
}

/// The simulator's clients for `lost-reply` and `edn-retired`: about two
/// events a lock op.
fn clients(events: u64, tokens: bool) -> sim::Config {
    sim::Config {
        tokens,
        info_acquire: 0.005,
        keep_id: 0.0,
        ..sim::Config::new(SEED, 20, events.div_ceil(2))
    }
}

/// The shape's text, read as it is generated; whether it is EDN.
fn text(shape: &str, events: u64) -> (Box<dyn BufRead>, bool) {
    match shape {
        "bench" => {
            let events = checker::generate::valid_events(42, 5, events / 10, 20);
            let text = Rendered {
                items: events,
                render: jsonl_line,
                buf: Vec::with_capacity(1 << 16),
                pos: 0,
            };
            (Box::new(text), false)
        }
        "lost-reply" => (
            Box::new(sim::jsonl_reader(sim::Sim::new(clients(events, true)))),
            false,
        ),
        "edn-retired" => (
            Box::new(sim::edn_reader(sim::Sim::new(
                clients(events, false).knossos(),
            ))),
            true,
        ),
        _ => usage(),
    }
}

/// One streamed pass, as `lockstorm check` makes it.
fn pass(shape: &str, events: u64, window: Window) -> (Results, StreamStats) {
    let settings = Settings::new(Promise::MutualExclusion);
    let checked = match text(shape, events) {
        (text, false) => checker::check_jsonl(text, settings, window, true),
        (text, true) => checker::check_edn(text, settings.knossos_fail(), window),
    };
    checked.unwrap_or_else(|e| {
        eprintln!("shapes: the {shape} history does not parse: {e}");
        std::process::exit(2);
    })
}

/// The streamed check with the harness's second pass (`streamed` in
/// harness/src/check.rs); `Err` says why the harness would check the
/// history whole, in memory, instead.
fn check(shape: &str, events: u64) -> (Results, StreamStats, Result<(), String>) {
    let (results, stats) = pass(shape, events, FIRST_WINDOW);
    if let Some(why) = &stats.whole_needed {
        let why = why.clone();
        return (results, stats, Err(why));
    }
    if stats.late == 0 {
        return (results, stats, Ok(()));
    }
    if stats.lateness_ns <= REORDER_WINDOW_NS {
        let (results, again) = pass(shape, events, stats.lateness_ns.into());
        if again.late == 0 && again.whole_needed.is_none() {
            return (results, again, Ok(()));
        }
    }
    let why = format!(
        "events arrived up to {} s out of file order: sorted in memory",
        stats.lateness_ns / 1_000_000_000
    );
    (results, stats, Err(why))
}

/// This process's peak resident set, kB.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn verdict(v: Validity) -> &'static str {
    match v {
        Validity::True => "VALID",
        Validity::False => "INVALID",
        Validity::Unknown => "UNKNOWN",
    }
}

/// `one SHAPE EVENTS`: one line, tab-separated: shape, events read,
/// verdict, wall s, peak RSS kB, and what else there is to say.
fn one(shape: &str, events: u64) {
    let start = Instant::now();
    let (results, stats, whole) = check(shape, events);
    let wall = start.elapsed().as_secs_f64();
    let mut notes: Vec<String> = Vec::new();
    if let Err(why) = whole {
        notes.push(format!("{WHOLE}: {why}"));
    }
    let found: Vec<String> = (results.anomalies.iter())
        .filter(|(_, a)| a.count > 0)
        .map(|(name, a)| format!("{name} x{}", a.count))
        .collect();
    if !found.is_empty() {
        notes.push(format!("anomalies: {}", found.join(", ")));
    }
    if results.valid != Validity::True {
        notes.extend(results.notes.iter().take(3).cloned());
    }
    println!(
        "{shape}\t{}\t{}\t{wall:.6}\t{}\t{}",
        stats.events,
        verdict(results.valid),
        peak_rss_kb(),
        notes.join("; ").replace(['\t', '\n'], " ")
    );
}

/// `gen SHAPE EVENTS`: the text alone, generated and rendered and thrown
/// away: wall s. `text SHAPE EVENTS`: the text, to stdout (a file to give
/// `lockstorm check`).
fn generate(shape: &str, events: u64, out: Option<&mut dyn Write>) {
    let start = Instant::now();
    let (mut text, _) = text(shape, events);
    let mut bytes = 0usize;
    let mut out = out;
    loop {
        let have = text.fill_buf().expect("rendering cannot fail");
        if have.is_empty() {
            break;
        }
        if let Some(out) = out.as_mut() {
            if out.write_all(have).is_err() {
                std::process::exit(255);
            }
        }
        let n = have.len();
        bytes += n;
        text.consume(n);
    }
    match out {
        Some(out) => {
            if out.flush().is_err() {
                std::process::exit(255);
            }
        }
        None => println!("{:.6}\t{bytes}", start.elapsed().as_secs_f64()),
    }
}

// ---------------------------------------------------------------- the parent

struct Row {
    shape: String,
    /// The size asked for; `events` is how many the check read.
    asked: u64,
    events: u64,
    verdict: String,
    wall: f64,
    rss_kb: u64,
    note: String,
    gen: Option<f64>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.events as f64 / self.wall.max(1e-9)
    }

    fn rss_mb(&self) -> f64 {
        self.rss_kb as f64 / 1024.0
    }
}

/// Runs this program again as `args`: its one line of output.
fn child(args: &[&str]) -> Option<String> {
    let exe = std::env::current_exe().expect("this program's path");
    let out = Command::new(exe)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("run a child");
    if !out.status.success() {
        eprintln!("shapes: `{}` failed: {}", args.join(" "), out.status);
        return None;
    }
    let line = String::from_utf8_lossy(&out.stdout);
    Some(line.trim_end_matches(['\n', '\r']).to_string())
}

fn measure(shape: &str, events: u64, gen: bool) -> Option<Row> {
    let size = events.to_string();
    let line = child(&["one", shape, &size])?;
    let f: Vec<&str> = line.splitn(6, '\t').collect();
    let [shape, n, verdict, wall, rss, note] = f[..] else {
        eprintln!("shapes: a child's line is not a figure: {line:?}");
        return None;
    };
    let gen = match gen {
        true => child(&["gen", shape, &size])?
            .split('\t')
            .next()
            .and_then(|s| s.parse().ok()),
        false => None,
    };
    Some(Row {
        shape: shape.into(),
        asked: events,
        events: n.parse().ok()?,
        verdict: verdict.into(),
        wall: wall.parse().ok()?,
        rss_kb: rss.parse().ok()?,
        note: note.into(),
        gen,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(mode @ ("one" | "gen" | "text")) = args.first().map(String::as_str) {
        let [_, shape, events] = &args[..] else {
            usage()
        };
        let events = number(events);
        match mode {
            "one" => one(shape, events),
            "gen" => generate(shape, events, None),
            _ => generate(shape, events, Some(&mut io::stdout().lock())),
        }
        return ExitCode::SUCCESS;
    }
    let mut sizes = Vec::new();
    let mut shapes: Vec<String> = SHAPES.iter().map(|s| s.to_string()).collect();
    let mut gen = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shapes" => {
                let list = it.next().unwrap_or_else(|| usage());
                shapes = list.split(',').map(str::to_string).collect();
            }
            "--no-gen" => gen = false,
            _ if a.starts_with('-') => usage(),
            _ => sizes.push(number(a)),
        }
    }
    if let Some(bad) = shapes.iter().find(|s| !SHAPES.contains(&s.as_str())) {
        eprintln!(
            "shapes: no shape {bad:?}; the shapes are {}",
            SHAPES.join(", ")
        );
        usage();
    }
    if sizes.is_empty() {
        sizes = vec![1_000_000, 10_000_000];
    }
    if cfg!(debug_assertions) {
        eprintln!("shapes: a debug build; the figures mean something with --release only");
    }

    let mut rows = Vec::new();
    let mut failed = false;
    for shape in &shapes {
        for &events in &sizes {
            eprintln!("shapes: {shape} at {events} events ...");
            match measure(shape, events, gen) {
                Some(row) => rows.push(row),
                None => failed = true,
            }
        }
    }

    println!("| shape | events | verdict | wall s | events/s | peak RSS MB | gen s | note |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let gen = r.gen.map_or(String::new(), |g| format!("{g:.2}"));
        println!(
            "| {} | {} | {} | {:.2} | {:.2} M | {:.1} | {gen} | {} |",
            r.shape,
            r.events,
            r.verdict,
            r.wall,
            r.rate() / 1e6,
            r.rss_mb(),
            r.note
        );
    }

    println!();
    // A history the harness would check whole, in memory, misses the
    // memory goal at any size, whatever this streamed pass held.
    let over: Vec<String> = rows
        .iter()
        .filter(|r| (r.asked >= GOAL_RSS_AT && r.rss_mb() >= GOAL_RSS_MB) || r.note.contains(WHOLE))
        .map(|r| match r.note.contains(WHOLE) {
            true => format!("{} at {}: checked whole, in memory", r.shape, r.asked),
            false => format!(
                "{} at {}: {:.1} MB, {:.1} MB over",
                r.shape,
                r.asked,
                r.rss_mb(),
                r.rss_mb() - GOAL_RSS_MB
            ),
        })
        .collect();
    let goal = format!("memory goal (< {GOAL_RSS_MB} MB at 10 M events)");
    if !over.is_empty() {
        println!("{goal}: MISSED by {}", over.join(", "));
    } else if rows.iter().any(|r| r.asked >= GOAL_RSS_AT) {
        println!("{goal}: met");
    } else {
        println!("{goal}: no run at 10 M");
    }
    let slow: Vec<String> = rows
        .iter()
        .filter(|r| r.rate() < GOAL_RATE)
        .map(|r| {
            format!(
                "{} at {}: {:.2} M events/s",
                r.shape,
                r.asked,
                r.rate() / 1e6
            )
        })
        .collect();
    match slow.is_empty() {
        _ if rows.is_empty() => println!("rate goal (>= 1 M events/s): no figures"),
        true => println!("rate goal (>= 1 M events/s): met"),
        false => println!("rate goal (>= 1 M events/s): MISSED by {}", slow.join(", ")),
    }

    failed |= rows.iter().any(|r| r.verdict != "VALID");
    match failed {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}
