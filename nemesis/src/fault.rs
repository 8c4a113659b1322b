//! The faults lockstorm can inject, and `--nemesis` parsing.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGSTOP the lock holder in its critical section, for longer than the TTL.
    Pause,
    /// SIGSTOP the node the lock lives on (the primary, for `replicated`).
    PauseNode,
    /// SIGKILL that node right after an acquisition; restart it later.
    Kill,
    /// Partition the primary from its replicas, kill it after an
    /// acquisition, heal once Sentinel has promoted a replica.
    Failover,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::Pause, Fault::PauseNode, Fault::Kill, Fault::Failover];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Pause => "pause",
            Fault::PauseNode => "pause-node",
            Fault::Kill => "kill",
            Fault::Failover => "failover",
        }
    }

    /// Faults that cut links need iptables and root.
    pub fn needs_firewall(self) -> bool {
        self == Fault::Failover
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `--nemesis` asked for: a set of faults (empty for `none`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Nemesis {
    pub faults: Vec<Fault>,
}

impl Nemesis {
    pub fn none() -> Self {
        Nemesis::default()
    }

    /// Valid names for error messages.
    pub fn names() -> String {
        let mut names = vec!["none"];
        names.extend(Fault::ALL.map(Fault::name));
        names.push("all");
        names.join(", ")
    }
}

impl fmt::Display for Nemesis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.faults.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<_> = self.faults.iter().map(|f| f.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for Nemesis {
    type Err = String;
    /// A comma-separated list; `none` alone, or `all` for every fault.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut faults = Vec::new();
        for name in s.split(',').map(str::trim) {
            match name {
                "none" => {}
                "all" => faults.extend(Fault::ALL),
                _ => faults.push(
                    Fault::ALL
                        .into_iter()
                        .find(|f| f.name() == name)
                        .ok_or_else(|| {
                            format!("unknown nemesis '{name}': choose from {}", Nemesis::names())
                        })?,
                ),
            }
        }
        faults.sort();
        faults.dedup();
        Ok(Nemesis { faults })
    }
}

impl From<Nemesis> for String {
    fn from(n: Nemesis) -> String {
        n.to_string()
    }
}

impl TryFrom<String> for Nemesis {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_none_and_all() {
        assert_eq!("none".parse::<Nemesis>().unwrap().faults, vec![]);
        assert_eq!(
            "pause-node,pause".parse::<Nemesis>().unwrap().faults,
            vec![Fault::Pause, Fault::PauseNode]
        );
        assert_eq!(
            "all".parse::<Nemesis>().unwrap().faults,
            Fault::ALL.to_vec()
        );
        assert_eq!(
            "pause,pause-node".parse::<Nemesis>().unwrap().to_string(),
            "pause,pause-node"
        );
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let err = "pause,gc".parse::<Nemesis>().unwrap_err();
        assert_eq!(
            err,
            "unknown nemesis 'gc': choose from none, pause, pause-node, kill, failover, all"
        );
    }
}
