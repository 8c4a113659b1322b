//! One run's options: parsed from the command line, resolved, and stored in
//! `run.json` so a run can be repeated exactly.

use crate::error::{Error, Result};
use clap::{Args, ValueEnum};
use nemesis::{Action, Fault, Nemesis, ScheduleSpec, Step, Targets};
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

/// Older `run.json` files lack newer options: those read as their defaults.
#[derive(Clone, Debug, PartialEq, Args, Serialize, Deserialize)]
#[serde(default)]
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
    /// 200, at most half the TTL; 2/3 of the TTL with kill, failover or partition, so the
    /// holder is still working when the lock is granted again].
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

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions::new(Config::Single, Nemesis::none())
    }
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
        self.check_ranges()?;
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
        // Work follows the lease, so a given TTL never leaves every hold
        // outliving its lease before any fault: two thirds of it when the
        // faults are slow (the holder is still working when a fault strikes),
        // 200 ms (at most half the lease) otherwise.
        self.work_ms.get_or_insert(if slow {
            ttl * 2 / 3
        } else {
            (ttl / 2).min(200)
        });
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
        self.check_schedule_fits()?;
        Ok(self)
    }

    /// Every number within a range that neither overflows the arithmetic
    /// built on it nor makes the run test nothing.
    fn check_ranges(&self) -> Result<()> {
        let given = |v: Option<u64>| v.unwrap_or(1);
        let unsigned: [(&str, u64, u64, u64, &str); 14] = [
            (
                "--time-limit",
                self.time_limit,
                1,
                MAX_TIME_LIMIT_S,
                "seconds",
            ),
            ("--workers", self.workers, 1, 64, "workers"),
            ("--ttl-ms", self.ttl_ms.unwrap_or(10), 10, MAX_MS, "ms"),
            ("--work-ms", self.work_ms.unwrap_or(0), 0, MAX_MS, "ms"),
            ("--pause-ms", given(self.pause_ms), 1, MAX_MS, "ms"),
            (
                "--node-pause-ms",
                given(self.node_pause_ms),
                1,
                MAX_MS,
                "ms",
            ),
            ("--restart-ms", self.restart_ms, 0, MAX_MS, "ms"),
            ("--fault-ms", given(self.fault_ms), 1, MAX_MS, "ms"),
            ("--down-after-ms", self.down_after_ms, 1, MAX_MS, "ms"),
            (
                "--failover-timeout-ms",
                self.failover_timeout_ms,
                1,
                MAX_MS,
                "ms",
            ),
            (
                "--nemesis-interval-ms",
                self.nemesis_interval_ms,
                1,
                MAX_MS,
                "ms",
            ),
            (
                "--acquire-timeout-ms",
                given(self.acquire_timeout_ms),
                1,
                MAX_MS,
                "ms",
            ),
            ("--op-timeout-ms", self.op_timeout_ms, 1, MAX_MS, "ms"),
            ("--seed", self.seed.unwrap_or(0), 0, u64::MAX / 2, "seed"),
        ];
        for (name, value, lo, hi, unit) in unsigned {
            if !(lo..=hi).contains(&value) {
                return Err(out_of_range(name, value, lo, hi, unit));
            }
        }
        let max = MAX_MS as i64;
        let signed = [
            ("--clock-jump-ms", self.clock_jump_ms.unwrap_or(0)),
            ("--holder-skew-ms", self.holder_skew_ms),
        ];
        for (name, value) in signed {
            if !(-max..=max).contains(&value) {
                return Err(Error::Usage(format!(
                    "{name} {value} is out of range: use -{MAX_MS} to {MAX_MS} (ms)"
                )));
            }
        }
        Ok(())
    }

    /// Refuses a run whose time limit fits no fault: it would test nothing
    /// and could only come out valid.
    fn check_schedule_fits(&self) -> Result<()> {
        let spec = self.schedule_spec();
        if spec.actions.is_empty() || !nemesis::schedule(&spec).is_empty() {
            return Ok(());
        }
        let (action, longest) = spec
            .actions
            .iter()
            .max_by_key(|(_, ms)| *ms)
            .copied()
            .expect("not empty");
        // The first fault starts after up to one interval, and the run keeps
        // `settle` quiet at its end: this fits one fault whatever the seed.
        let needs_ms = spec.interval_ms + longest + spec.settle_ms;
        Err(Error::Usage(format!(
            "--nemesis {}: no fault fits in --time-limit {} s ({} lasts {} ms, after up to {} ms of quiet and before {} ms to settle): use --time-limit {} or more",
            self.nemesis,
            self.time_limit,
            action.name(),
            longest,
            spec.interval_ms,
            spec.settle_ms,
            needs_ms.div_ceil(1000)
        )))
    }

    /// Each fault the run asked for, with how long it is expected to last.
    pub fn schedule_spec(&self) -> ScheduleSpec {
        let restart = self.restart_ms + 500;
        let hold = self.fault_ms.expect("resolved");
        let ttl = self.ttl_ms();
        let actions = self
            .nemesis
            .actions()
            .into_iter()
            .filter(|a| supported(self.config, *a))
            .map(|a| {
                let ms = match a {
                    Action::Fault(Fault::Pause) => self.pause_ms.expect("resolved"),
                    Action::Fault(Fault::PauseNode) => self.node_pause_ms.expect("resolved"),
                    Action::Fault(Fault::Kill) => restart,
                    Action::Fault(Fault::Failover) => {
                        ttl + self.down_after_ms + self.failover_timeout_ms + restart
                    }
                    Action::Fault(Fault::Clock | Fault::Partition) => hold,
                    Action::SplitClock => ttl + hold,
                    Action::KillClock => restart + hold,
                };
                (a, ms)
            })
            .collect();
        ScheduleSpec {
            seed: self.seed(),
            actions,
            interval_ms: self.nemesis_interval_ms,
            time_limit_ms: self.time_limit * 1000,
            settle_ms: ttl.max(1000),
        }
    }

    /// The run's faults: pure, so it is known before anything starts.
    pub fn schedule(&self) -> Vec<Step> {
        nemesis::schedule(&self.schedule_spec())
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

/// The longest duration option: an hour.
const MAX_MS: u64 = 3_600_000;
/// The longest run: a day.
const MAX_TIME_LIMIT_S: u64 = 86_400;

fn out_of_range(name: &str, value: u64, lo: u64, hi: u64, unit: &str) -> Error {
    Error::Usage(format!(
        "{name} {value} is out of range: use {lo} to {hi} ({unit})"
    ))
}

/// Whether `action` makes sense on `config` (`all` offers every action;
/// explicit choices were checked when the options were resolved).
fn supported(config: Config, action: Action) -> bool {
    match action {
        Action::Fault(Fault::Pause) => true,
        Action::Fault(Fault::Failover) => config == Config::Replicated,
        Action::Fault(_) => config.has_lock_node(),
        Action::SplitClock | Action::KillClock => config.lock_nodes() >= 5,
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
            assert_eq!(err.exit_code(), crate::exit::BAD_INPUT);
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
    fn a_given_ttl_shortens_the_default_work_so_holds_end_within_their_lease() {
        let mut o = RunOptions::new(Config::Redlock, "kill".parse().unwrap());
        o.ttl_ms = Some(2_000);
        let o = o.resolve().unwrap();
        assert!(o.work_ms() < o.ttl_ms(), "work {} ms", o.work_ms());
        assert_eq!(o.work_ms(), 1_333);
        let mut slow = RunOptions::new(Config::Single, "pause".parse().unwrap());
        (slow.ttl_ms, slow.work_ms) = (Some(100), Some(5_000));
        assert_eq!(slow.resolve().unwrap().work_ms(), 5_000, "given: kept");
    }

    #[test]
    fn failover_and_wait_replicas_need_the_replicated_config() {
        let o = RunOptions::new(Config::Single, "failover".parse().unwrap());
        let err = o.resolve().unwrap_err();
        assert!(err.to_string().contains("--config replicated"), "{err}");
        let mut o = RunOptions::new(Config::Single, Nemesis::none());
        o.wait_replicas = 1;
        assert_eq!(o.resolve().unwrap_err().exit_code(), crate::exit::BAD_INPUT);
    }
}
