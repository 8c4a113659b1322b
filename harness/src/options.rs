//! One run's options: parsed from the command line, resolved, and stored in
//! `run.json` so a run can be repeated exactly.

use crate::error::{Error, Result};
use clap::{Args, ValueEnum};
use nemesis::{Fault, Nemesis, Targets};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use workloads::Config;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Each node is a `redis-server` child process on a loopback address.
    Local,
}

/// What a lock node keeps across a kill and restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persistence {
    /// Nothing: a restarted node is empty.
    None,
    /// AOF, fsync once a second: the last second may be lost.
    AofEverysec,
    /// AOF, fsync on every write.
    AofAlways,
}

#[derive(Clone, Debug, PartialEq, Args, Serialize, Deserialize)]
pub struct RunOptions {
    /// Lock setup to test: single, replicated, redlock, redlock-rslock, fenced,
    /// unsafe-del, unsafe-setnx, no-lock.
    #[arg(long, default_value = "single", value_parser = parse_config)]
    pub config: Config,
    /// Faults, comma-separated: none, pause, pause-node, kill, failover, clock,
    /// partition, all. `partition,clock` and `kill,clock` run as scenarios.
    #[arg(long, default_value = "none", value_parser = parse_nemesis)]
    pub nemesis: Nemesis,
    /// Seconds the workers run.
    #[arg(long, default_value_t = 30)]
    pub time_limit: u64,
    /// Worker processes contending for the lock.
    #[arg(long, default_value_t = 5)]
    pub workers: u64,
    /// Lock lease (TTL) in milliseconds [default: 2000; 6000 with kill,
    /// failover or partition].
    #[arg(long)]
    pub ttl_ms: Option<u64>,
    /// Time a holder spends between reading and writing the counter [default:
    /// 200; 4000 with kill, failover or partition, so the holder is still
    /// working when the lock is granted again].
    #[arg(long)]
    pub work_ms: Option<u64>,
    /// Seed for the fault schedule and the workers' jitter [default: random, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, value_enum, default_value = "local")]
    pub backend: Backend,
    /// Folder that receives `<config>-<nemesis>/<timestamp>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// How long `pause` freezes the holder [default: 1.5 × TTL].
    #[arg(long)]
    pub pause_ms: Option<u64>,
    /// How long `pause-node` freezes the node [default: 1.5 × TTL; for
    /// replicated at least down-after + 3 s, so Sentinel fails over].
    #[arg(long)]
    pub node_pause_ms: Option<u64>,
    /// How long a killed node stays down before it restarts.
    #[arg(long, default_value_t = 300)]
    pub restart_ms: u64,
    /// What lock nodes keep across a restart.
    #[arg(long, value_enum, default_value = "none")]
    pub persistence: Persistence,
    /// replicated: after acquiring, WAIT for this many replicas, else give the lock back.
    #[arg(long, default_value_t = 0)]
    pub wait_replicas: u32,
    /// Redlock: which lock nodes kill, clock and partition hit: one, minority,
    /// majority, all, ring (partition only: every worker keeps a different majority).
    #[arg(long, default_value = "majority", value_parser = parse_targets)]
    pub targets: Targets,
    /// How far `clock` jumps node wall clocks (negative: back) [default: 2 × TTL].
    #[arg(long, allow_negative_numbers = true)]
    pub clock_jump_ms: Option<i64>,
    /// How far `clock` also sets the holder's own lease clock (negative: it
    /// believes its lease is younger than it is).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub holder_skew_ms: i64,
    /// How long `clock` and `partition` last [default: TTL].
    #[arg(long)]
    pub fault_ms: Option<u64>,
    /// replicated: Sentinel's down-after-milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub down_after_ms: u64,
    /// replicated: Sentinel's failover-timeout.
    #[arg(long, default_value_t = 5000)]
    pub failover_timeout_ms: u64,
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

fn parse_targets(s: &str) -> Result<Targets, String> {
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
            ttl_ms: None,
            work_ms: None,
            seed: None,
            backend: Backend::Local,
            results: PathBuf::from("results"),
            pause_ms: None,
            node_pause_ms: None,
            restart_ms: 300,
            persistence: Persistence::None,
            wait_replicas: 0,
            targets: Targets::Majority,
            clock_jump_ms: None,
            holder_skew_ms: 0,
            fault_ms: None,
            down_after_ms: 1000,
            failover_timeout_ms: 5000,
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
        let has = |f: Fault| self.nemesis.faults.contains(&f);
        let replicated = self.config == Config::Replicated;
        if !(1..=64).contains(&self.workers) {
            return usage(format!(
                "--workers {} is out of range: use 1 to 64",
                self.workers
            ));
        }
        if self.time_limit == 0 {
            return usage("--time-limit 0 runs nothing: use at least 1 (seconds)".into());
        }
        if self.op_timeout_ms == 0 {
            return usage("--op-timeout-ms 0 would fail every request: use at least 1".into());
        }
        let node_faults = [
            Fault::PauseNode,
            Fault::Kill,
            Fault::Clock,
            Fault::Partition,
        ];
        if let Some(f) = node_faults.into_iter().find(|f| has(*f)) {
            if !self.config.has_lock_node() && !self.nemesis.all {
                return usage(format!(
                    "--nemesis {f} needs a lock node, and config {} has none: choose another config or nemesis",
                    self.config
                ));
            }
        }
        let scenario =
            (has(Fault::Clock) && (has(Fault::Partition) || has(Fault::Kill))) && !self.nemesis.all;
        if scenario && self.config.lock_nodes() < 5 {
            return usage(format!(
                "--nemesis {} is a Redlock scenario that needs five lock nodes, and config {} has {}: use --config redlock",
                self.nemesis, self.config, self.config.lock_nodes()
            ));
        }
        if has(Fault::Failover) && !replicated && !self.nemesis.all {
            return usage(format!(
                "--nemesis failover needs replicas, and config {} has none: use --config replicated",
                self.config
            ));
        }
        if self.wait_replicas > 0 && !replicated {
            return usage("--wait-replicas needs replicas: use it with --config replicated".into());
        }
        if self.wait_replicas > 2 {
            return usage(format!(
                "--wait-replicas {} is more than the 2 replicas there are: use 0, 1 or 2",
                self.wait_replicas
            ));
        }
        // Kills and failovers only lose a lock whose holder is still in its
        // critical section when the lock is granted again.
        let slow = has(Fault::Kill) || has(Fault::Failover) || has(Fault::Partition);
        let ttl = *self.ttl_ms.get_or_insert(if slow { 6_000 } else { 2_000 });
        self.work_ms.get_or_insert(if slow { 4_000 } else { 200 });
        if ttl < 10 {
            return usage(format!("--ttl-ms {ttl} is too short: use at least 10"));
        }
        self.seed.get_or_insert_with(rand_seed);
        self.pause_ms.get_or_insert(ttl * 3 / 2);
        let node_pause = if replicated {
            (ttl * 3 / 2).max(self.down_after_ms + 3000)
        } else {
            ttl * 3 / 2
        };
        self.node_pause_ms.get_or_insert(node_pause);
        self.acquire_timeout_ms.get_or_insert(ttl * 2);
        self.clock_jump_ms.get_or_insert(2 * ttl as i64);
        self.fault_ms.get_or_insert(ttl);
        Ok(self)
    }

    pub fn seed(&self) -> u64 {
        self.seed.expect("resolved")
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms.expect("resolved")
    }

    pub fn work_ms(&self) -> u64 {
        self.work_ms.expect("resolved")
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
        assert_eq!((o.ttl_ms(), o.work_ms()), (2000, 200));
        assert_eq!(o.name(), "single-pause");
    }

    #[test]
    fn a_node_fault_without_a_lock_node_is_a_usage_error() {
        for nemesis in ["pause-node", "kill"] {
            let o = RunOptions::new(Config::NoLock, nemesis.parse().unwrap());
            let err = o.resolve().unwrap_err();
            assert_eq!(err.exit_code(), 254);
            assert!(err.to_string().contains("config no-lock has none"), "{err}");
        }
    }

    #[test]
    fn kill_and_failover_get_a_critical_section_longer_than_a_failover() {
        let o = RunOptions::new(Config::Replicated, "failover".parse().unwrap());
        let o = o.resolve().unwrap();
        assert_eq!((o.ttl_ms(), o.work_ms()), (6_000, 4_000));
        assert!(o.node_pause_ms.unwrap() >= o.down_after_ms + 3000);
        let mut given = RunOptions::new(Config::Single, "kill".parse().unwrap());
        given.work_ms = Some(50);
        assert_eq!(given.resolve().unwrap().work_ms(), 50);
    }

    #[test]
    fn failover_and_wait_replicas_need_the_replicated_config() {
        let o = RunOptions::new(Config::Single, "failover".parse().unwrap());
        let err = o.resolve().unwrap_err();
        assert!(err.to_string().contains("--config replicated"), "{err}");
        let mut o = RunOptions::new(Config::Single, Nemesis::none());
        o.wait_replicas = 1;
        assert_eq!(o.resolve().unwrap_err().exit_code(), 254);
    }
}
