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
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    /// Every run valid: an unknown verdict does not prove the promise.
    Valid,
    /// At least one run invalid: the harness caught the broken setup. Faults
    /// that need a race to go one way may take more than one run.
    Invalid,
}

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
            // `single`, or a client adapter on a topology: `single.redis-py`.
            let (c, client) =
                crate::clients::parse_setup(&config).map_err(|e| format!("[{config}]: {e}"))?;
            let c = crate::clients::setup_name(c, client.as_ref());
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

    /// Whether `valid`, `invalid` and `unknown` runs meet `expected`.
    fn matches(expected: Expected, (valid, invalid, unknown): (u32, u32, u32)) -> bool {
        expected.met_by(valid + invalid + unknown, valid, invalid)
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
    fn valid_needs_every_run_valid_and_invalid_one_caught() {
        assert!(matches(Expected::Valid, (2, 0, 0)));
        assert!(!matches(Expected::Valid, (1, 0, 1)));
        assert!(!matches(Expected::Valid, (0, 0, 0)));
        assert!(matches(Expected::Invalid, (2, 1, 0)));
        assert!(!matches(Expected::Invalid, (3, 0, 0)));
    }
}
