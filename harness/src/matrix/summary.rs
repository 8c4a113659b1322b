//! A matrix's `summary.json` and `summary.md`: per config × nemesis, the
//! verdicts of its runs, the anomalies they found, and whether they met the
//! expectation. Plain data, so a stored matrix can be re-read and redrawn.

use super::expect::{self, Expectations, Expected};
use crate::summary::verdict_word;
use checker::{Results, Validity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

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
    /// A matrix merged by `lockstorm report` from its shards: their folders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
}

/// A shard, and the whole matrix it is part of: shards of one matrix have
/// the same `pairs` (and seed, time limit and runs per pair).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardOf {
    pub shard: super::shard::Shard,
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
    /// Run folders, relative to the results folder.
    pub run_dirs: Vec<String>,
    /// A client adapter's library and version, as it said at `init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// Its place in the whole matrix (a shard runs some of them).
    #[serde(default)]
    pub pair: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub config: String,
    pub nemesis: String,
    pub reason: String,
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
        self.run_dirs.push(dir);
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
                "| topology | nemesis | runs | verdicts | anomalies found |"
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
                    "| {topology} | {} | {} | {} | {found} |",
                    r.nemesis,
                    r.runs,
                    r.verdicts()
                );
            }
        }
        md
    }

    /// Sets each row's expectation and match, the pairs expected but not
    /// run, and the overall `ok`.
    pub fn judge(&mut self, expectations: &Expectations) {
        for row in &mut self.rows {
            row.expected = expectations.get(&row.config, &row.nemesis);
            row.matches = row.expected.map(|e| expect::matches(e, row));
        }
        let ran = |c: &str, n: &str| self.rows.iter().any(|r| r.config == c && r.nemesis == n);
        let skipped =
            |c: &str, n: &str| self.skipped.iter().any(|s| s.config == c && s.nemesis == n);
        // Only pairs the matrix was asked for and could not run count as
        // missing: a short matrix checks a subset of the same file.
        self.missing = expectations
            .pairs()
            .filter(|(c, n, _)| !ran(c, n) && skipped(c, n))
            .map(|(c, n, _)| format!("{c} × {n}"))
            .collect();
        let all_match = self.rows.iter().all(|r| r.matches != Some(false));
        self.ok = Some(all_match && self.missing.is_empty());
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
                (Some(true), Some(f)) => format!(" Every expectation in `{f}` met."),
                (Some(false), Some(f)) => format!(" **Expectations in `{f}` NOT met.**"),
                _ => String::new(),
            }
        );
        let mut header = vec!["config", "nemesis", "runs", "verdicts", "expected", "match"];
        header.extend(names.iter().map(|n| n.as_str()));
        header.push("ops/s");
        let _ = writeln!(md, "| {} |", header.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
        for r in &self.rows {
            let mut cells = vec![
                r.config.clone(),
                r.nemesis.clone(),
                r.runs.to_string(),
                r.verdicts(),
                r.expected
                    .map_or("–".into(), |e| format!("{e:?}").to_lowercase()),
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
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
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
        row.add_error("redis-server crashed".into());
        assert_eq!((row.runs, row.unknown), (3, 1));
        assert_eq!(row.ops_per_s, 10.0);
    }

    #[test]
    fn each_client_gets_a_findings_table_with_its_library() {
        let mut s = Summary::default();
        let mut row = Row::new("redlock.pottery", "pause@acquiring");
        row.add(&results(Validity::True, 0, 10.0), "a".into());
        row.library = Some("pottery 3.0.1".into());
        s.rows.push(row);
        let mut row = Row::new("single", "pause");
        row.add(&results(Validity::False, 4, 10.0), "b".into());
        s.rows.push(row);
        let md = s.markdown();
        assert!(md.contains("## Findings: pottery (pottery 3.0.1)"), "{md}");
        assert!(
            md.contains("| redlock | pause@acquiring | 1 | VALID | none |"),
            "{md}"
        );
        assert_eq!(
            md.matches("## Findings").count(),
            1,
            "built-in locks have none: {md}"
        );
    }

    #[test]
    fn judging_marks_mismatches_and_expected_pairs_that_could_not_run() {
        let e = Expectations::parse(
            "[fenced]\npause = \"valid\"\nkill = \"valid\"\n[single]\npause = \"invalid\"\nnone = \"valid\"\n",
        )
        .unwrap();
        let mut s = Summary::default();
        let mut fenced = Row::new("fenced", "pause");
        fenced.add(&results(Validity::True, 2, 1.0), "f".into());
        let mut single = Row::new("single", "pause");
        single.add(&results(Validity::True, 0, 1.0), "s".into());
        s.rows = vec![fenced, single];
        s.judge(&e);
        assert_eq!(s.rows[0].matches, Some(true));
        assert_eq!(s.rows[1].matches, Some(false), "single must be caught");
        assert_eq!(s.ok, Some(false));
        // Not asked for: single × none and fenced × kill are not missing.
        assert!(s.missing.is_empty(), "{:?}", s.missing);

        s.rows.pop();
        s.skipped.push(Skipped {
            config: "fenced".into(),
            nemesis: "kill".into(),
            reason: "x".into(),
        });
        s.judge(&e);
        assert_eq!(s.missing, vec!["fenced × kill"]);
        assert_eq!(s.ok, Some(false));
        let md = s.markdown();
        assert!(
            md.contains("| fenced | pause | 1 | VALID | valid | ✓ | 2 |"),
            "{md}"
        );
        assert!(md.contains("Expected but not run: fenced × kill"), "{md}");
    }
}
