//! A matrix's `summary.json` and `summary.md`: per config × nemesis, the
//! verdicts of its runs, the anomalies they found, and whether they met the
//! expectation. Plain data, so a stored matrix can be re-read and redrawn.

use crate::error::{doing, ReadError, Result};
use crate::layout::{read_json, write_json};
use crate::shard::Shard;
use crate::summary::verdict_word;
use checker::{Results, Validity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// The files of a matrix folder besides its pictures.
pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_MD: &str = "summary.md";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// When the matrix started, `YYYYMMDDTHHMMSS` (UTC).
    pub started: String,
    pub wall_s: f64,
    pub time_limit_s: u64,
    pub runs_per_pair: u32,
    /// Run k of every pair uses seed `seed + k`.
    pub seed: u64,
    /// The expectations file, if one was given.
    pub expect: Option<String>,
    /// Whether every expectation was met; `null` without expectations.
    pub ok: Option<bool>,
    pub rows: Vec<Row>,
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Expected pairs the matrix did not run.
    #[serde(default)]
    pub missing: Vec<String>,
    /// Stopped by Ctrl-C: the rows after the last are missing.
    #[serde(default)]
    pub interrupted: bool,
    /// `--shard K/N`: which part of the whole matrix this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardOf>,
    /// `--until-invalid`: a pair's runs stopped at its first invalid one.
    #[serde(default)]
    pub until_invalid: bool,
    /// A matrix merged by `lockstorm report` from its shards: their folders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

/// A shard, and the whole matrix it is part of: shards of one matrix have
/// the same `pairs` (and seed, time limit and runs per pair).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardOf {
    pub shard: Shard,
    /// Every pair of the whole matrix, `config × nemesis`, in its order.
    pub pairs: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub config: String,
    pub nemesis: String,
    pub runs: u32,
    pub valid: u32,
    pub invalid: u32,
    pub unknown: u32,
    /// Runs the harness itself could not complete (counted as unknown too).
    #[serde(default)]
    pub errors: Vec<String>,
    pub expected: Option<Expected>,
    pub matches: Option<bool>,
    /// Each anomaly summed over the runs.
    pub anomalies: BTreeMap<String, u64>,
    /// Client ops per second, averaged over the runs.
    pub ops_per_s: f64,
    /// Granted acquires per second, averaged over the runs that ended.
    #[serde(default)]
    pub cycles_per_s: f64,
    /// Each run's median time to a granted acquire, in ms (runs that
    /// granted none have none): the cost of the lock, beside its verdict.
    #[serde(default)]
    pub acquire_ms: Vec<f64>,
    /// Run folders, relative to the results folder.
    pub run_dirs: Vec<String>,
    /// A client adapter's library and version, as it said at `init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// Its place in the whole matrix (a shard runs some of them).
    #[serde(default)]
    pub pair: usize,
    /// Detection: faults injected over the runs, the runs' length, the
    /// anomalies that break the promise, and per run that found one after a
    /// fault, how long after its first fault the first anomaly came.
    #[serde(default)]
    pub faults: u64,
    #[serde(default)]
    pub duration_s: f64,
    #[serde(default)]
    pub counted_anomalies: u64,
    #[serde(default)]
    pub detection_s: Vec<f64>,
    /// Strikes at `acquiring` in a client adapter over the runs, summed.
    #[serde(default)]
    pub acquiring_strikes: checker::AcquiringStrikes,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub config: String,
    pub nemesis: String,
    pub reason: String,
}

/// The verdict `expectations.toml` asks of a config × nemesis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    /// Every run valid: an unknown verdict does not prove the promise.
    Valid,
    /// At least one run invalid: the harness caught the broken setup. Faults
    /// that need a race to go one way may take more than one run.
    Invalid,
}

impl Expected {
    /// Whether a pair's verdicts (how many runs, how many valid, how many
    /// invalid) meet this expectation: valid every time, or caught once.
    pub fn met_by(self, runs: u32, valid: u32, invalid: u32) -> bool {
        match self {
            Expected::Valid => runs > 0 && valid == runs,
            Expected::Invalid => invalid > 0,
        }
    }
}

/// As `expectations.toml` and `summary.json` spell it.
impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expected::Valid => "valid",
            Expected::Invalid => "invalid",
        })
    }
}

impl Row {
    pub fn new(config: &str, nemesis: &str) -> Self {
        Row {
            config: config.to_string(),
            nemesis: nemesis.to_string(),
            ..Row::default()
        }
    }

    pub fn add(&mut self, results: &Results, dir: String) {
        let ops = self.ops_per_s * f64::from(self.runs);
        self.runs += 1;
        match results.valid {
            Validity::True => self.valid += 1,
            Validity::False => self.invalid += 1,
            Validity::Unknown => self.unknown += 1,
        }
        for (name, a) in &results.anomalies {
            *self.anomalies.entry(name.clone()).or_default() += a.count;
        }
        self.ops_per_s = (ops + results.stats.ops_per_s) / f64::from(self.runs);
        let ended = f64::from(self.runs - u32::try_from(self.errors.len()).unwrap_or(0));
        self.cycles_per_s += (results.stats.cycles_per_s - self.cycles_per_s) / ended;
        self.acquire_ms.extend(results.stats.acquire_median_ms);
        self.run_dirs.push(dir);
        self.faults += results.stats.faults;
        self.duration_s += results.stats.duration_s;
        self.counted_anomalies += results.counted_anomalies();
        if let Some(ns) = results.detection_ns() {
            self.detection_s.push(ns as f64 / 1e9);
        }
        self.acquiring_strikes += &results.stats.acquiring_strikes;
    }

    /// The verdicts as a rate over the runs, the finding first: `invalid
    /// 2/3`, `valid 3/3`, with any unknown runs said apart (`invalid 1/3,
    /// unknown 1`): one run per cell can be luck.
    pub fn rate(&self) -> String {
        let mut rate = match self.invalid {
            0 => format!("valid {}/{}", self.valid, self.runs),
            n => format!("invalid {n}/{}", self.runs),
        };
        if self.unknown > 0 {
            let _ = write!(rate, ", unknown {}", self.unknown);
        }
        rate
    }

    /// How many strikes at `acquiring` froze the library before its
    /// decision, of all struck there, and how many of those it then
    /// granted with the frozen attempt's own value: `4 of 6, 3 handed back
    /// (1 without a token to tell)`; `–` if none struck there.
    pub fn before_decision(&self) -> String {
        let a = &self.acquiring_strikes;
        let all = a.before_decision + a.after_decision;
        let mut said = match (all, a.before_decision) {
            (0, _) => return "–".into(),
            (_, 0) => return format!("0 of {all}"),
            (_, n) => format!("{n} of {all}, {} handed back", a.granted_frozen),
        };
        if a.granted_untold > 0 {
            let _ = write!(
                said,
                " ({} granted without a token to tell)",
                a.granted_untold
            );
        }
        said
    }

    /// The median time from a run's first fault to its first anomaly.
    pub fn median_detection_s(&self) -> Option<f64> {
        checker::median(self.detection_s.clone())
    }

    /// The median of the runs' median times to a granted acquire, in ms.
    pub fn acquire_median_ms(&self) -> Option<f64> {
        checker::median(self.acquire_ms.clone())
    }

    /// Anomalies that break the promise per minute of running.
    pub fn anomalies_per_min(&self) -> f64 {
        match self.duration_s > 0.0 {
            true => self.counted_anomalies as f64 * 60.0 / self.duration_s,
            false => 0.0,
        }
    }

    pub fn add_error(&mut self, error: String) {
        let ops = self.ops_per_s * f64::from(self.runs);
        self.runs += 1;
        self.unknown += 1;
        self.ops_per_s = ops / f64::from(self.runs);
        self.errors.push(error);
    }

    /// VALID, INVALID or UNKNOWN when the runs agree, else the counts.
    pub fn verdicts(&self) -> String {
        let parts = [
            (self.valid, Validity::True),
            (self.invalid, Validity::False),
            (self.unknown, Validity::Unknown),
        ];
        let seen: Vec<_> = parts.iter().filter(|(n, _)| *n > 0).collect();
        match seen.as_slice() {
            [(_, v)] => verdict_word(*v).to_string(),
            _ => seen
                .iter()
                .map(|(n, v)| format!("{n} {}", verdict_word(*v)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

impl Summary {
    /// Reads `summary.json` from a matrix folder.
    pub fn read(dir: &Path) -> std::result::Result<Summary, ReadError> {
        read_json(&dir.join(SUMMARY_JSON))
    }

    /// Writes `summary.json` and `summary.md` into a matrix folder.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_json(&dir.join(SUMMARY_JSON), self)?;
        let path = dir.join(SUMMARY_MD);
        std::fs::write(&path, self.markdown()).map_err(doing(format!("writing {}", path.display())))
    }

    /// How fast each cell finds what it can find: runs, invalid runs,
    /// faults injected, the median time from a run's first fault to its
    /// first anomaly, and anomalies (that break the promise) per minute.
    fn detection(&self) -> String {
        let mut md = String::from(
            "\n## Detection\n\n| config | nemesis | runs | invalid | faults | first fault → first anomaly (median) | anomalies/min |\n|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {:.1} |",
                r.config,
                r.nemesis,
                r.runs,
                r.invalid,
                r.faults,
                r.median_detection_s()
                    .map_or("–".into(), |s| format!("{s:.1} s")),
                r.anomalies_per_min()
            );
        }
        md
    }

    /// One table per client adapter: its library and version, and what
    /// each config × nemesis × strike point found.
    fn findings(&self) -> String {
        let mut by_client: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
        for r in &self.rows {
            if let Some((_, client)) = r.config.split_once('.') {
                by_client.entry(client).or_default().push(r);
            }
        }
        let mut md = String::new();
        for (client, rows) in by_client {
            let library = rows
                .iter()
                .find_map(|r| r.library.as_deref())
                .unwrap_or("?");
            let _ = writeln!(md, "\n## Findings: {client} ({library})\n");
            let _ = writeln!(
                md,
                "| topology | nemesis | verdicts | anomalies found (over the runs) | strikes at acquiring before the decision, and the frozen attempts' locks the library handed back |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|");
            for r in rows {
                let found: Vec<String> = r
                    .anomalies
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(a, n)| format!("{a} {n}"))
                    .collect();
                let topology = r.config.split_once('.').map_or("", |(t, _)| t);
                let found = match found.is_empty() {
                    true => "none".to_string(),
                    false => found.join(", "),
                };
                let _ = writeln!(
                    md,
                    "| {topology} | {} | {} | {found} | {} |",
                    r.nemesis,
                    r.rate(),
                    r.before_decision()
                );
            }
        }
        md
    }

    /// A Markdown table: one row per config × nemesis.
    pub fn markdown(&self) -> String {
        let names: Vec<&String> = self
            .rows
            .iter()
            .flat_map(|r| r.anomalies.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# lockstorm matrix {}\n\n{}{}, {} run(s) each, {} s per run, seeds from {}; wall time {:.0} s.{}\n",
            self.started,
            match self.interrupted {
                true => "**Interrupted** (Ctrl-C): the verdicts below are incomplete. ",
                false => "",
            },
            match &self.shard {
                Some(s) => format!(
                    "{} pair(s) (shard {} of the matrix's {})",
                    self.rows.len(),
                    s.shard,
                    s.pairs.len()
                ),
                None => format!("{} pair(s)", self.rows.len()),
            },
            self.runs_per_pair,
            self.time_limit_s,
            self.seed,
            self.wall_s,
            match (self.ok, &self.expect) {
                _ if self.until_invalid && self.ok.is_none() => {
                    " A pair's runs stop at its first invalid one.".to_string()
                }
                (Some(true), Some(f)) => format!(" Every expectation in `{f}` met."),
                (Some(false), Some(f)) => format!(" **Expectations in `{f}` NOT met.**"),
                _ => String::new(),
            }
        );
        let mut header = vec!["config", "nemesis", "runs", "verdicts", "expected", "match"];
        header.extend(names.iter().map(|n| n.as_str()));
        header.extend(["ops/s", "lock cycles/s", "acquire ms (median)"]);
        let _ = writeln!(md, "| {} |", header.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
        for r in &self.rows {
            let mut cells = vec![
                r.config.clone(),
                r.nemesis.clone(),
                r.runs.to_string(),
                r.verdicts(),
                r.expected.map_or("–".into(), |e| e.to_string()),
                match r.matches {
                    Some(true) => "✓".into(),
                    Some(false) => "**✗**".into(),
                    None => "–".into(),
                },
            ];
            cells.extend(
                names
                    .iter()
                    .map(|n| r.anomalies.get(*n).copied().unwrap_or(0).to_string()),
            );
            cells.push(format!("{:.1}", r.ops_per_s));
            cells.push(format!("{:.1}", r.cycles_per_s));
            cells.push(
                r.acquire_median_ms()
                    .map_or("–".into(), |ms| format!("{ms:.2}")),
            );
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        md += &self.detection();
        md += &self.findings();
        for m in &self.missing {
            let _ = writeln!(md, "\nExpected but not run: {m}.");
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(
                md,
                "\nSkipped (refused as `lockstorm run` would refuse it):\n"
            );
            for s in &self.skipped {
                let _ = writeln!(md, "- {} × {}: {}", s.config, s.nemesis, s.reason);
            }
        }
        for r in self.rows.iter().filter(|r| !r.errors.is_empty()) {
            let _ = writeln!(
                md,
                "\n{} × {} failed to run: {}",
                r.config,
                r.nemesis,
                r.errors.join("; ")
            );
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use checker::{Anomaly, Promise};

    fn results(valid: Validity, overlaps: u64, ops_per_s: f64) -> Results {
        let mut r = Results {
            valid,
            promise: Promise::MutualExclusion,
            anomalies: Default::default(),
            checkers: Default::default(),
            stats: Default::default(),
            notes: Vec::new(),
            incidents: Vec::new(),
        };
        let a = Anomaly {
            count: overlaps,
            ..Anomaly::default()
        };
        r.anomalies.insert("lock-overlap".into(), a);
        r.stats.ops_per_s = ops_per_s;
        r
    }

    #[test]
    fn a_row_sums_anomalies_and_averages_the_rate() {
        let mut row = Row::new("single", "pause");
        row.add(&results(Validity::False, 3, 10.0), "a".into());
        row.add(&results(Validity::True, 0, 20.0), "b".into());
        assert_eq!((row.runs, row.valid, row.invalid), (2, 1, 1));
        assert_eq!(row.anomalies["lock-overlap"], 3);
        assert_eq!(row.ops_per_s, 15.0);
        assert_eq!(row.verdicts(), "1 VALID, 1 INVALID");
        assert_eq!(row.rate(), "invalid 1/2");
        row.add_error("redis-server crashed".into());
        assert_eq!((row.runs, row.unknown), (3, 1));
        assert_eq!(row.rate(), "invalid 1/3, unknown 1");
        let mut valid = Row::new("single", "none");
        valid.add(&results(Validity::True, 0, 1.0), "d".into());
        assert_eq!(valid.rate(), "valid 1/1");
        assert_eq!(row.ops_per_s, 10.0);
    }

    #[test]
    fn a_rows_cost_is_its_runs_lock_cycles_and_their_median_acquire() {
        let mut row = Row::new("etcd", "none");
        for (cycles, acquire) in [(70.0, Some(9.0)), (80.0, Some(5.0)), (90.0, Some(7.0))] {
            let mut r = results(Validity::True, 0, 1.0);
            r.stats.cycles_per_s = cycles;
            r.stats.acquire_median_ms = acquire;
            row.add(&r, "a".into());
        }
        // A run that could not run is no run's cost.
        row.add_error("etcd would not start".into());
        let mut none = results(Validity::True, 0, 1.0);
        none.stats.cycles_per_s = 80.0;
        row.add(&none, "b".into());
        assert_eq!(row.cycles_per_s, 80.0);
        assert_eq!(row.acquire_median_ms(), Some(7.0));
        assert_eq!(Row::new("x", "none").acquire_median_ms(), None);
    }

    #[test]
    fn a_row_measures_detection_over_its_runs() {
        let s = 1_000_000_000;
        let run = |faults: u64, fault: Option<u64>, anomaly: Option<u64>, overlaps: u64| {
            let mut r = results(Validity::False, overlaps, 1.0);
            r.stats.faults = faults;
            r.stats.duration_s = 30.0;
            r.stats.first_fault_time = fault;
            r.anomalies.get_mut("lock-overlap").unwrap().first_time = anomaly;
            r
        };
        let mut row = Row::new("single", "pause");
        row.add(&run(4, Some(2 * s), Some(5 * s), 6), "a".into());
        row.add(&run(3, Some(2 * s), Some(3 * s), 2), "b".into());
        // Before any fault: counted, but no detection time.
        row.add(&run(0, None, Some(s), 1), "c".into());
        assert_eq!((row.faults, row.counted_anomalies), (7, 9));
        assert_eq!(row.detection_s, [3.0, 1.0]);
        assert_eq!(row.median_detection_s(), Some(2.0));
        assert_eq!(row.anomalies_per_min(), 6.0); // 9 in 90 s
        let md = Summary {
            rows: vec![row],
            ..Summary::default()
        }
        .markdown();
        assert!(
            md.contains("| single | pause | 3 | 3 | 7 | 2.0 s | 6.0 |"),
            "{md}"
        );
        assert_eq!(Row::new("x", "none").median_detection_s(), None);
    }

    #[test]
    fn each_client_gets_a_findings_table_with_its_library() {
        let mut s = Summary::default();
        let mut row = Row::new("redlock.pottery", "pause@acquiring");
        let mut struck = results(Validity::True, 0, 10.0);
        struck.stats.acquiring_strikes = checker::AcquiringStrikes {
            before_decision: 2,
            after_decision: 1,
            granted_frozen: 1,
            ..Default::default()
        };
        row.add(&struck, "a".into());
        let mut struck = results(Validity::False, 2, 10.0);
        struck.stats.acquiring_strikes.before_decision = 3;
        struck.stats.acquiring_strikes.granted_untold = 2;
        row.add(&struck, "b".into());
        row.add(&results(Validity::True, 0, 10.0), "c".into());
        row.library = Some("pottery 3.0.1".into());
        s.rows.push(row);
        let mut row = Row::new("single", "pause");
        row.add(&results(Validity::False, 4, 10.0), "b".into());
        s.rows.push(row);
        let md = s.markdown();
        assert!(md.contains("## Findings: pottery (pottery 3.0.1)"), "{md}");
        assert!(
            md.contains(
                "| redlock | pause@acquiring | invalid 1/3 | lock-overlap 2 | 5 of 6, 1 handed back (2 granted without a token to tell) |"
            ),
            "{md}"
        );
        assert_eq!(
            md.matches("## Findings").count(),
            1,
            "built-in locks have none: {md}"
        );
    }

    /// Whether `valid`, `invalid` and `unknown` runs meet `expected`.
    fn matches(expected: Expected, (valid, invalid, unknown): (u32, u32, u32)) -> bool {
        expected.met_by(valid + invalid + unknown, valid, invalid)
    }

    #[test]
    fn valid_needs_every_run_valid_and_invalid_one_caught() {
        assert!(matches(Expected::Valid, (2, 0, 0)));
        assert!(!matches(Expected::Valid, (1, 0, 1)));
        assert!(!matches(Expected::Valid, (0, 0, 0)));
        assert!(matches(Expected::Invalid, (2, 1, 0)));
        assert!(!matches(Expected::Invalid, (3, 0, 0)));
    }
}
