//! One run's options: [`RunOptions`] as parsed from the command line, and
//! the [`RunPlan`] they resolve to, every value concrete, which is what runs
//! and what `run.json` stores so a run can be repeated exactly.

use crate::clients::{Client, StorageCmd};
use crate::error::Error;
use crate::schedule_text::ScheduleText;
use crate::{defaults, help};
use backend::node::Persistence;
use backend::Backend;
use clap::Args;
use nemesis::{
    Aimed, At, Fault, FaultParams, Nemesis, Package, ScheduleSpec, Shape, Step, Targets,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use workloads::storage::StorageKind;
use workloads::Config;

/// Where a command's nodes run: one home for `--backend` and `--image`,
/// flattened into every command that starts nodes (`run`, `matrix`,
/// `client-test`).
#[derive(Clone, Debug, PartialEq, Args)]
pub struct Nodes {
    /// Where the nodes run.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// The image of the Docker backend's nodes [default: lockstorm/redis:local
    /// when present (`lockstorm image import`), else redis:7.2].
    #[arg(long)]
    pub image: Option<String>,
    /// The loopback block the nodes and workers take: `127.0.<N>.x`; a
    /// matrix's cells at once take N, N+1, … [default: the lowest blocks no
    /// other lockstorm run on this machine holds].
    #[arg(long)]
    pub address_block: Option<u8>,
    /// Test a deployment lockstorm did not start: redis://[user@]host:port[/db]
    /// or rediss://… (one node, TLS), sentinel://host:port[,host:port…]/<master>
    /// (a primary found through its Sentinels) or redlock://host:port,host:port,host:port
    /// (independent nodes); the password comes from LOCKSTORM_REDIS_PASSWORD. Every key
    /// the run writes is under lockstorm:<config>-<fault>:<seed>: and is
    /// removed at the end.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// With --target, the command that stands in for a node fault lockstorm
    /// cannot do on a deployment it did not start: kill=CMD (the node must
    /// come back with a new run_id) or failover=CMD (the Sentinels must name
    /// another primary). Run with `sh -c`, with LOCKSTORM_NODE and
    /// LOCKSTORM_NODE_ADDR set; repeatable.
    #[arg(long = "fault-cmd", value_name = "FAULT=CMD")]
    pub fault_cmd: Vec<String>,
    /// How long a --fault-cmd kill's node may take to answer again with a
    /// new run_id before the fault counts as unverified (the run unknown).
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub fault_cmd_wait_ms: u64,
    /// The CA certificate (PEM) a rediss:// target's certificate is checked
    /// against [default: the system's roots].
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// With --target, keep the shared counter on this node of yours
    /// (redis:// or rediss://) instead of lockstorm's own node here: its
    /// keys are under the run's prefix, each with a TTL.
    #[arg(long, value_name = "URL")]
    pub storage_target: Option<String>,
    /// Run the nodes on these machines over SSH, as Jepsen's n1…n5:
    /// [user@]host[:port],… (OpenSSH, with your ~/.ssh/config and agent;
    /// `lockstorm lab up` prints a lab's). n<i> runs on the i-th host,
    /// Sentinels on the hosts after the data nodes', the counter on the last.
    #[arg(long = "nodes", value_name = "HOSTS")]
    pub hosts: Option<String>,
    /// With --nodes: log in with this private key only [default: the lab's
    /// key for a lab's hosts, else your ssh's own choice].
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Option<PathBuf>,
    /// With --nodes: install what a host lacks with Debian's apt-get
    /// there, as Jepsen's db/setup! does (up to 5 minutes a host).
    #[arg(long)]
    pub install: bool,
}

impl Default for Nodes {
    fn default() -> Self {
        clap_defaults()
    }
}

/// What clap gives a group of options when none is given. Each default is
/// written once, in its `#[arg]`, and code that builds options without a
/// command line (the matrix's runs, tests) starts from these, so the two
/// cannot drift (`options_defaults.rs` pins them).
fn clap_defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults"));
    let matches = command
        .try_get_matches_from(["defaults"])
        .expect("no option of a group is required");
    T::from_arg_matches(&matches).expect("every default parses")
}

/// Which lock client a command tests instead of the config's own: one home
/// for `--client` and `--client-cmd` (`run`, `client-test`).
#[derive(Clone, Debug, Default, PartialEq, Args)]
#[group(multiple = false)]
pub struct ClientChoice {
    #[arg(long, value_parser = Client::shipped, help = help::client())]
    pub client: Option<Client>,
    #[arg(long, value_parser = Client::command, help = help::client_cmd())]
    pub client_cmd: Option<Client>,
}

impl ClientChoice {
    /// The client given, by either option.
    pub fn chosen(&self) -> Option<&Client> {
        self.client.as_ref().or(self.client_cmd.as_ref())
    }
}

/// The folder where runs, matrices and client tests write: one home for
/// `--results` (and for `report`'s default folder).
#[derive(Clone, Debug, PartialEq, Args)]
pub struct Output {
    /// The results folder: a run writes `<config>-<nemesis>/<timestamp>/`
    /// in it, a matrix also `matrix-<timestamp>/`, a client test
    /// `client-test-<timestamp>/`.
    #[arg(long, default_value = RESULTS)]
    pub results: PathBuf,
}

/// The results folder when none is given.
pub const RESULTS: &str = "results";

impl Default for Output {
    fn default() -> Self {
        clap_defaults()
    }
}

/// How long each run's workers run: one home for `--time-limit` (`run`,
/// `matrix`).
#[derive(Clone, Copy, Debug, PartialEq, Args)]
pub struct Timing {
    /// Seconds each run's workers run.
    #[arg(long, default_value_t = 30)]
    pub time_limit: u64,
}

impl Default for Timing {
    fn default() -> Self {
        clap_defaults()
    }
}

/// The run options a matrix gives each of its runs as `run` takes them:
/// one definition for both commands, so a matrix's runs are the runs `run`
/// would make (beside [`Timing`], [`Output`] and [`Nodes`], which they
/// share too). `--seed` is each command's own: a run's is random unless
/// given, a matrix's (1) is its first run's.
#[derive(Clone, Debug, PartialEq, Args)]
pub struct Shared {
    /// Where the shared counter lives: redis (a node of its own) or postgres
    /// (a PostgreSQL server the run starts; fenced reads and writes are
    /// conditional statements) [default: redis; postgres for the pg-*
    /// configs, whose lock is PostgreSQL's].
    #[arg(long, value_parser = parse_storage)]
    pub storage: Option<StorageKind>,
    #[arg(long, default_value = "majority", value_parser = parse_targets, help = help::targets())]
    pub targets: Targets,
    #[arg(long, help = help::nemesis_interval_ms())]
    pub nemesis_interval_ms: Option<u64>,
}

impl Default for Shared {
    fn default() -> Self {
        clap_defaults()
    }
}

/// One run's options as the user gave them: `None` where a default depends
/// on other options. [`RunOptions::resolve`] turns them into a [`RunPlan`].
#[derive(Clone, Debug, PartialEq, Args)]
pub struct RunOptions {
    // The lists in these options' help are read from the registries: help.rs.
    #[arg(long, default_value = "single", value_parser = parse_config, help = help::config())]
    pub config: Config,
    #[command(flatten)]
    pub client: ClientChoice,
    #[arg(long, default_value = "none", value_parser = parse_nemesis, help = help::nemesis())]
    pub nemesis: Nemesis,
    #[arg(long, value_parser = parse_at, help = help::at())]
    pub at: Option<At>,
    #[command(flatten)]
    pub timing: Timing,
    /// Worker processes contending for the lock.
    #[arg(long, default_value_t = 5)]
    pub workers: u64,
    #[arg(long, value_name = "MS", help = help::ttl_run())]
    pub ttl_ms: Option<u64>,
    #[arg(long, help = help::work_ms())]
    pub work_ms: Option<u64>,
    /// Seed for the fault schedule and the workers' jitter [default: random, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub nodes: Nodes,
    #[command(flatten)]
    pub output: Output,
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
    /// Restart a killed primary as soon as Sentinel or the cluster marks it
    /// down, as the vote for its replica begins, instead of after
    /// --restart-ms (replicated and cluster configs).
    #[arg(long, conflicts_with = "restart_ms")]
    pub restart_at_vote: bool,
    /// What lock nodes keep across a restart.
    #[arg(long, value_enum, default_value = "none")]
    pub persistence: Persistence,
    #[command(flatten)]
    pub shared: Shared,
    /// A setting for the run's PostgreSQL server, NAME=VALUE as
    /// `postgres -c` takes it (idle_session_timeout=500 ends a session idle
    /// that long); repeatable.
    #[arg(long = "postgres-setting", value_name = "NAME=VALUE", value_parser = parse_postgres_setting)]
    pub postgres_settings: Vec<(String, String)>,
    /// Keep the shared counter through your own storage adapter, to test
    /// that your database or service refuses stale fences: the command that
    /// starts it (split at whitespace, run without a shell; one per worker
    /// and one for the harness; the protocol is docs/protocol.md, "Storage
    /// adapters"). --storage still starts lockstorm's node, whose address
    /// its init is given.
    #[arg(long, value_name = "CMD", value_parser = StorageCmd::parse)]
    pub storage_cmd: Option<StorageCmd>,
    /// replicated: after acquiring, WAIT for this many replicas, else give the lock back.
    #[arg(long, default_value_t = 0)]
    pub wait_replicas: u32,
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
    /// replicated: Sentinel's down-after-milliseconds; cluster: cluster-node-timeout.
    #[arg(long, default_value_t = 1000)]
    pub down_after_ms: u64,
    /// replicated: Sentinel's failover-timeout.
    #[arg(long, default_value_t = 5000)]
    pub failover_timeout_ms: u64,
    /// Workers write even when their own clock says the lease has expired.
    #[arg(long)]
    pub no_validity_check: bool,
    /// How long one acquire op retries before failing [default: 2 × TTL].
    #[arg(long)]
    pub acquire_timeout_ms: Option<u64>,
    /// Socket timeout for one Redis request; a timeout makes the op `info`.
    #[arg(long, default_value_t = 500)]
    pub op_timeout_ms: u64,
    /// Background latency on every request a worker sends, `MIN` or
    /// `MIN..MAX` ms, drawn per request from the seed, in the fault proxy
    /// [default: none, and no proxy unless a network fault needs it; `0`:
    /// through the proxy, with no latency added to its hop].
    #[arg(long, value_parser = parse_latency)]
    pub latency_ms: Option<Latency>,
    /// The faults to inject, in place of the seed's draw (the seed still
    /// drives the workers): steps `AT:FAULT[@POINT]` joined by commas, e.g.
    /// `1.5s:pause@checked,6s:pause`; each fault one --nemesis names, lasting
    /// what its options say. `shrink` prints one.
    #[arg(long, value_parser = parse_schedule)]
    pub schedule: Option<ScheduleText>,
}

/// `--latency-ms MIN[..MAX]`: each request is held a time drawn uniformly
/// from the range, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Latency {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl Latency {
    pub fn is_zero(&self) -> bool {
        self.max_ms == 0
    }

    /// The range as the proxy takes it (`None`: no latency).
    pub fn range(self) -> Option<(Duration, Duration)> {
        let ms = Duration::from_millis;
        (!self.is_zero()).then_some((ms(self.min_ms), ms(self.max_ms)))
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.min_ms == self.max_ms {
            true => write!(f, "{}", self.min_ms),
            false => write!(f, "{}..{}", self.min_ms, self.max_ms),
        }
    }
}

impl std::str::FromStr for Latency {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("bad latency '{s}': give MIN or MIN..MAX in ms, e.g. 1..5");
        let number = |t: &str| t.trim().parse::<u64>().map_err(|_| bad());
        let (min_ms, max_ms) = match s.split_once("..") {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(s)?, number(s)?),
        };
        if min_ms > max_ms || max_ms > MAX_LATENCY_MS {
            return Err(format!(
                "bad latency '{s}': MIN must not exceed MAX, and MAX must be at most {MAX_LATENCY_MS} ms"
            ));
        }
        Ok(Latency { min_ms, max_ms })
    }
}

impl From<Latency> for String {
    fn from(l: Latency) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for Latency {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// Latency is background noise, not a fault: longer belongs to `delay`.
const MAX_LATENCY_MS: u64 = 10_000;

fn parse_latency(s: &str) -> Result<Latency, String> {
    s.parse()
}

/// One run, every option resolved. Durations are [`Duration`]s; `run.json`
/// writes them in the units their options take (`ttl_ms`, `time_limit` in
/// seconds). Older `run.json` files lack newer options: those read as the
/// defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunPlan {
    pub config: Config,
    /// The client adapter that is the lock client (`None`: the config's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<Client>,
    pub nemesis: Nemesis,
    pub at: At,
    #[serde(with = "secs")]
    pub time_limit: Duration,
    pub workers: u64,
    #[serde(rename = "ttl_ms", with = "millis")]
    pub ttl: Duration,
    #[serde(rename = "work_ms", with = "millis")]
    pub work: Duration,
    pub seed: u64,
    pub backend: Backend,
    /// `--image`, as given (the image used is in run.json's `backend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub results: PathBuf,
    #[serde(rename = "pause_ms", with = "millis")]
    pub pause: Duration,
    #[serde(rename = "node_pause_ms", with = "millis")]
    pub node_pause: Duration,
    #[serde(rename = "restart_ms", with = "millis")]
    pub restart: Duration,
    /// `--restart-at-vote`: `restart` does not apply to a failed-over primary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_at_vote: bool,
    pub persistence: Persistence,
    /// Where the counter lives.
    pub storage: StorageKind,
    /// `--postgres-setting`s, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub postgres_settings: Vec<(String, String)>,
    /// `--storage-cmd`: the storage adapter that keeps the counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_cmd: Option<StorageCmd>,
    pub wait_replicas: u32,
    pub targets: Targets,
    pub clock_jump_ms: i64,
    pub holder_skew_ms: i64,
    #[serde(rename = "fault_ms", with = "millis")]
    pub fault: Duration,
    #[serde(rename = "down_after_ms", with = "millis")]
    pub down_after: Duration,
    #[serde(rename = "failover_timeout_ms", with = "millis")]
    pub failover_timeout: Duration,
    #[serde(rename = "nemesis_interval_ms", with = "millis")]
    pub nemesis_interval: Duration,
    pub no_validity_check: bool,
    #[serde(rename = "acquire_timeout_ms", with = "millis")]
    pub acquire_timeout: Duration,
    #[serde(rename = "op_timeout_ms", with = "millis")]
    pub op_timeout: Duration,
    /// The run's loopback addresses are `127.0.<block>.x`: the block its
    /// starter claimed for it (`blocks::claim`).
    pub address_block: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Latency>,
    /// `--schedule`: the faults as given, in place of the seed's draw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
    /// Where every key of the run lives.
    #[serde(default)]
    pub keys: workloads::Keys,
    /// The deployment under test, when lockstorm did not start it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<deployment::target::Target>,
    /// Fault name → the user's command for it (`--fault-cmd`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fault_commands: std::collections::BTreeMap<String, String>,
    /// Missing from an older run.json: the plan's default, as every field
    /// (not `Duration`'s zero).
    #[serde(rename = "fault_cmd_wait_ms", with = "millis")]
    pub fault_cmd_wait: Duration,
    /// `--tls-ca`, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// `--storage-target`: the counter on the user's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_target: Option<deployment::target::Target>,
    /// `--nodes`: the hosts the nodes run on (none: this machine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<backend::remote::Destination>,
    /// `--ssh-key`, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key: Option<PathBuf>,
    /// `--install`: what a host lacks is installed there first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub install: bool,
}

/// Why options cannot become a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A value out of range, or options that contradict each other.
    Invalid(String),
    /// The nemesis has nothing to act on in this setup, or no fault fits
    /// the time limit: the pair tests nothing (a matrix skips it).
    Inapplicable(String),
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        match r {
            Refusal::Invalid(m) | Refusal::Inapplicable(m) => Error::Usage(m),
        }
    }
}

fn parse_config(s: &str) -> Result<Config, String> {
    s.parse()
}

fn parse_nemesis(s: &str) -> Result<Nemesis, String> {
    s.parse()
}

fn parse_storage(s: &str) -> Result<StorageKind, String> {
    s.parse()
}

/// `NAME=VALUE` for the run's PostgreSQL server; lockstorm's own settings
/// (where it listens, its socket, its durability) are not to be changed.
fn parse_postgres_setting(s: &str) -> Result<(String, String), String> {
    const OWN: [&str; 5] = [
        "listen_addresses",
        "port",
        "unix_socket_directories",
        "fsync",
        "synchronous_commit",
    ];
    let Some((name, value)) = s.split_once('=') else {
        return Err(format!(
            "{s}: give NAME=VALUE, e.g. idle_session_timeout=500"
        ));
    };
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return Err(format!("{name:?} is not a PostgreSQL setting's name: give NAME=VALUE, e.g. idle_session_timeout=500"));
    }
    if OWN.contains(&name) {
        return Err(format!("{name} is lockstorm's to set (where the server listens, and that it keeps what it commits): choose another setting"));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

fn parse_targets(s: &str) -> Result<Targets, String> {
    s.parse()
}

fn parse_at(s: &str) -> Result<At, String> {
    s.parse()
}

fn parse_schedule(s: &str) -> Result<ScheduleText, String> {
    s.parse()
}

/// `lockstorm run` with no options. Parsed once: every run.json read
/// starts from the default plan (older ones lack newer fields).
impl Default for RunOptions {
    fn default() -> Self {
        static DEFAULTS: std::sync::OnceLock<RunOptions> = std::sync::OnceLock::new();
        DEFAULTS.get_or_init(clap_defaults).clone()
    }
}

/// The timings (ms) that follow the lease unless given.
struct Times {
    ttl: u64,
    work: u64,
    node_pause: u64,
    interval: u64,
}

impl Times {
    fn of(options: &RunOptions) -> Self {
        // Kills and failovers only lose a lock whose holder is still in its
        // critical section when the lock is granted again.
        let slow = options.nemesis.any(|p| p.slow());
        let ttl = options.ttl_ms.unwrap_or(defaults::run_default(slow));
        // Work follows the lease, so a given TTL never leaves every hold
        // outliving its lease before any fault: two thirds of it when the
        // faults are slow (the holder is still working when a fault strikes),
        // WORK_MS (at most half the lease) otherwise.
        let work = options.work_ms.unwrap_or(if slow {
            ttl * 2 / 3
        } else {
            (ttl / 2).min(defaults::WORK_MS)
        });
        // A paused primary must stay down long enough for its replica to
        // take over (Sentinel's vote, or the cluster's).
        let node_pause = match options.config.fails_over() {
            true => (ttl * 3 / 2).max(options.down_after_ms + 3000),
            false => ttl * 3 / 2,
        };
        // A fault's effects play out within a lease (a frozen holder's
        // lease runs out, a stale key expires), so about one lease of quiet
        // lets the lock recover before the next: faults come as often as
        // the TTL allows, never closer than 0.5 s nor, with slow faults'
        // long leases, rarer than every 2.5–7.5 s.
        let interval = options
            .shared
            .nemesis_interval_ms
            .unwrap_or(ttl.clamp(defaults::MIN_INTERVAL_MS, defaults::MAX_INTERVAL_MS));
        Times {
            ttl,
            work,
            node_pause,
            interval,
        }
    }
}

/// The defaults of a plan that a `run.json` field missing from an older
/// run reads as.
impl Default for RunPlan {
    fn default() -> Self {
        let options = RunOptions {
            seed: Some(0),
            ..RunOptions::default()
        };
        options.resolve().expect("the defaults make a plan")
    }
}

impl RunOptions {
    /// Defaults for a config and nemesis, as the command line would give them.
    pub fn new(config: Config, nemesis: Nemesis) -> Self {
        RunOptions {
            config,
            nemesis,
            ..RunOptions::default()
        }
    }

    /// The flags given that change what a fault does to the lock (its
    /// timing, what a node keeps, where the counter lives, which nodes it
    /// hits, the client's own check): expectations.toml documents each
    /// pair under the defaults, so a run with any of these is not held to it.
    pub fn fault_shaping_flags(&self) -> Vec<&'static str> {
        let d = RunOptions::default();
        let given = [
            ("--ttl-ms", self.ttl_ms != d.ttl_ms),
            ("--work-ms", self.work_ms != d.work_ms),
            ("--pause-ms", self.pause_ms != d.pause_ms),
            ("--node-pause-ms", self.node_pause_ms != d.node_pause_ms),
            ("--restart-ms", self.restart_ms != d.restart_ms),
            ("--restart-at-vote", self.restart_at_vote),
            ("--persistence", self.persistence != d.persistence),
            ("--storage", self.shared.storage != d.shared.storage),
            ("--storage-cmd", self.storage_cmd.is_some()),
            ("--postgres-setting", !self.postgres_settings.is_empty()),
            ("--wait-replicas", self.wait_replicas != d.wait_replicas),
            ("--targets", self.shared.targets != d.shared.targets),
            ("--clock-jump-ms", self.clock_jump_ms != d.clock_jump_ms),
            ("--holder-skew-ms", self.holder_skew_ms != d.holder_skew_ms),
            ("--fault-ms", self.fault_ms != d.fault_ms),
            ("--down-after-ms", self.down_after_ms != d.down_after_ms),
            (
                "--failover-timeout-ms",
                self.failover_timeout_ms != d.failover_timeout_ms,
            ),
            ("--no-validity-check", self.no_validity_check),
            ("--latency-ms", self.latency_ms.is_some()),
            ("--schedule", self.schedule.is_some()),
        ];
        given
            .into_iter()
            .filter(|(_, g)| *g)
            .map(|(f, _)| f)
            .collect()
    }

    /// Fills every default that depends on other options and checks the
    /// combination, so `run.json` records exactly what ran.
    pub fn resolve(mut self) -> Result<RunPlan, Refusal> {
        self.check_ranges()?;
        self.check_storage_cmd()?;
        self.check_etcd()?;
        self.check_cluster()?;
        self.check_restart_at_vote()?;
        self.check_zookeeper()?;
        self.check_client()?;
        let hosts = self.check_hosts()?;
        self.check_faults_apply()?;
        self.check_combination()?;
        let times = Times::of(&self);
        let target = match &self.nodes.target {
            Some(raw) => Some(self.check_target(raw)?),
            None => None,
        };
        let fault_commands = self.fault_commands()?;
        let storage_target = self.storage_target()?;
        let storage = self.storage()?;
        let schedule = self.schedule.take();
        let mut plan = self.plan(times, storage);
        plan.hosts = hosts;
        plan.fault_commands = fault_commands;
        plan.storage_target = storage_target;
        if target.is_some() {
            // The run's name and seed name its keys: a matrix's cells never
            // share a prefix, and a rerun of a killed run finds its
            // leftovers (until they expire) and is refused.
            // Long enough for the run, its settling and its check; a
            // killed run's keys go by themselves a few minutes later.
            let expire = 2 * plan.time_limit + Duration::from_secs(120);
            let run_id = format!("{}:{}", plan.name(), plan.seed);
            plan.keys = workloads::Keys::for_run(&run_id, expire.as_millis() as u64);
            plan.target = target;
        }
        if plan.config.keys_in_one_slot() {
            plan.keys = plan.keys.in_one_slot();
        }
        match schedule {
            Some(text) => {
                let steps = text.steps(&plan.schedule_spec(), plan.at);
                plan.steps = Some(steps.map_err(Refusal::Invalid)?);
            }
            None => plan.check_schedule_fits()?,
        }
        Ok(plan)
    }

    /// `--nodes` and `--ssh-key` against the run: Redis's nodes, started
    /// by lockstorm, over SSH.
    fn check_hosts(&self) -> Result<Vec<backend::remote::Destination>, Refusal> {
        let Some(hosts) = &self.nodes.hosts else {
            return match self.nodes.ssh_key {
                Some(_) => Err(Refusal::Invalid(
                    "--ssh-key logs in to the hosts of --nodes: give --nodes, or drop --ssh-key"
                        .into(),
                )),
                None => Ok(Vec::new()),
            };
        };
        let hosts = backend::remote::parse_nodes(hosts).map_err(Refusal::Invalid)?;
        let refuse = |why: String| Err(Refusal::Invalid(why));
        if self.nodes.target.is_some() {
            return refuse("--nodes runs lockstorm's own nodes on your hosts, and --target names a deployment it did not start: choose one".into());
        }
        if self.nodes.backend == Backend::Docker || self.nodes.image.is_some() {
            return refuse("--nodes runs the nodes on your hosts over SSH, not in Docker: drop --backend docker and --image".into());
        }
        let redis_only = !self.config.locks_in_etcd()
            && !self.config.locks_in_zookeeper()
            && self.storage()? == StorageKind::Redis;
        if !redis_only {
            return Err(Refusal::Inapplicable(format!(
                "--config {} does not run on --nodes hosts yet (only Redis's nodes do): choose a config that locks in Redis with its counter in Redis",
                self.config
            )));
        }
        if hosts.is_empty() {
            return refuse("--nodes names no host: give [user@]host[:port],…".into());
        }
        if let Some(key) = &self.nodes.ssh_key {
            if !key.is_file() {
                return refuse(format!(
                    "--ssh-key {}: no such file: give the private key's path",
                    key.display()
                ));
            }
        }
        Ok(hosts)
    }

    /// `--at`, `--image` and `--wait-replicas` against the options they
    /// need.
    fn check_combination(&self) -> Result<(), Refusal> {
        if self.at.is_some() && !self.nemesis.any(|p| p.strikes()) {
            return Err(Refusal::Invalid(format!(
                "--at places a fault that strikes a worker, and --nemesis {} has none: add {}, or drop --at",
                self.nemesis,
                Fault::striking_names()
            )));
        }
        if self.nodes.backend == Backend::Local && self.nodes.image.is_some() {
            return Err(Refusal::Invalid(
                "--image chooses the Docker backend's image, and --backend is local: use --backend docker, or drop --image".into(),
            ));
        }
        if self.wait_replicas > 0 && self.config != Config::Replicated {
            return Err(Refusal::Invalid(
                "--wait-replicas needs replicas: use it with --config replicated".into(),
            ));
        }
        if self.wait_replicas > 2 {
            return Err(Refusal::Invalid(format!(
                "--wait-replicas {} is more than the 2 replicas there are: use 0, 1 or 2",
                self.wait_replicas
            )));
        }
        Ok(())
    }

    /// The plan of these checked options, with `times` and `storage`
    /// resolved; no target, fault commands or schedule yet.
    fn plan(self, times: Times, storage: StorageKind) -> RunPlan {
        let Times {
            ttl,
            work,
            node_pause,
            interval,
        } = times;
        let ms = Duration::from_millis;
        RunPlan {
            config: self.config,
            client: self.client.chosen().cloned(),
            nemesis: self.nemesis,
            at: self.at.unwrap_or_default(),
            time_limit: Duration::from_secs(self.timing.time_limit),
            workers: self.workers,
            ttl: ms(ttl),
            work: ms(work),
            seed: self.seed.unwrap_or_else(rand_seed),
            backend: self.nodes.backend,
            image: self.nodes.image.clone(),
            hosts: Vec::new(),
            ssh_key: self.nodes.ssh_key.clone(),
            install: self.nodes.install,
            results: self.output.results,
            pause: ms(self.pause_ms.unwrap_or(ttl * 3 / 2)),
            node_pause: ms(self.node_pause_ms.unwrap_or(node_pause)),
            restart: ms(self.restart_ms),
            restart_at_vote: self.restart_at_vote,
            persistence: self.persistence,
            storage,
            postgres_settings: self.postgres_settings.clone(),
            storage_cmd: self.storage_cmd.clone(),
            wait_replicas: self.wait_replicas,
            targets: self.shared.targets,
            clock_jump_ms: self.clock_jump_ms.unwrap_or(2 * ttl as i64),
            holder_skew_ms: self.holder_skew_ms,
            fault: ms(self.fault_ms.unwrap_or(ttl)),
            down_after: ms(self.down_after_ms),
            failover_timeout: ms(self.failover_timeout_ms),
            nemesis_interval: ms(interval),
            no_validity_check: self.no_validity_check,
            acquire_timeout: ms(self.acquire_timeout_ms.unwrap_or(ttl * 2)),
            op_timeout: ms(self.op_timeout_ms),
            address_block: self.nodes.address_block.unwrap_or(0),
            latency_ms: self.latency_ms,
            steps: None,
            keys: workloads::Keys::default(),
            target: None,
            fault_commands: Default::default(),
            fault_cmd_wait: ms(self.nodes.fault_cmd_wait_ms),
            tls_ca: self.nodes.tls_ca.clone(),
            storage_target: None,
        }
    }
    /// `--storage`, resolved: PostgreSQL's locks need PostgreSQL, and the
    /// fault proxy speaks only Redis's protocol.
    fn storage(&self) -> Result<StorageKind, Refusal> {
        let storage = match (self.config.storage(), self.shared.storage) {
            (Some(needed), Some(given)) if needed != given => {
                return Err(Refusal::Inapplicable(format!(
                    "--config {} locks with {needed}, so its counter lives there: drop --storage {given}",
                    self.config
                )))
            }
            (needed, given) => needed.or(given).unwrap_or_default(),
        };
        if storage != StorageKind::Postgres && !self.postgres_settings.is_empty() {
            return Err(Refusal::Invalid(
                "--postgres-setting sets the run's PostgreSQL server, and this run has none: add --storage postgres, or choose a pg-* config".into(),
            ));
        }
        if storage == StorageKind::Postgres {
            if self.nodes.storage_target.is_some() {
                return Err(Refusal::Invalid(
                    "--storage-target keeps the counter on your Redis node, and --storage postgres in lockstorm's PostgreSQL: choose one".into(),
                ));
            }
            let proxied =
                self.nemesis.any(|p| in_proxy(self.config, p)) || self.latency_ms.is_some();
            if proxied {
                return Err(Refusal::Inapplicable(format!(
                    "--nemesis {} acts in the fault proxy, which speaks Redis's protocol and not PostgreSQL's: with --storage postgres choose pause, crash, kill, pause-node or terminate-session",
                    self.nemesis
                )));
            }
        }
        Ok(storage)
    }

    /// `cluster` runs on lockstorm's own cluster, on this machine, or on a
    /// deployment's (`--target redis+cluster://`); its clients follow the
    /// addresses the cluster names, which the fault proxy does not rewrite
    /// yet.
    fn check_cluster(&self) -> Result<(), Refusal> {
        if !self.config.in_cluster() {
            return Ok(());
        }
        if self.nodes.hosts.is_some() {
            return Err(Refusal::Invalid(
                format!("--config {} starts its own Redis Cluster on this machine (on other hosts not yet): drop --nodes, or give your cluster as --target redis+cluster://host:port", self.config),
            ));
        }
        if self.nodes.target.is_some() && self.nemesis.any(|p| p.cuts_members()) {
            return Err(Refusal::Inapplicable(format!(
                "--nemesis {} cuts a cluster's nodes from each other with iptables, which lockstorm does only on nodes it started: drop --target, or choose another fault",
                self.nemesis
            )));
        }
        if self.nemesis.any(|p| in_proxy(self.config, p)) || self.latency_ms.is_some() {
            return Err(Refusal::Inapplicable(format!(
                "--nemesis {} acts in the fault proxy, which a cluster's clients leave as they follow the nodes the cluster names: with --config {} choose pause, crash, kill, pause-node, failover, partition or clock",
                self.nemesis, self.config
            )));
        }
        Ok(())
    }

    /// `--restart-at-vote` times a restart by the vote that replaces the
    /// killed primary: a setup with such a vote, on nodes lockstorm started
    /// (a deployment's nodes come back by its own means).
    fn check_restart_at_vote(&self) -> Result<(), Refusal> {
        if !self.restart_at_vote {
            return Ok(());
        }
        if !self.config.fails_over() {
            let voting: Vec<&str> = Config::ALL
                .into_iter()
                .filter(|c| c.fails_over())
                .map(Config::name)
                .collect();
            return Err(Refusal::Inapplicable(format!(
                "--restart-at-vote restarts a killed primary as its replica is voted in, and --config {} has no replica to vote in: choose {}, or give --restart-ms",
                self.config,
                voting.join(", ")
            )));
        }
        if self.nodes.target.is_some() || self.nodes.hosts.is_some() {
            return Err(Refusal::Invalid(
                "--restart-at-vote times the restart of nodes lockstorm started on this machine: drop --target/--nodes, or give --restart-ms".to_string(),
            ));
        }
        Ok(())
    }

    /// etcd's lock runs on lockstorm's own members, struck by the faults
    /// that act on a process, by a partition between members (made with
    /// iptables) and by clock faults (the harness serves a member's wall
    /// clock to its process, which it can do on the local backend only):
    /// the fault proxy speaks Redis's protocol.
    fn check_etcd(&self) -> Result<(), Refusal> {
        if !self.config.locks_in_etcd() {
            return Ok(());
        }
        if self.nodes.target.is_some() {
            return Err(Refusal::Invalid(format!(
                "--target names your Redis deployment, and --config {} starts its own etcd cluster: drop one",
                self.config
            )));
        }
        let unbuilt = self
            .nemesis
            .any(|p| in_proxy(self.config, p) || p.needs_firewall());
        if unbuilt || self.latency_ms.is_some() {
            return Err(Refusal::Inapplicable(format!(
                "--nemesis {} does not reach etcd's members yet (the fault proxy speaks Redis's protocol): with --config {} choose pause, crash, kill, pause-node, partition or clock",
                self.nemesis, self.config
            )));
        }
        if self.nemesis.any(|p| p.needs_time_shim()) && self.nodes.backend == Backend::Docker {
            return Err(Refusal::Inapplicable(format!(
                "--nemesis {} moves an etcd member's clock only on the local backend (the harness serves it to the member's process, which it cannot do in a container): add --backend local",
                self.nemesis
            )));
        }
        Ok(())
    }

    /// ZooKeeper's lock runs on lockstorm's own members, on the local
    /// backend, struck by the faults that act on a process: the fault proxy
    /// speaks Redis's protocol, a cut between members and a member's clock
    /// are etcd's so far.
    fn check_zookeeper(&self) -> Result<(), Refusal> {
        if !self.config.locks_in_zookeeper() {
            return Ok(());
        }
        if self.nodes.target.is_some() {
            return Err(Refusal::Invalid(format!(
                "--target names your Redis deployment, and --config {} starts its own ZooKeeper ensemble: drop one",
                self.config
            )));
        }
        let unbuilt = self.nemesis.any(|p| {
            p.needs_proxy() || p.needs_firewall() || p.cuts_members() || p.needs_time_shim()
        });
        if unbuilt || self.latency_ms.is_some() {
            return Err(Refusal::Inapplicable(format!(
                "--nemesis {} does not reach ZooKeeper's members yet (the fault proxy speaks Redis's protocol; cuts and clocks are etcd's so far): with --config {} choose pause, crash, kill or pause-node",
                self.nemesis, self.config
            )));
        }
        if self.nodes.backend == Backend::Docker {
            return Err(Refusal::Inapplicable(format!(
                "--config {} runs its ZooKeeper members on the local backend only: add --backend local",
                self.config
            )));
        }
        Ok(())
    }

    /// `--storage-cmd` puts the counter in the adapter's storage: not on
    /// the user's node too, nor outside the lock's own transaction.
    fn check_storage_cmd(&self) -> Result<(), Refusal> {
        if self.storage_cmd.is_none() {
            return Ok(());
        }
        if self.nodes.storage_target.is_some() {
            return Err(Refusal::Invalid(
                "--storage-cmd keeps the counter through your storage adapter, and --storage-target on your Redis node: choose one".into(),
            ));
        }
        if self.config.commits_with_release() {
            return Err(Refusal::Invalid(format!(
                "--config {} writes the counter inside the lock's own transaction, which a storage adapter is outside of: choose another config, or drop --storage-cmd",
                self.config
            )));
        }
        Ok(())
    }

    /// `--storage-target`, read: one node, only with a `--target`.
    fn storage_target(&self) -> Result<Option<deployment::target::Target>, Refusal> {
        let Some(raw) = &self.nodes.storage_target else {
            return Ok(None);
        };
        if self.nodes.target.is_none() {
            return Err(Refusal::Invalid(
                "--storage-target keeps the counter on your node during a --target run: give --target, or drop --storage-target".into(),
            ));
        }
        let storage = deployment::target::Target::parse(raw)
            .map_err(|why| Refusal::Invalid(why.replacen("--target", "--storage-target", 1)))?;
        if storage.kind != deployment::target::Kind::Single {
            return Err(Refusal::Invalid(format!(
                "--storage-target {storage}: the counter lives on one node: give redis://host:port"
            )));
        }
        Ok(Some(storage))
    }

    /// `--fault-cmd`, read; only with a `--target`.
    fn fault_commands(&self) -> Result<std::collections::BTreeMap<String, String>, Refusal> {
        if self.nodes.fault_cmd.is_empty() {
            return Ok(Default::default());
        }
        if self.nodes.target.is_none() {
            return Err(Refusal::Invalid(
                "--fault-cmd stands in for a fault on a deployment lockstorm did not start: give --target, or drop --fault-cmd (lockstorm kills and fails over its own nodes itself)".into(),
            ));
        }
        deployment::fault_command::parse(&self.nodes.fault_cmd).map_err(Refusal::Invalid)
    }

    /// A `--target` that parses and fits the config (or the client's
    /// topology), and that this version can test.
    fn check_target(&self, raw: &str) -> Result<deployment::target::Target, Refusal> {
        use deployment::target::{Kind, Target};
        let target = Target::parse(raw).map_err(Refusal::Invalid)?;
        if self.nodes.tls_ca.is_some() && !target.tls {
            return Err(Refusal::Invalid(format!(
                "--tls-ca is for a TLS target, and {target} is not one: write rediss://, or drop --tls-ca"
            )));
        }
        // What a config's lock needs of the nodes, against what the target has.
        let runs_on = |config: Config| match target.kind {
            Kind::Single => config.lock_nodes() == 1 && config != Config::Replicated,
            Kind::Redlock => {
                config.lock_nodes() > 1 && !config.fails_over() && !config.locks_in_members()
            }
            Kind::Sentinel { .. } => config == Config::Replicated,
            Kind::Cluster => config.in_cluster(),
        };
        if !runs_on(self.config) {
            let configs: Vec<&str> = Config::ALL
                .into_iter()
                .filter(|c| runs_on(*c))
                .map(|c| c.name())
                .collect();
            return Err(Refusal::Inapplicable(format!(
                "--config {} does not run on a {} target ({target}): use --config {}",
                self.config,
                target.kind_name(),
                configs.join(", ")
            )));
        }
        if self.nodes.image.is_some() {
            return Err(Refusal::Invalid(
                "--image chooses the image of nodes lockstorm starts, and --target names nodes it does not: drop --image".into(),
            ));
        }
        if self.config.may_leave_key_without_ttl() {
            return Err(Refusal::Inapplicable(format!(
                "--config {} can leave its lock key with no expiry (a holder dying between SETNX and EXPIRE is the flaw it shows), and on {target} that key would block the lock until someone deletes it: run it on lockstorm's own nodes (drop --target)",
                self.config
            )));
        }
        Ok(target)
    }

    /// A client adapter runs on a topology it supports, and only faults
    /// that reach it through its process or its nodes apply.
    fn check_client(&self) -> Result<(), Refusal> {
        let Some(client) = self.client.chosen() else {
            return Ok(());
        };
        if let Some(why) = client.refusal(self.config) {
            return Err(match workloads::install::topology(self.config) {
                None => Refusal::Invalid(why),
                Some(_) => Refusal::Inapplicable(why),
            });
        }
        if self.holder_skew_ms != 0 {
            return Err(Refusal::Invalid(
                "--holder-skew-ms skews the worker's own lease clock, which a client adapter's library does not read: drop it (clock still jumps the nodes' clocks)".into(),
            ));
        }
        Ok(())
    }

    /// Every fault the nemesis names explicitly must act on this config
    /// (`all` offers every fault, and schedules those that apply).
    fn check_faults_apply(&self) -> Result<(), Refusal> {
        if self.shared.targets == Targets::Storage && self.nemesis.any(|p| !p.can_target_storage())
        {
            return Err(Refusal::Inapplicable(format!(
                "--targets storage aims kill and pause-node at the storage node, and --nemesis {} has other faults: run those without --targets storage",
                self.nemesis
            )));
        }
        if self.nemesis.all {
            return Ok(());
        }
        let commands: Vec<String> = self.fault_commands()?.into_keys().collect();
        let shape = shape(
            self.config,
            self.shared.targets,
            self.nodes.target.is_none(),
            self.nodes.hosts.is_some(),
            &commands,
        );
        // Single faults first, so the reason names the fault that cannot act.
        let singles = self.nemesis.faults.iter().map(|f| f.package());
        let actions = self.nemesis.actions().into_iter().map(|a| a.package());
        for package in singles.chain(actions) {
            if let Err(why) = nemesis::applies(package, &shape) {
                return Err(Refusal::Inapplicable(format!(
                    "--nemesis {} {why}",
                    package.name()
                )));
            }
        }
        Ok(())
    }
    /// Every number within a range that neither overflows the arithmetic
    /// built on it nor makes the run test nothing.
    fn check_ranges(&self) -> Result<(), Refusal> {
        let given = |v: Option<u64>| v.unwrap_or(1);
        let unsigned: [(&str, u64, u64, u64, &str); 15] = [
            (
                "--time-limit",
                self.timing.time_limit,
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
                given(self.shared.nemesis_interval_ms),
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
            (
                "--fault-cmd-wait-ms",
                self.nodes.fault_cmd_wait_ms,
                1,
                MAX_MS,
                "ms",
            ),
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
                return Err(Refusal::Invalid(format!(
                    "{name} {value} is out of range: use -{MAX_MS} to {MAX_MS} (ms)"
                )));
            }
        }
        Ok(())
    }
}

/// How long a lock may go ungranted, with acquires attempted and no fault
/// active, before it counts as stuck (`deadlock`): a dead or stalled
/// holder's key outlives it by at most a TTL, a waiting worker's acquire
/// retries for up to its timeout before it tries again, and 1 s covers the
/// hand-over and a busy host. A lock with no TTL gives `ttl` zero: its dead
/// holder's lock goes with its session.
pub fn deadlock_threshold(ttl: Duration, acquire_timeout: Duration) -> Duration {
    ttl + acquire_timeout + Duration::from_secs(1)
}

impl RunPlan {
    /// The `deadlock` threshold for this run; without the TTL for a lock
    /// that has none (`expires` false: a client adapter's `no-ttl`).
    pub fn deadlock_after(&self, expires: bool) -> Duration {
        let ttl = if expires { self.ttl } else { Duration::ZERO };
        deadlock_threshold(ttl, self.acquire_timeout)
    }

    /// Refuses a run whose time limit fits no fault: it would test nothing
    /// and could only come out valid.
    fn check_schedule_fits(&self) -> Result<(), Refusal> {
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
        Err(Refusal::Inapplicable(format!(
            "--nemesis {}: no fault fits in --time-limit {} s ({} lasts {} ms, after up to {} ms of quiet and before {} ms to settle): use --time-limit {} or more",
            self.nemesis,
            self.time_limit.as_secs(),
            action.name(),
            longest,
            spec.interval_ms,
            spec.settle_ms,
            needs_ms.div_ceil(1000)
        )))
    }

    /// Each action the run asked for that applies to its config (`all`
    /// offers every one), with how long its package says it lasts.
    pub fn schedule_spec(&self) -> ScheduleSpec {
        let commands: Vec<String> = self.fault_commands.keys().cloned().collect();
        let shape = shape(
            self.config,
            self.targets,
            self.target.is_none(),
            !self.hosts.is_empty(),
            &commands,
        );
        let params = self.fault_params();
        let actions = self
            .nemesis
            .actions()
            .into_iter()
            .filter(|a| nemesis::applies(a.package(), &shape).is_ok())
            .map(|a| (a, a.package().duration(&params).as_millis() as u64))
            .collect();
        ScheduleSpec {
            seed: self.seed,
            actions,
            interval_ms: self.nemesis_interval.as_millis() as u64,
            time_limit_ms: self.time_limit.as_millis() as u64,
            settle_ms: self.ttl.max(Duration::from_secs(1)).as_millis() as u64,
        }
    }

    /// The run's faults and where each strike lands (`--schedule`'s, or
    /// the seed's draw): pure, so it is known before anything starts.
    pub fn schedule(&self) -> Vec<Step> {
        if let Some(steps) = &self.steps {
            return steps.clone();
        }
        let mut steps = nemesis::schedule(&self.schedule_spec());
        nemesis::place_strikes(&mut steps, self.at, self.seed);
        steps
    }

    /// How each fault behaves in this run.
    pub fn fault_params(&self) -> FaultParams {
        FaultParams {
            pause: self.pause,
            node_pause: self.node_pause,
            kill_down: self.restart,
            restart_at_vote: self.restart_at_vote,
            promotion: self.down_after + self.failover_timeout,
            down_after: self.down_after,
            targets: self.targets,
            clock_jump_ns: self.clock_jump_ms * 1_000_000,
            holder_skew_ns: self.holder_skew_ms * 1_000_000,
            hold: self.fault,
            lock_ttl: self.ttl,
            // Each step names its own point; this is the fallback.
            at: match self.at {
                At::Point(p) => p,
                At::Random => At::default_point(),
            },
            quiet: self.nemesis_interval / 2,
        }
    }

    /// Whether any fault the run names needs this of the host or the run.
    pub fn needs(&self, need: impl Fn(&dyn Package) -> bool) -> bool {
        self.nemesis.any(need)
    }

    /// Whether every worker's connections go through the fault proxy: only
    /// when a fault acts there or `--latency-ms` is given, so other runs pay
    /// no hop and stay comparable with runs made before the proxy.
    pub fn proxied(&self) -> bool {
        self.needs(|p| in_proxy(self.config, p)) || self.latency_ms.is_some()
    }

    /// Whether the run cuts links with iptables: a failover's, or a
    /// partition between etcd's members or a cluster's nodes.
    pub fn cuts_with_iptables(&self) -> bool {
        let talk = self.config.nodes_talk();
        self.needs(|p| p.needs_firewall() || (talk && p.cuts_members()))
    }

    /// The nemesis and where it strikes: `pause@read`, or `pause` at the default point.
    pub fn aimed(&self) -> Aimed {
        Aimed {
            nemesis: self.nemesis.clone(),
            at: self.at,
        }
    }

    /// `<config>-<nemesis>[@<point>]`, the folder name of this kind of run;
    /// `<config>.<client>-…` for a client adapter's; `target-…` for a run
    /// against a deployment, so it never takes over a local run's `latest`.
    pub fn name(&self) -> String {
        self.on_target(format!("{}-{}", self.setup(), self.aimed()))
    }

    /// [`RunPlan::name`] with the client called `client` (a `--client-cmd`
    /// run's folder, named after its library).
    pub fn name_as(&self, client: &str) -> String {
        let setup = crate::clients::setup_named(self.config, Some(client), self.storage);
        self.on_target(format!("{setup}-{}", self.aimed()))
    }

    fn on_target(&self, name: String) -> String {
        match self.target {
            Some(_) => format!("target-{name}"),
            None => name,
        }
    }

    /// What the run's summary and pages are headed with:
    /// `single × pause (seed 1)`, `single × pause against redis://… (seed 1)`.
    pub fn heading(&self) -> String {
        let against = self
            .target
            .as_ref()
            .map(|t| format!(" against {t}"))
            .unwrap_or_default();
        format!(
            "{} × {}{against} (seed {})",
            self.setup(),
            self.aimed(),
            self.seed
        )
    }

    /// The name the Sentinels watch the primary under: the target's, or
    /// the one lockstorm gives its own.
    pub fn master(&self) -> String {
        match self.target.as_ref().map(|t| &t.kind) {
            Some(deployment::target::Kind::Sentinel { master }) => master.clone(),
            _ => workloads::lock::primary_name(),
        }
    }

    /// `single`, or `single.redis-py` for a client adapter on that topology.
    pub fn setup(&self) -> String {
        crate::clients::setup_name(self.config, self.client.as_ref(), self.storage)
    }
}

/// What a config offers a fault, on nodes lockstorm started (`owned`) or
/// on a user's deployment, its node faults aimed at `targets`.
fn shape(
    config: Config,
    targets: Targets,
    owned: bool,
    on_hosts: bool,
    commands: &[String],
) -> Shape<'_> {
    let storage_targeted = targets == Targets::Storage;
    Shape {
        config: config.name(),
        lock_nodes: config.lock_nodes(),
        fails_over: config.fails_over(),
        cluster: config.in_cluster(),
        locks_in_storage: config.locks_in_storage(),
        storage_targeted,
        owned,
        on_hosts,
        commands,
    }
}

/// The longest duration option: an hour.
const MAX_MS: u64 = 3_600_000;
/// The longest run: a day.
const MAX_TIME_LIMIT_S: u64 = 86_400;

fn out_of_range(name: &str, value: u64, lo: u64, hi: u64, unit: &str) -> Refusal {
    Refusal::Invalid(format!(
        "{name} {value} is out of range: use {lo} to {hi} ({unit})"
    ))
}

/// `run.json` keeps durations in the options' own units.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

fn rand_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as u64 ^ u64::from(std::process::id())) % 1_000_000
}

/// Whether fault `p` acts in the fault proxy on `config`: a partition of
/// etcd's members is made with iptables instead.
fn in_proxy(config: Config, p: &dyn Package) -> bool {
    p.needs_proxy() && !(config.nodes_talk() && p.cuts_members())
}

#[cfg(test)]
#[path = "options_defaults.rs"]
pub(crate) mod defaults_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn resolve_fills_derived_defaults_and_keeps_a_given_seed() {
        let mut o = RunOptions::new(Config::Single, "pause".parse().unwrap());
        o.seed = Some(7);
        let p = o.resolve().unwrap();
        assert_eq!(
            (p.seed, p.pause, p.acquire_timeout),
            (7, ms(3000), ms(4000))
        );
        assert_eq!((p.ttl, p.work), (ms(2000), ms(200)));
        assert_eq!(p.name(), "single-pause");
    }

    #[test]
    fn a_storage_cmd_is_kept_and_refused_beside_another_home_for_the_counter() {
        let mut o = RunOptions::new(Config::Fenced, Nemesis::none());
        o.shared.storage = Some(StorageKind::Postgres);
        o.storage_cmd = Some(StorageCmd::parse("python3  storage.py --fast").unwrap());
        let plan = o.clone().resolve().unwrap();
        let argv = plan.storage_cmd.as_ref().map(|c| c.0.clone());
        assert_eq!(
            argv,
            Some(vec!["python3".into(), "storage.py".into(), "--fast".into()])
        );
        assert_eq!(plan.storage, StorageKind::Postgres);
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["storage_cmd"][1], "storage.py");
        assert!(serde_json::to_value(RunPlan::default())
            .unwrap()
            .get("storage_cmd")
            .is_none());
        let mut target = o.clone();
        target.shared.storage = None;
        target.nodes.target = Some("redis://127.0.0.1:1".into());
        target.nodes.storage_target = Some("redis://127.0.0.1:2".into());
        let Err(Refusal::Invalid(why)) = target.resolve() else {
            panic!("--storage-cmd with --storage-target was accepted");
        };
        assert!(why.contains("choose one"), "{why}");
        let mut row_lock = o;
        row_lock.config = Config::PgRowLock;
        let Err(Refusal::Invalid(why)) = row_lock.resolve() else {
            panic!("--storage-cmd with pg-row-lock was accepted");
        };
        assert!(why.contains("transaction"), "{why}");
        assert!(StorageCmd::parse("  ")
            .unwrap_err()
            .contains("--storage-cmd is empty"));
    }

    #[test]
    fn at_without_a_striking_fault_names_every_fault_that_strikes() {
        let mut o = RunOptions::new(Config::Single, "kill".parse().unwrap());
        o.at = Some("read".parse().unwrap());
        let Err(Refusal::Invalid(why)) = o.resolve() else {
            panic!("--at with kill was accepted");
        };
        assert!(
            why.contains("add pause, crash, delay, lose-reply or terminate-session, or drop --at"),
            "{why}"
        );
    }

    #[test]
    fn an_image_is_refused_on_the_local_backend() {
        let mut o = RunOptions::new(Config::Single, Nemesis::none());
        o.nodes.image = Some("redis:7.2".into());
        o.nodes.backend = Backend::Local;
        let Err(Refusal::Invalid(why)) = o.clone().resolve() else {
            panic!("--image with --backend local was accepted");
        };
        assert!(why.contains("--backend docker"), "{why}");
        for backend in [Backend::Auto, Backend::Docker] {
            o.nodes.backend = backend;
            assert_eq!(
                o.clone().resolve().unwrap().image.as_deref(),
                Some("redis:7.2")
            );
        }
    }

    #[test]
    fn a_node_fault_without_a_lock_node_is_a_usage_error() {
        for nemesis in ["pause-node", "kill"] {
            let o = RunOptions::new(Config::NoLock, nemesis.parse().unwrap());
            let err = o.resolve().unwrap_err();
            let Refusal::Inapplicable(why) = err else {
                panic!("{err:?}")
            };
            assert!(why.contains("config no-lock has none"), "{why}");
        }
    }

    #[test]
    fn kill_and_failover_get_a_critical_section_longer_than_a_failover() {
        let o = RunOptions::new(Config::Replicated, "failover".parse().unwrap());
        let p = o.resolve().unwrap();
        assert_eq!((p.ttl, p.work), (ms(6_000), ms(4_000)));
        assert!(p.node_pause >= p.down_after + ms(3000));
        let mut given = RunOptions::new(Config::Single, "kill".parse().unwrap());
        given.work_ms = Some(50);
        assert_eq!(given.resolve().unwrap().work, ms(50));
    }

    #[test]
    fn a_given_ttl_shortens_the_default_work_so_holds_end_within_their_lease() {
        let mut o = RunOptions::new(Config::Redlock, "kill".parse().unwrap());
        o.ttl_ms = Some(2_000);
        let p = o.resolve().unwrap();
        assert!(p.work < p.ttl, "work {:?}", p.work);
        assert_eq!(p.work, ms(1_333));
        let mut slow = RunOptions::new(Config::Single, "pause".parse().unwrap());
        (slow.ttl_ms, slow.work_ms) = (Some(100), Some(5_000));
        assert_eq!(slow.resolve().unwrap().work, ms(5_000), "given: kept");
    }

    #[test]
    fn a_cluster_refuses_the_proxys_faults_and_other_machines_and_waits_out_its_vote() {
        for nemesis in ["delay", "lose-reply"] {
            let o = RunOptions::new(Config::Cluster, nemesis.parse().unwrap());
            let err = o.resolve().unwrap_err();
            let Refusal::Inapplicable(why) = err else {
                panic!("{nemesis}: {err:?}")
            };
            assert!(why.contains("with --config cluster choose"), "{why}");
        }
        let mut o = RunOptions::new(Config::Cluster, Nemesis::none());
        o.nodes.hosts = Some("10.213.0.11".into());
        assert!(matches!(o.resolve(), Err(Refusal::Invalid(_))));
        let p = RunOptions::new(Config::Cluster, "pause-node".parse().unwrap())
            .resolve()
            .unwrap();
        assert!(
            p.node_pause >= p.down_after + ms(3000),
            "{:?}",
            p.node_pause
        );
    }

    #[test]
    fn a_restart_at_the_vote_needs_a_vote_on_nodes_lockstorm_started() {
        let kill = || "kill".parse().unwrap();
        let mut o = RunOptions::new(Config::Single, kill());
        o.restart_at_vote = true;
        let Err(Refusal::Inapplicable(why)) = o.resolve() else {
            panic!("single has no replica to vote in")
        };
        assert!(
            why.contains("choose replicated, cluster, cluster-fenced,"),
            "{why}"
        );
        let mut o = RunOptions::new(Config::Cluster, kill());
        o.restart_at_vote = true;
        o.nodes.target = Some("redis+cluster://127.0.0.1:7000".into());
        assert!(matches!(o.resolve(), Err(Refusal::Invalid(_))));
        let mut o = RunOptions::new(Config::Replicated, kill());
        o.restart_at_vote = true;
        let plan = o.resolve().unwrap();
        let p = plan.fault_params();
        assert!(p.restart_at_vote && p.down_after == plan.down_after);
        // The restart's time is the vote's, not --restart-ms's: both refused.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunOptions,
        }
        let parse = |a: &[&str]| <Cli as clap::Parser>::try_parse_from(a).map(|c| c.run);
        assert!(
            parse(&["run", "--restart-at-vote"])
                .unwrap()
                .restart_at_vote
        );
        assert!(parse(&["run", "--restart-at-vote", "--restart-ms", "900"]).is_err());
    }

    #[test]
    fn a_run_with_its_own_fault_timing_or_durability_says_which_flags_set_it() {
        let kill = || "kill".parse().unwrap();
        let mut o = RunOptions::new(Config::Single, kill());
        (o.workers, o.seed, o.timing.time_limit) = (9, Some(4), 30);
        assert!(o.fault_shaping_flags().is_empty(), "seed, workers, time");
        (o.restart_ms, o.persistence) = (2000, Persistence::AofAlways);
        assert_eq!(o.fault_shaping_flags(), ["--restart-ms", "--persistence"]);
    }

    #[test]
    fn failover_and_wait_replicas_need_the_replicated_config() {
        let o = RunOptions::new(Config::Single, "failover".parse().unwrap());
        let err = Error::from(o.resolve().unwrap_err());
        assert!(err.to_string().contains("--config replicated"), "{err}");
        assert_eq!(err.exit_code(), crate::exit::BAD_INPUT);
        let mut o = RunOptions::new(Config::Single, Nemesis::none());
        o.wait_replicas = 1;
        assert!(matches!(o.resolve(), Err(Refusal::Invalid(_))));
    }

    fn with_client(config: Config, nemesis: &str, client: &str) -> Result<RunPlan, Refusal> {
        let mut o = RunOptions::new(config, nemesis.parse().unwrap());
        o.client.client = Some(Client::shipped(client).unwrap());
        o.resolve()
    }

    #[test]
    fn a_client_runs_on_the_topologies_it_supports_and_names_its_runs() {
        let p = with_client(Config::Single, "pause", "redis-py").unwrap();
        assert_eq!(p.name(), "single.redis-py-pause");
        assert_eq!(p.setup(), "single.redis-py");
        let Err(Refusal::Invalid(why)) = with_client(Config::UnsafeDel, "none", "redis-py") else {
            panic!("a built-in lock is not a topology")
        };
        assert!(
            why.contains("use --config single, replicated or redlock"),
            "{why}"
        );
        let Err(Refusal::Inapplicable(why)) = with_client(Config::Redlock, "none", "redis-py")
        else {
            panic!("redis-py has no Redlock")
        };
        assert!(why.contains("use --config single"), "{why}");
    }

    #[test]
    fn latency_is_min_or_a_range_and_asks_for_the_proxy() {
        assert_eq!(
            "3".parse(),
            Ok(Latency {
                min_ms: 3,
                max_ms: 3
            })
        );
        assert_eq!(
            "1..5".parse(),
            Ok(Latency {
                min_ms: 1,
                max_ms: 5
            })
        );
        assert_eq!(
            Latency {
                min_ms: 1,
                max_ms: 5
            }
            .to_string(),
            "1..5"
        );
        for bad in ["5..1", "x", "1..", "-1", "1..99999"] {
            let e = bad.parse::<Latency>().unwrap_err();
            assert!(e.contains(bad) && e.contains("MAX"), "{e}");
        }
        let mut o = RunOptions::new(Config::Single, Nemesis::none());
        assert!(
            !o.clone().resolve().unwrap().proxied(),
            "no fault, no latency: no hop"
        );
        o.latency_ms = Some("0".parse().unwrap());
        assert!(o.clone().resolve().unwrap().proxied(), "0: the hop alone");
        assert_eq!(o.latency_ms.unwrap().range(), None);
    }

    #[test]
    fn network_faults_reach_an_adapter_through_the_proxy_and_its_own_clock_is_not_skewed() {
        // The fault proxy carries an adapter's own connections: partition,
        // delay and lose-reply apply to it, and `all` schedules them.
        for nemesis in ["partition", "delay", "lose-reply"] {
            let plan = with_client(Config::Redlock, nemesis, "pottery").unwrap();
            assert!(plan.proxied(), "{nemesis}");
        }
        let all = with_client(Config::Redlock, "all", "pottery").unwrap();
        let actions = all.schedule_spec().actions;
        assert!(
            actions
                .iter()
                .any(|(a, _)| a.package().name() == "partition"),
            "{actions:?}"
        );
        let mut skew = RunOptions::new(Config::Single, "clock".parse().unwrap());
        skew.client.client = Some(Client::shipped("redis-py").unwrap());
        skew.holder_skew_ms = 100;
        assert!(
            matches!(skew.resolve(), Err(Refusal::Invalid(w)) if w.contains("--holder-skew-ms"))
        );
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    fn plan(config: Config, nemesis: &str) -> RunPlan {
        let mut o = RunOptions::new(config, nemesis.parse().unwrap());
        o.seed = Some(1);
        o.resolve().unwrap()
    }

    #[test]
    fn each_fault_lasts_what_its_package_says_from_the_plan() {
        let spec = |c, n| plan(c, n).schedule_spec().actions;
        let durations = |c, n| spec(c, n).into_iter().map(|(_, ms)| ms).collect::<Vec<_>>();
        // TTL 2000: pause 1.5 TTL; TTL 6000 for the slow faults.
        assert_eq!(durations(Config::Single, "pause"), [3_000]);
        assert_eq!(durations(Config::Single, "kill"), [800]);
        assert_eq!(durations(Config::Single, "clock"), [2_000]);
        assert_eq!(durations(Config::Redlock, "partition"), [6_000]);
        assert_eq!(
            durations(Config::Replicated, "failover"),
            [6_000 + 1_000 + 5_000 + 800]
        );
        assert_eq!(durations(Config::Redlock, "partition+clock"), [12_000]);
        assert_eq!(durations(Config::Redlock, "kill+clock"), [6_800]);
    }

    #[test]
    fn faults_come_about_a_lease_apart_within_one_to_five_seconds() {
        let interval = |c, n| plan(c, n).schedule_spec().interval_ms;
        assert_eq!(interval(Config::Single, "pause"), 2_000);
        assert_eq!(interval(Config::Redlock, "clock"), 2_000);
        // The slow faults' 6 s lease: capped, as often as before.
        assert_eq!(interval(Config::Redlock, "kill"), 5_000);
        assert_eq!(interval(Config::Replicated, "failover"), 5_000);
        let mut short = RunOptions::new(Config::Single, "pause".parse().unwrap());
        short.ttl_ms = Some(300);
        assert_eq!(
            short.clone().resolve().unwrap().nemesis_interval,
            Duration::from_millis(1_000)
        );
        short.shared.nemesis_interval_ms = Some(200);
        assert_eq!(
            short.resolve().unwrap().nemesis_interval,
            Duration::from_millis(200),
            "given: kept"
        );
        // Nearly twice as many pauses fit a 30 s run as with the old fixed
        // 5 s (5 to 3 with seed 1).
        let pauses = |interval_ms| {
            let mut o = RunOptions::new(Config::Single, "pause".parse().unwrap());
            (o.seed, o.shared.nemesis_interval_ms) = (Some(1), interval_ms);
            o.resolve().unwrap().schedule().len()
        };
        assert!(
            pauses(None) >= 2 * pauses(Some(5_000)) - 1,
            "{} vs {}",
            pauses(None),
            pauses(Some(5_000))
        );
    }

    #[test]
    fn all_schedules_only_what_applies_to_the_config() {
        let names = |c| -> Vec<&str> {
            plan(c, "all")
                .schedule_spec()
                .actions
                .into_iter()
                .map(|(a, _)| a.name())
                .collect()
        };
        assert_eq!(
            names(Config::NoLock),
            ["pause", "crash", "delay", "lose-reply"],
            "no lock node: only what acts on the worker and the storage"
        );
        assert_eq!(names(Config::Replicated).len(), 9);
        assert_eq!(
            names(Config::Redlock).len(),
            10,
            "{:?}",
            names(Config::Redlock)
        );
    }

    #[test]
    fn a_stored_plan_reads_back_as_written_and_older_runs_as_defaults() {
        let p = plan(Config::Redlock, "clock,partition");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["ttl_ms"], 6_000);
        assert_eq!(json["time_limit"], 30);
        assert_eq!(json["nemesis"], "partition+clock");
        assert_eq!(serde_json::from_value::<RunPlan>(json).unwrap(), p);
        let old: RunPlan =
            serde_json::from_str(r#"{"config":"fenced","nemesis":"clock,partition"}"#).unwrap();
        assert_eq!(
            (old.config, old.ttl),
            (Config::Fenced, Duration::from_millis(2_000))
        );
        assert_eq!(old.nemesis.to_string(), "partition+clock");
        let defaults = RunPlan {
            config: Config::Fenced,
            nemesis: "partition+clock".parse().unwrap(),
            ..defaults_tests::plan_before()
        };
        assert_eq!(old, defaults, "every missing field reads as the default");
    }
}
