//! `expectations.toml`: the verdict each config must give under each
//! nemesis, so a nightly matrix fails when a safe setup breaks or when the
//! harness stops catching a broken one.
//!
//! ```toml
//! [fenced]
//! pause = "valid"
//! [redlock]
//! "partition+clock" = "invalid"
//! ```

use nemesis::Aimed;
use std::collections::BTreeMap;
use store::matrix::{Expected, Summary};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expectations {
    /// (config, nemesis as `Nemesis` prints it) → verdict.
    by_pair: BTreeMap<(String, String), Expected>,
}

impl Expectations {
    /// Parses and checks every name, so a typo fails before any run starts.
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: BTreeMap<String, BTreeMap<String, Expected>> =
            toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        let mut by_pair = BTreeMap::new();
        for (config, nemeses) in table {
            // `single`, a client adapter on a topology (`single.redis-py`),
            // either with its counter in PostgreSQL (`fenced+postgres`).
            let (c, client, storage) =
                crate::clients::parse_setup(&config).map_err(|e| format!("[{config}]: {e}"))?;
            let c = crate::clients::setup_name(c, client.as_ref(), storage);
            for (nemesis, expected) in nemeses {
                let n: Aimed = nemesis
                    .parse()
                    .map_err(|e| format!("[{config}] {nemesis}: {e}"))?;
                by_pair.insert((c.clone(), n.to_string()), expected);
            }
        }
        Ok(Expectations { by_pair })
    }

    /// The expectation for a pair, whichever way its nemesis is spelled.
    pub fn get(&self, config: &str, nemesis: &str) -> Option<Expected> {
        let nemesis = nemesis
            .parse::<Aimed>()
            .map_or(nemesis.to_string(), |n| n.to_string());
        self.by_pair.get(&(config.to_string(), nemesis)).copied()
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str, Expected)> {
        self.by_pair
            .iter()
            .map(|((c, n), e)| (c.as_str(), n.as_str(), *e))
    }

    /// Sets each row of a matrix's summary to its expectation and whether
    /// it was met, lists the pairs expected but not run, and sets `ok`.
    pub fn judge(&self, summary: &mut Summary) {
        for row in &mut summary.rows {
            row.expected = self.get(&row.config, &row.nemesis);
            row.matches = row
                .expected
                .map(|e| e.met_by(row.runs, row.valid, row.invalid));
        }
        let ran = |c: &str, n: &str| summary.rows.iter().any(|r| r.config == c && r.nemesis == n);
        let skipped = |c: &str, n: &str| {
            summary
                .skipped
                .iter()
                .any(|s| s.config == c && s.nemesis == n)
        };
        // Only pairs the matrix was asked for and could not run count as
        // missing: a short matrix checks a subset of the same file.
        summary.missing = self
            .pairs()
            .filter(|(c, n, _)| !ran(c, n) && skipped(c, n))
            .map(|(c, n, _)| format!("{c} × {n}"))
            .collect();
        let all_match = summary.rows.iter().all(|r| r.matches != Some(false));
        summary.ok = Some(all_match && summary.missing.is_empty());
    }
}

/// The repository's expectations, as built in: what each setup is
/// documented to do under each fault.
pub const SHIPPED: &str = include_str!("../../../expectations.toml");

/// What a run's verdict means against the shipped expectations, in one
/// line for the summary: the documented finding (with its reason, the
/// file's comment on the pair), or a verdict against it. `None` where the
/// file says nothing of the pair, or the run was not decided.
pub fn documented(config: &str, nemesis: &str, valid: checker::Validity) -> Option<String> {
    let expected = Expectations::parse(SHIPPED).ok()?.get(config, nemesis)?;
    let why = reason(SHIPPED, config, nemesis)
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let word = |v: checker::Validity| store::summary::verdict_word(v);
    let (want, got) = match expected {
        Expected::Valid => (checker::Validity::True, valid),
        Expected::Invalid => (checker::Validity::False, valid),
    };
    match got {
        checker::Validity::Unknown => None,
        g if g == want => Some(format!(
            "documented: {} is what expectations.toml says {config} × {nemesis} gives{why} ({})",
            word(g),
            match expected {
                Expected::Invalid => "the finding, not a failure of the tool",
                Expected::Valid => "it keeps its promise under this fault",
            }
        )),
        g => Some(format!(
            "documented: expectations.toml says {config} × {nemesis} gives {}{why}; this run gave {}: run it again (a race may need more than one run), then read the chain",
            word(want),
            word(g)
        )),
    }
}

/// The comment on a pair's line in an expectations file, if it has one.
fn reason(text: &str, config: &str, nemesis: &str) -> Option<String> {
    let same = |n: &str| {
        let parsed = |s: &str| s.parse::<Aimed>().map_or(s.to_string(), |a| a.to_string());
        parsed(n) == parsed(nemesis)
    };
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim_matches('"').to_string();
            continue;
        }
        let (Some((key, _)), Some((_, comment))) = (line.split_once('='), line.split_once('#'))
        else {
            continue;
        };
        if section == config && same(key.trim().trim_matches('"')) {
            return Some(comment.trim().to_string());
        }
    }
    None
}

/// toml's errors span several lines with a source excerpt; one line is the rule.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.starts_with("-->"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::matrix::{Row, Skipped};

    #[test]
    fn a_run_s_verdict_is_read_against_the_documented_one() {
        use checker::Validity;
        let found = documented("redlock", "pause", Validity::False).unwrap();
        assert!(found.contains("INVALID is what expectations.toml says redlock × pause gives: no lease survives a pause longer than the TTL (the finding"), "{found}");
        let against = documented("fenced", "pause", Validity::False).unwrap();
        assert!(
            against.contains("says fenced × pause gives VALID"),
            "{against}"
        );
        assert!(against.contains("this run gave INVALID"), "{against}");
        assert_eq!(documented("redlock", "pause", Validity::Unknown), None);
        assert_eq!(documented("single.custom", "pause", Validity::False), None);
        // An aimed nemesis, quoted in the file.
        let aimed = documented("single", "pause@read", Validity::False).unwrap();
        assert!(aimed.contains("frozen before its check"), "{aimed}");
    }

    #[test]
    fn names_are_normalised_and_checked() {
        let e = Expectations::parse(
            "[fenced]\npause = \"valid\"\n[redlock]\n\"clock+partition\" = \"invalid\"\n",
        )
        .unwrap();
        assert_eq!(e.get("fenced", "pause"), Some(Expected::Valid));
        // Either spelling, any order: the nemesis is what it parses to.
        assert_eq!(e.get("redlock", "clock,partition"), Some(Expected::Invalid));
        assert_eq!(e.get("fenced", "kill"), None);
        assert_eq!(e.pairs().count(), 2);
        assert!(
            e.pairs().any(|(_, n, _)| n == "partition+clock"),
            "one spelling"
        );
    }

    #[test]
    fn a_client_adapter_on_a_topology_is_a_setup_of_its_own() {
        let e = Expectations::parse("[\"single.redis-py\"]\npause = \"invalid\"\n").unwrap();
        assert_eq!(e.get("single.redis-py", "pause"), Some(Expected::Invalid));
        assert_eq!(e.get("single", "pause"), None, "not the built-in lock");
        let err = Expectations::parse("[\"single.redis-pie\"]\npause = \"invalid\"\n").unwrap_err();
        assert!(err.contains("unknown client 'redis-pie'"), "{err}");
    }

    #[test]
    fn the_shipped_expectations_parse_and_keep_the_fenced_promise() {
        let e = Expectations::parse(include_str!("../../../expectations.toml")).unwrap();
        assert_eq!(e.get("fenced", "pause"), Some(Expected::Valid));
        assert_eq!(e.get("redlock", "partition,clock"), Some(Expected::Invalid));
        let controls = [
            "unsafe-del",
            "unsafe-get-del",
            "unsafe-setnx",
            "unsafe-key-per-worker",
            "no-lock",
        ];
        for control in controls {
            assert_eq!(
                e.get(control, "pause"),
                Some(Expected::Invalid),
                "{control}"
            );
        }
        assert_eq!(
            e.get("unsafe-key-per-worker", "none"),
            Some(Expected::Invalid)
        );
        assert_eq!(e.get("watchdog", "none"), Some(Expected::Valid));
    }

    #[test]
    fn a_typo_is_one_line_naming_it() {
        let err = Expectations::parse("[fencd]\npause = \"valid\"\n").unwrap_err();
        assert!(err.contains("fencd"), "{err}");
        let err = Expectations::parse("[fenced]\npase = \"valid\"\n").unwrap_err();
        assert!(err.contains("pase"), "{err}");
        let err = Expectations::parse("[fenced]\npause = \"safe\"\n").unwrap_err();
        assert!(!err.contains('\n') && err.contains("safe"), "{err}");
    }

    #[test]
    fn judging_marks_mismatches_and_expected_pairs_that_could_not_run() {
        let e = Expectations::parse(
            "[fenced]\npause = \"valid\"\nkill = \"valid\"\n[single]\npause = \"invalid\"\nnone = \"valid\"\n",
        )
        .unwrap();
        let valid_run = |config: &str, overlaps: u64| Row {
            runs: 1,
            valid: 1,
            anomalies: [("lock-overlap".to_string(), overlaps)].into(),
            ops_per_s: 1.0,
            ..Row::new(config, "pause")
        };
        let mut s = Summary {
            rows: vec![valid_run("fenced", 2), valid_run("single", 0)],
            ..Summary::default()
        };
        e.judge(&mut s);
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
        e.judge(&mut s);
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
