//! One run's options: parsed from the command line, resolved, and stored in
//! `run.json` so a run can be repeated exactly.

use crate::error::{Error, Result};
use clap::{Args, ValueEnum};
use nemesis::{Fault, Nemesis};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use workloads::Config;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Each node is a `redis-server` child process on 127.0.0.1.
    Local,
}

#[derive(Clone, Debug, PartialEq, Args, Serialize, Deserialize)]
pub struct RunOptions {
    /// Lock setup to test: single, fenced, unsafe-del, unsafe-setnx, no-lock.
    #[arg(long, default_value = "single", value_parser = parse_config)]
    pub config: Config,
    /// Faults, comma-separated: none, pause, pause-node, all.
    #[arg(long, default_value = "none", value_parser = parse_nemesis)]
    pub nemesis: Nemesis,
    /// Seconds the workers run.
    #[arg(long, default_value_t = 30)]
    pub time_limit: u64,
    /// Worker processes contending for the lock.
    #[arg(long, default_value_t = 5)]
    pub workers: u64,
    /// Lock lease (TTL) in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub ttl_ms: u64,
    /// Time a holder spends between reading and writing the counter.
    #[arg(long, default_value_t = 200)]
    pub work_ms: u64,
    /// Seed for the fault schedule and the workers' jitter [default: random, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, value_enum, default_value = "local")]
    pub backend: Backend,
    /// Folder that receives `<config>-<nemesis>/<timestamp>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// How long `pause`/`pause-node` freeze their target [default: 1.5 × TTL].
    #[arg(long)]
    pub pause_ms: Option<u64>,
    /// Mean quiet time between faults.
    #[arg(long, default_value_t = 5000)]
    pub nemesis_interval_ms: u64,
    /// Workers write even when their own clock says the lease has expired.
    #[arg(long)]
    pub no_validity_check: bool,
    /// How long one acquire op retries before failing [default: 2 × TTL].
    #[arg(long)]
    pub acquire_timeout_ms: Option<u64>,
    /// Socket timeout for one Redis request; a timeout makes the op `info`.
    #[arg(long, default_value_t = 500)]
    pub op_timeout_ms: u64,
}

fn parse_config(s: &str) -> Result<Config, String> {
    s.parse()
}

fn parse_nemesis(s: &str) -> Result<Nemesis, String> {
    s.parse()
}

impl RunOptions {
    /// Defaults for a config and nemesis, as the command line would give them.
    pub fn new(config: Config, nemesis: Nemesis) -> Self {
        RunOptions {
            config,
            nemesis,
            time_limit: 30,
            workers: 5,
            ttl_ms: 2000,
            work_ms: 200,
            seed: None,
            backend: Backend::Local,
            results: PathBuf::from("results"),
            pause_ms: None,
            nemesis_interval_ms: 5000,
            no_validity_check: false,
            acquire_timeout_ms: None,
            op_timeout_ms: 500,
        }
    }

    /// Fills every default that depends on other options and checks the
    /// combination, so `run.json` records exactly what ran.
    pub fn resolve(mut self) -> Result<Self> {
        let usage = |m: String| Err(Error::Usage(m));
        if !(1..=64).contains(&self.workers) {
            return usage(format!(
                "--workers {} is out of range: use 1 to 64",
                self.workers
            ));
        }
        if self.ttl_ms < 10 {
            return usage(format!(
                "--ttl-ms {} is too short: use at least 10",
                self.ttl_ms
            ));
        }
        if self.time_limit == 0 {
            return usage("--time-limit 0 runs nothing: use at least 1 (seconds)".into());
        }
        if self.op_timeout_ms == 0 {
            return usage("--op-timeout-ms 0 would fail every request: use at least 1".into());
        }
        if self.nemesis.faults.contains(&Fault::PauseNode) && !self.config.has_lock_node() {
            return usage(format!(
                "--nemesis pause-node needs a lock node, and config {} has none: choose another config or nemesis",
                self.config
            ));
        }
        self.seed.get_or_insert_with(rand_seed);
        self.pause_ms.get_or_insert(self.ttl_ms * 3 / 2);
        self.acquire_timeout_ms.get_or_insert(self.ttl_ms * 2);
        Ok(self)
    }

    pub fn seed(&self) -> u64 {
        self.seed.expect("resolved")
    }

    /// `<config>-<nemesis>`, the folder name of this kind of run.
    pub fn name(&self) -> String {
        format!(
            "{}-{}",
            self.config,
            self.nemesis.to_string().replace(',', "+")
        )
    }
}

fn rand_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64 ^ u64::from(std::process::id())) % 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_fills_derived_defaults_and_keeps_a_given_seed() {
        let mut o = RunOptions::new(Config::Single, "pause".parse().unwrap());
        o.seed = Some(7);
        let o = o.resolve().unwrap();
        assert_eq!(
            (o.seed(), o.pause_ms, o.acquire_timeout_ms),
            (7, Some(3000), Some(4000))
        );
        assert_eq!(o.name(), "single-pause");
    }

    #[test]
    fn pause_node_without_a_lock_node_is_a_usage_error() {
        let o = RunOptions::new(Config::NoLock, "pause-node".parse().unwrap());
        let err = o.resolve().unwrap_err();
        assert_eq!(err.exit_code(), 254);
        assert!(err.to_string().contains("config no-lock has none"), "{err}");
    }
}
