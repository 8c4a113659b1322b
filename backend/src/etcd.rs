//! etcd members as nodes: the lock of the `etcd` configs, three members of
//! one cluster. Like a Redis node each has its own loopback address, its
//! own folder in the run with its log (`output.log`), and two ports: one for
//! clients (and the JSON gateway), one for its peers. Its data folder
//! (`data`, write-ahead log preallocated in 64 MB files) is in its folder
//! and removed when the member is; a reaper removes it after a SIGKILL of
//! the harness. A killed member restarts on its data and rejoins; its kill,
//! restart and removal are every [`Server`]'s.

use crate::error::{Error, Result};
use crate::provision::{Found, Launch, Program, Provisioner};
use crate::reaper::DataFolder;
use crate::server::{free_port, Kind, Managed, Server};
use nemesis::cluster::{BoxFuture, ClockReading};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloads::etcd::{self, Gateway};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The Docker backend's image of a member (`lockstorm image import`).
pub const IMAGE: &str = "lockstorm/etcd:local";
/// Where `LOCKSTORM_ETCD_BIN` points: the folder of `etcd`.
const BIN_ENV: &str = "LOCKSTORM_ETCD_BIN";

/// etcd as a member runs it: found here, and in its own image.
fn program() -> Result<Found> {
    Ok(Found {
        path: find()?,
        image: Some((IMAGE, "etcd; apt-get install -y etcd-server")),
        quits: false,
    })
}

/// etcd on this machine: `$LOCKSTORM_ETCD_BIN/etcd`, else `etcd` on PATH.
pub fn find() -> Result<PathBuf> {
    let missing = |looked: String| Error::MissingProgram {
        program: "etcd",
        package: "etcd-server",
        env: BIN_ENV,
        looked,
    };
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let etcd = PathBuf::from(dir).join("etcd");
        return match etcd.is_file() {
            true => Ok(etcd),
            false => Err(missing(format!("{BIN_ENV}={} has no etcd", etcd.display()))),
        };
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
        .ok_or_else(|| missing("not on PATH".into()))
}

/// `etcd --version`'s first line, for `run.json`.
pub fn version() -> String {
    find()
        .ok()
        .and_then(|etcd| version_of(&etcd).ok())
        .unwrap_or_else(|| "unknown".into())
}

/// `<etcd> --version`'s first line (`etcd Version: 3.4.23`).
pub fn version_of(etcd: &Path) -> std::result::Result<String, String> {
    let out = process::output_within(Command::new(etcd).arg("--version"), crate::PROBE_WITHIN)
        .map_err(|e| format!("cannot run {} --version: {e}", etcd.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().next() {
        Some(line) if out.status.success() && line.starts_with("etcd Version") => {
            Ok(line.to_string())
        }
        _ => Err(format!(
            "{} --version did not name an etcd version ({}): set LOCKSTORM_ETCD_BIN to the folder of a working etcd",
            etcd.display(),
            out.status
        )),
    }
}

/// The wall clock of the member at `addr` (its client address), to a few
/// ms: its HTTP `Date` has whole seconds, so `/health` is asked until the
/// second turns. The member's clock crossed that second between the two
/// last answers: the reading spans them.
pub async fn wall_clock(addr: String) -> std::result::Result<ClockReading, String> {
    tokio::task::spawn_blocking(move || {
        let gateway = Gateway::new(None, Duration::from_millis(500)).map_err(|e| e.to_string())?;
        let dated = || {
            let before = nemesis::clock::real_now_ns();
            let date = gateway
                .date(&addr, "/health")
                .map_err(|e| format!("{addr}: {e}"))?;
            Ok::<_, String>((before, date, nemesis::clock::real_now_ns()))
        };
        let (mut before, first, _) = dated()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            let (next_before, date, after) = dated()?;
            if date != first {
                return Ok(ClockReading {
                    via: "Date",
                    node_ns: date,
                    before_ns: before,
                    after_ns: after,
                });
            }
            before = next_before;
        }
        Err(format!("{addr}: its Date did not turn a second in 3 s"))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Whether the member at `addr` (its client address) knows a leader now,
/// from its metrics.
pub async fn has_leader(addr: String) -> std::result::Result<bool, String> {
    tokio::task::spawn_blocking(move || {
        let gateway = Gateway::new(None, Duration::from_millis(500)).map_err(|e| e.to_string())?;
        let (_, metrics) = gateway
            .get(&addr, etcd::METRICS)
            .map_err(|e| format!("{addr}: {e:?}"))?;
        etcd::has_leader(&metrics)
            .ok_or_else(|| format!("{addr}: no etcd_server_has_leader in its metrics"))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// One member of the run's etcd cluster. Its core's port is its client
/// port, and its identity when its process started, as its metrics say: a
/// new one after a restart stands for Redis's `run_id`.
pub struct EtcdMember {
    core: Managed,
    program: Found,
    peer_port: u16,
    /// Every member's peer URL, `name=http://ip:port`, joined by commas.
    cluster: String,
    /// The cluster's token: the run's, so no member joins another run's.
    token: String,
    /// Its time control file, when the harness serves its wall clock.
    clock: Option<PathBuf>,
}

/// Starts one member per `(name, ip, clock)` as one new cluster and waits
/// until each is healthy (it has a leader). A member with a `clock` (its
/// time control file) reads the wall clock the harness serves it
/// ([`nemesis::served_clock`]).
pub async fn start_cluster(
    members: &[(String, Ipv4Addr, Option<PathBuf>)],
    nodes_dir: &Path,
    backend: Arc<dyn Provisioner>,
    token: &str,
) -> Result<Vec<EtcdMember>> {
    let program = program()?;
    let mut planned = Vec::new();
    for (name, ip, clock) in members {
        let mut core = Managed::new(name, *ip, nodes_dir)?;
        core.port = free_port(*ip)?;
        planned.push((core, free_port(*ip)?, clock.clone()));
    }
    let cluster = planned
        .iter()
        .map(|(core, peer, _)| format!("{}=http://{}:{peer}", core.name, core.ip))
        .collect::<Vec<_>>()
        .join(",");
    let mut started = Vec::new();
    for (mut core, peer_port, clock) in planned {
        // Removes the data once the harness is gone, however it ended.
        let data = core.dir.join("data");
        core.data = Some(DataFolder::reaped_noting_pid(
            "etcd",
            &data,
            &core.dir.join(PID_FILE),
        )?);
        let mut member = EtcdMember {
            core,
            program: program.clone(),
            peer_port,
            clock,
            cluster: cluster.clone(),
            token: token.to_string(),
        };
        member.core.process = Some(backend.launch(member.launch_spec()).await?);
        member.core.note_pid();
        started.push(member);
    }
    // A member is healthy only once a majority is up: all are started first.
    for member in &mut started {
        member.healthy().await?;
    }
    Ok(started)
}

impl EtcdMember {
    fn launch_spec(&self) -> Launch {
        let (ip, name) = (self.core.ip, self.core.name.as_str());
        let client = format!("http://{ip}:{}", self.core.port);
        let peer = format!("http://{ip}:{}", self.peer_port);
        let data = self.core.dir.join("data").display().to_string();
        let args = [
            ("--name", name),
            ("--data-dir", &data),
            ("--listen-client-urls", &client),
            ("--advertise-client-urls", &client),
            ("--listen-peer-urls", &peer),
            ("--initial-advertise-peer-urls", &peer),
            ("--initial-cluster", &self.cluster),
            ("--initial-cluster-state", "new"),
            ("--initial-cluster-token", &self.token),
            ("--logger", "zap"),
            ("--log-outputs", "stderr"),
        ];
        Launch {
            name: self.core.name.clone(),
            program: Program::Found(self.program.clone()),
            args: args.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            env: Vec::new(),
            dir: self.core.dir.clone(),
            reads: Vec::new(),
            writes: Vec::new(),
            output: self.output_log(),
            served_clock: self.clock.clone(),
            // A group of its own, for a cut between members to tell its
            // connections from its peers' (they all dial from 127.0.0.1);
            // only root may take one, and only root cuts links.
            user: nix::unistd::geteuid()
                .is_root()
                .then(|| (0, nemesis::net::member_gid(ip))),
            forget_on_restart: Vec::new(),
        }
    }

    /// Polls until the member says it is healthy and which process it is,
    /// or fails early if the process exited.
    async fn healthy(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = self.addr();
        loop {
            if let Some(status) = self.core.exited().await {
                return Err(self.error(&format!("exited at start ({status})")));
            }
            let a = addr.clone();
            let seen = tokio::task::spawn_blocking(move || {
                let gateway = Gateway::new(None, Duration::from_millis(500)).ok()?;
                let (_, health) = gateway.get(&a, etcd::HEALTH).ok()?;
                if !etcd::healthy(&health) {
                    return None;
                }
                let (_, metrics) = gateway.get(&a, etcd::METRICS).ok()?;
                etcd::started(&metrics)
            })
            .await
            .ok()
            .flatten();
            match seen {
                Some(started) => {
                    self.core.identity = started;
                    return Ok(());
                }
                None if Instant::now() > deadline => {
                    return Err(self.error(&format!("was not healthy within {READY_TIMEOUT:?}")))
                }
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The member as a cut between members names it: address, peer port
    /// and the group id it runs with.
    pub fn peer(&self) -> nemesis::net::Member {
        nemesis::net::Member {
            ip: self.core.ip,
            peer_port: self.peer_port,
            gid: nemesis::net::member_gid(self.core.ip),
        }
    }
}

impl Server for EtcdMember {
    fn role(&self) -> &'static str {
        "lock"
    }
}

/// A restart starts the member again on its data: it replays its log and
/// rejoins (etcd fsyncs every entry before acknowledging it). Healthy again
/// means its cluster has a leader, so a restart of a majority's last member
/// waits for the election.
impl Kind for EtcdMember {
    fn core(&self) -> &Managed {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Managed {
        &mut self.core
    }

    fn ready(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.healthy())
    }
}

/// The file in a member's folder that names its current process, for its reaper.
const PID_FILE: &str = "etcd.pid";
