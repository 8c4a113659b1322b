//! The lock setups lockstorm can test, and what each promises.

use checker::Promise;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// One node; `SET NX PX`, compare-and-delete release.
    Single,
    /// A primary, two replicas and three Sentinels; the client finds the
    /// primary through Sentinel.
    Replicated,
    /// Redlock on five independent nodes (our own client).
    Redlock,
    /// The same five nodes, driven by the published `rslock` crate.
    RedlockRslock,
    /// `single` plus a fencing token checked by the storage.
    Fenced,
    /// `single` plus a renewal thread that keeps extending the held lease.
    Watchdog,
    /// Negative control: release with a plain `DEL`.
    UnsafeDel,
    /// Negative control: release as `GET`, compare in the client, `DEL`.
    UnsafeGetDel,
    /// Negative control: `SETNX` then `PEXPIRE` as two commands.
    UnsafeSetnx,
    /// Negative control: each worker locks a key of its own.
    UnsafeKeyPerWorker,
    /// Negative control: a "lock" that grants every request.
    NoLock,
}

impl Config {
    pub const ALL: [Config; 11] = [
        Config::Single,
        Config::Replicated,
        Config::Redlock,
        Config::RedlockRslock,
        Config::Fenced,
        Config::Watchdog,
        Config::UnsafeDel,
        Config::UnsafeGetDel,
        Config::UnsafeSetnx,
        Config::UnsafeKeyPerWorker,
        Config::NoLock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Config::Single => "single",
            Config::Replicated => "replicated",
            Config::Redlock => "redlock",
            Config::RedlockRslock => "redlock-rslock",
            Config::Fenced => "fenced",
            Config::Watchdog => "watchdog",
            Config::UnsafeDel => "unsafe-del",
            Config::UnsafeGetDel => "unsafe-get-del",
            Config::UnsafeSetnx => "unsafe-setnx",
            Config::UnsafeKeyPerWorker => "unsafe-key-per-worker",
            Config::NoLock => "no-lock",
        }
    }

    /// Fenced configs promise data safety; the rest promise mutual exclusion.
    pub fn fenced(self) -> bool {
        self == Config::Fenced
    }

    /// What the config claims, and so which anomalies fail its runs.
    pub fn promise(self) -> Promise {
        if self.fenced() {
            Promise::DataSafety
        } else {
            Promise::MutualExclusion
        }
    }

    /// A lock broken on purpose: the harness must catch it (exhaustive, so a
    /// new config says which it is).
    pub fn negative_control(self) -> bool {
        match self {
            Config::Single
            | Config::Replicated
            | Config::Redlock
            | Config::RedlockRslock
            | Config::Fenced
            | Config::Watchdog => false,
            Config::UnsafeDel
            | Config::UnsafeGetDel
            | Config::UnsafeSetnx
            | Config::UnsafeKeyPerWorker
            | Config::NoLock => true,
        }
    }

    pub fn has_lock_node(self) -> bool {
        self != Config::NoLock
    }

    /// A hold's key lives at most one TTL after it was granted. Not so for
    /// `watchdog`, which extends it while held, nor without a lock node.
    pub fn lease_is_ttl(self) -> bool {
        self.has_lock_node() && self != Config::Watchdog
    }

    /// How many independent lock nodes the config runs (replicas aside).
    pub fn lock_nodes(self) -> usize {
        match self {
            Config::NoLock => 0,
            Config::Redlock | Config::RedlockRslock => 5,
            _ => 1,
        }
    }

    pub fn names() -> String {
        Config::ALL.map(Config::name).join(", ")
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Config {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Config::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown config '{s}': choose one of {}", Config::names()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_list_the_valid_ones() {
        for c in Config::ALL {
            assert_eq!(c.name().parse::<Config>().unwrap(), c);
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
        let err = "redlok".parse::<Config>().unwrap_err();
        assert!(
            err.contains(
                "single, replicated, redlock, redlock-rslock, fenced, watchdog, unsafe-del, \
                 unsafe-get-del, unsafe-setnx, unsafe-key-per-worker, no-lock"
            ),
            "{err}"
        );
        assert!(Config::Single.lease_is_ttl());
        assert!(!Config::Watchdog.lease_is_ttl(), "renewed while held");
        assert!(!Config::NoLock.lease_is_ttl(), "no key at all");
    }
}
